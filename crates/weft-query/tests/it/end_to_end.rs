//! A query planned from SQL runs in weft-probe's interpreter; its partials travel in the
//! compact form, merge per window and finish into top-N rows.

use weft_probe::agg::{KeyValue, Output, Partial};
use weft_probe::{event, query, tracepoint};
use weft_query::merge::{Cell, Windows, rows};
use weft_query::{ListCatalog, plan};

tracepoint!(static REQ = "e2e.request", Info, fields = [route: str, bytes: u64]);

#[test]
fn sql_to_probe_to_rows() {
    REQ.id();
    let cat = ListCatalog::new().probe("e2e.request", REQ.fields_spec());
    let p = plan(
        "SELECT route, count(*) AS n, sum(bytes) FROM tp('e2e.request') WHERE bytes >= 10 GROUP BY route ORDER BY n DESC LIMIT 2 INTERVAL 1s",
        &cat,
    )
    .unwrap();
    let q = query::install(&p.probe_plan().unwrap()).unwrap();
    let mut windows = Windows::new(4);
    // two "agents" (threads here), one window
    for part in 0..2u64 {
        let h = std::thread::spawn(move || {
            for (route, n) in [("/a", 5u64), ("/b", 3), ("/c", 1)] {
                for _ in 0..n * (part + 1) {
                    event!(REQ, route = route, bytes = 100u64);
                }
            }
            event!(REQ, route = "/a", bytes = 1u64); // filtered out
        });
        h.join().unwrap();
        let shipped = query::collect(q).unwrap().encode();
        windows.add(1_000_000_000, &Partial::decode(&shipped).unwrap()).unwrap();
    }
    query::detach(q);
    let done = windows.take_before(2_000_000_000);
    assert_eq!(done.len(), 1);
    let r = rows(&p, &done[0].1);
    let s = |x: &str| Cell::Key(KeyValue::Str(x.as_bytes().to_vec()));
    assert_eq!(
        r,
        vec![
            vec![s("/a"), Cell::Value(Output::Int(15)), Cell::Value(Output::Int(1500))],
            vec![s("/b"), Cell::Value(Output::Int(9)), Cell::Value(Output::Int(900))],
        ]
    );
}

#[test]
fn windows_are_bounded() {
    let mut w = Windows::new(2);
    for t in [3u64, 1, 2, 0] {
        w.add(t, &Partial::default()).unwrap();
    }
    assert_eq!(w.windows.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(w.late, 1, "window 0 came after window 1 was evicted");
}

tracepoint!(static GW = "e2e.gateway", Info, fields = [client: str, op: u64]);
tracepoint!(static BK = "e2e.blocker", Info, fields = [object: str, len: u64]);

/// A happened-before join planned from SQL: the upstream half packs the client into the
/// request's baggage, the downstream half (another thread, as another process would) sums by
/// it; the rows come out in the query's shape.
#[test]
fn happened_before_join_to_rows() {
    GW.id();
    BK.id();
    let cat =
        ListCatalog::new().probe("e2e.gateway", GW.fields_spec()).probe("e2e.blocker", BK.fields_spec());
    let p = plan(
        "SELECT g.client, b.object, sum(b.len) FROM tp('e2e.gateway') AS g JOIN tp('e2e.blocker') AS b \
         ON g -> b WHERE g.op = 2 GROUP BY g.client, b.object",
        &cat,
    )
    .unwrap();
    assert!(p.probe_plan().is_none());
    let jp = p.join_plans().unwrap();
    assert_eq!(jp.upstream.carry.len(), 1);
    let up = query::install(&jp.upstream).unwrap();
    let down = query::install(&jp.downstream).unwrap();
    for (client, op, objects) in
        [("c1", 2u64, &[("o1", 10u64), ("o2", 5)][..]), ("c2", 2, &[("o1", 7)]), ("c3", 1, &[("o1", 99)])]
    {
        let header = {
            let _b = weft_probe::baggage::enter(None);
            event!(GW, client = client, op = op);
            weft_probe::baggage::header()
        };
        let objects = objects.to_vec();
        std::thread::spawn(move || {
            let _b = weft_probe::baggage::enter(header.as_deref());
            for (object, len) in objects {
                event!(BK, object = object, len = len);
            }
        })
        .join()
        .unwrap();
    }
    let mut windows = Windows::new(1);
    windows.add(0, &query::collect(down).unwrap()).unwrap();
    assert_eq!(query::collect(up).unwrap().events, 2);
    query::detach(up);
    query::detach(down);
    let done = windows.take_before(1);
    let s = |x: &str| Cell::Key(KeyValue::Str(x.as_bytes().to_vec()));
    let mut r = rows(&p, &done[0].1);
    r.sort_by_key(|row| format!("{row:?}"));
    assert_eq!(
        r,
        vec![
            vec![s("c1"), s("o1"), Cell::Value(Output::Int(10))],
            vec![s("c1"), s("o2"), Cell::Value(Output::Int(5))],
            vec![s("c2"), s("o1"), Cell::Value(Output::Int(7))],
        ]
    );
}
