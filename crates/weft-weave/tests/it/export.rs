//! The OTLP/HTTP exporter against a scripted receiver: which answers are retried, after how
//! long, which are refused and counted — through `Client::deliver` and through the sink.

use std::sync::Arc;
use std::time::Duration;

use weft_model::{Span, SpanId, TraceId};
use weft_testkit::http::{Answer, Scripted};
use weft_weave::export::{Client, ClientOptions, Outcome, RetryPolicy};
use weft_weave::sink::{HttpOptions, SinkHandle, SinkSpec};

fn spans(n: u64) -> Vec<Span> {
    (1..=n)
        .map(|i| Span {
            trace_id: TraceId::from_u128(7),
            span_id: SpanId::from_u64(i),
            name: "op".into(),
            ..Span::default()
        })
        .collect()
}

/// Quick retries so that the tests do not wait for the default backoff.
fn quick(max_retries: Option<u32>) -> RetryPolicy {
    RetryPolicy {
        initial: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        max_retries,
        ..RetryPolicy::default()
    }
}

fn deliver(server: &Scripted, policy: RetryPolicy) -> (Outcome, u32) {
    let client = Client::new(&ClientOptions::new(server.endpoint()));
    let body = client.encode(&spans(3));
    let d = client.deliver(&body, false, &mut policy.retries(1), std::thread::sleep);
    (d.outcome, d.requests)
}

#[test]
fn retry_after_is_waited_for_before_the_next_attempt() {
    let server = Scripted::start(vec![Answer::status(503).header("Retry-After", "1")]);
    let (outcome, requests) = deliver(&server, quick(Some(3)));
    assert_eq!(outcome, Outcome::Acked { rejected: 0, fsynced: false });
    assert_eq!(requests, 2);
    let seen = server.seen();
    assert_eq!(seen.iter().map(|s| s.status).collect::<Vec<_>>(), [503, 200]);
    assert!(seen[0].line.starts_with("POST /v1/traces "), "{}", seen[0].line);
    let waited = seen[1].at - seen[0].at;
    assert!(waited >= Duration::from_secs(1), "retried after {waited:?}, Retry-After said 1 s");
}

#[test]
fn unauthorized_not_found_and_server_errors_are_retried() {
    let server = Scripted::start(
        [401, 403, 404, 405, 408, 429, 500, 502, 504].into_iter().map(Answer::status).collect(),
    );
    let (outcome, requests) = deliver(&server, quick(Some(20)));
    assert_eq!(outcome, Outcome::Acked { rejected: 0, fsynced: false });
    assert_eq!(requests, 10);
    assert!(server.seen().iter().all(|s| s.body_len > 0));
}

#[test]
fn bad_request_too_large_and_unsupported_type_are_refused_at_once() {
    for status in [400, 413, 415] {
        let server = Scripted::start(vec![Answer::status(status)]);
        let (outcome, requests) = deliver(&server, quick(Some(5)));
        assert!(
            matches!(outcome, Outcome::Refused { status: s, .. } if s == status),
            "{status}: {outcome:?}"
        );
        assert_eq!(requests, 1, "{status}");
    }
}

#[test]
fn retries_end_when_the_policy_s_count_is_spent() {
    let server = Scripted::start(vec![Answer::status(503); 10]);
    let (outcome, requests) = deliver(&server, quick(Some(2)));
    assert!(matches!(outcome, Outcome::Retry { status: Some(503), .. }), "{outcome:?}");
    assert_eq!(requests, 3);
}

#[test]
fn a_connection_refused_is_retried() {
    let port = weft_testkit::free_port();
    let client = Client::new(&ClientOptions::new(format!("http://127.0.0.1:{port}")));
    let d = client.deliver(b"x", false, &mut quick(Some(2)).retries(1), std::thread::sleep);
    assert!(matches!(d.outcome, Outcome::Retry { status: None, .. }), "{:?}", d.outcome);
    assert_eq!(d.requests, 3);
}

fn sink(server: &Scripted, max_retries: u32) -> weft_weave::sink::SinkReport {
    let h = SinkHandle::start(SinkSpec::OtlpHttp(HttpOptions {
        url: server.endpoint(),
        batch_spans: 4,
        max_retries,
        ..HttpOptions::default()
    }))
    .unwrap();
    h.send(&Arc::new(spans(4)));
    h.send(&Arc::new(spans(4)));
    h.finish().unwrap()
}

#[test]
fn the_sink_counts_refused_batches_and_goes_on() {
    let server = Scripted::start(vec![Answer::status(413)]);
    let rep = sink(&server, 5);
    assert_eq!((rep.spans, rep.failed_spans, rep.requests, rep.retries), (4, 4, 2, 0));
    assert!(rep.last_error.as_deref().is_some_and(|e| e.contains("HTTP 413")), "{:?}", rep.last_error);
}

#[test]
fn the_sink_retries_an_unauthorized_batch() {
    let server = Scripted::start(vec![Answer::status(401), Answer::status(503).header("Retry-After", "0")]);
    let rep = sink(&server, 5);
    assert_eq!((rep.spans, rep.failed_spans, rep.requests, rep.retries), (8, 0, 4, 2));
}

#[test]
fn an_fsynced_acknowledgement_is_asked_for_and_read() {
    let server = Scripted::start(vec![Answer::status(200).header("weft-ack", "fsync"), Answer::status(200)]);
    let client =
        Client::new(&ClientOptions { ack_after_fsync: true, ..ClientOptions::new(server.endpoint()) });
    let body = client.encode(&spans(3));
    assert_eq!(client.send(&body, false), Outcome::Acked { rejected: 0, fsynced: true });
    // A receiver that does not confirm (not weft serve): acknowledged, not known to be fsynced.
    assert_eq!(client.send(&body, false), Outcome::Acked { rejected: 0, fsynced: false });
    for s in server.seen() {
        assert!(s.headers.contains(&("weft-ack".to_owned(), "fsync".to_owned())), "{:?}", s.headers);
    }
    let plain = Client::new(&ClientOptions::new(server.endpoint()));
    plain.send(&body, false);
    assert!(server.seen()[2].headers.iter().all(|(k, _)| k != "weft-ack"));
}
