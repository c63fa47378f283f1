//! Shared check: spans a receiver accepted must survive the store's representation exactly
//! (Arrow batches → WAL record → decode → spans).

use weft_store::wal::{WalRecord, decode_record, encode_spans};

pub fn store_round_trip(spans: &[weft_model::Span]) {
    let batches = weft_store::spans_to_batches(spans).expect("decoded spans always convert to Arrow");
    let mut payload = Vec::new();
    encode_spans(&batches, &mut payload).expect("WAL encoding of valid batches");
    let Ok(WalRecord::Spans(back)) = decode_record(&payload) else { panic!("WAL record does not decode") };
    let logical = back.logical_spans().expect("stored spans get their resources back");
    let again = weft_store::batches_to_spans(&[logical], &[back.events], &[back.links]).expect("stored spans read back");
    assert_eq!(again.len(), spans.len());
    for (a, b) in again.iter().zip(spans) {
        // NaN attributes compare unequal to themselves; compare their debug text instead.
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }
}
