//! WAL record payloads as replay reads them after a crash or corruption: arbitrary bytes must
//! decode to an error, never a panic; whatever decodes must convert back to spans or fail
//! cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_store::wal::{WalRecord, decode_record};

fuzz_target!(|data: &[u8]| {
    if let Ok(WalRecord::Spans(b)) = decode_record(data)
        && let Ok(spans) = b.logical_spans()
    {
        let _ = weft_store::batches_to_spans(&[spans], &[b.events], &[b.links]);
    }
});
