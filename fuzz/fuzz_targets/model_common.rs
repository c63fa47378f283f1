//! Shared checks of the weft-model fuzz targets.

use weft_model::Span;
use weft_model::codec::stream::{self, Format};

/// Spans compared by their debug text (NaN attributes never equal themselves).
pub fn same(a: &[Span], b: &[Span]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y || format!("{x:?}") == format!("{y:?}"))
}

/// The streaming reader (small batches, lenient) agrees with the whole-buffer decoder:
/// same spans, same number of refused spans, an error exactly when the decoder failed.
pub fn stream_agrees(format: Format, data: &[u8], whole: &Result<(Vec<Span>, u64), String>) {
    let streamed = (|| {
        let mut r = stream::reader(format, data, true).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while r.next_batch(&mut out, 3).map_err(|e| e.to_string())? {}
        Ok::<_, String>((out, r.rejected().count))
    })();
    match (whole, &streamed) {
        (Ok((a, ra)), Ok((b, rb))) => {
            assert!(same(a, b), "streaming and whole-buffer decoders disagree");
            assert_eq!(ra, rb, "refused counts differ");
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!("one decoder failed, the other did not: {a:?} vs {b:?}"),
    }
}
