//! weft CLI integration tests: the real binary (`CARGO_BIN_EXE_weft`) on real files.

mod convert;
