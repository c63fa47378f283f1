//! Integration tests of weft-weave.

mod blkin;
