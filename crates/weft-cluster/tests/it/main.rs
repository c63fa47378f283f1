//! Integration tests of weft-cluster.

mod cluster;
