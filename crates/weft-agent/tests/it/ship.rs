//! The sender against a scripted collector: a batch stays in the spool until a 2xx (a 401 is
//! retried, not dropped); only 400/413/415 drop a batch, counted as refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weft_agent::metrics::Metrics;
use weft_agent::ship::{self, SenderConfig};
use weft_agent::spool::{Spool, SpoolConfig};
use weft_testkit::http::{Answer, Scripted};

#[test]
fn unauthorized_is_retried_and_bad_request_is_refused_and_counted() {
    let server = Scripted::start([401, 200, 400, 200].into_iter().map(Answer::status).collect());
    let d = tempfile::tempdir().unwrap();
    let spool = Arc::new(Spool::open(SpoolConfig::new(d.path(), 1 << 20)).unwrap());
    for (i, n) in [3u32, 5, 7].into_iter().enumerate() {
        spool.append(&[i as u8; 40], n, false).unwrap();
    }
    let metrics = Arc::new(Metrics::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut cfg = SenderConfig::new(server.endpoint());
    cfg.max_backoff = Duration::from_millis(20);
    let sender = {
        let (spool, metrics, stop) = (spool.clone(), metrics.clone(), stop.clone());
        std::thread::spawn(move || ship::run(spool, cfg, metrics, stop, Duration::ZERO))
    };
    // Until every batch is acknowledged (a deadline only so that a failure cannot hang CI).
    let deadline = Instant::now() + Duration::from_secs(60);
    while spool.stats().pending_batches > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    let statuses: Vec<u16> = server.seen().iter().map(|s| s.status).collect();
    assert_eq!(statuses, [401, 200, 400, 200], "the first batch is sent again after the 401");
    let lens: Vec<usize> = server.seen().iter().map(|s| s.body_len).collect();
    assert_eq!(lens, [40; 4]);
    // A batch leaves the spool on the acknowledgement: the agent asks for one after the fsync.
    for s in server.seen() {
        assert!(s.headers.iter().any(|(k, v)| k == "weft-ack" && v == "fsync"), "{:?}", s.headers);
    }
    let m = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!((m(&metrics.batches_sent), m(&metrics.spans_sent)), (2, 3 + 7));
    assert_eq!((m(&metrics.batches_refused), m(&metrics.spans_refused)), (1, 5));
    assert_eq!(m(&metrics.send_errors), 1);
    assert_eq!(spool.stats().pending_batches, 0);
}
