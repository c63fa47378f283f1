//! weft-query integration tests (one binary).

mod end_to_end;
mod language;
