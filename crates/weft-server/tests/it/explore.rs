//! `weft explore`'s hypothesis forest at the collector: stored with the control token, validated
//! (errors name the field), kept in the data directory across a restart, served to the UI.

use std::collections::BTreeMap;

use weft_explore::forest::{EdgeSummary, Finding, Forest, GroupSummary, Hypothesis, Node, Principle, Tree};

use crate::TestServer;

const AUTH: (&str, &str) = ("Authorization", "Bearer tok-9");

fn server(dir: tempfile::TempDir) -> TestServer {
    TestServer::in_dir(dir, |_, cfg| cfg.control_token = Some("tok-9".into()))
}

fn put(s: &TestServer, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let mut req = s.agent.put(&s.url("/api/control/explore/forest"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut r = req.send(body).unwrap();
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

fn group(rep: &str, cv: f64) -> GroupSummary {
    GroupSummary {
        representative: rep.into(),
        path: vec!["POST /checkout".into(), "cart.load".into()],
        count: 40,
        mean_ns: 2.5e6,
        cv: Some(cv),
        high_variance: cv > 0.1,
        consistently_slow: false,
        top_edges: vec![EdgeSummary {
            from: "cart.load".into(),
            to: "cart.save".into(),
            mean_ns: 1e6,
            share: Some(0.7),
        }],
    }
}

fn forest() -> Forest {
    let node = |rep: &str| Node { epoch: 1, traces: 40, groups: vec![group(rep, 0.4)] };
    let h = Hypothesis {
        id: 0,
        parent: None,
        epoch: 0,
        tracepoint: "cart.price".into(),
        principle: Principle::Variance,
        edge: ("cart.load".into(), "cart.save".into()),
        group: "0af7651916cd43dd8448eb211c80319c".into(),
        group_traces: 40,
        group_cv: Some(0.4),
        score: 0.7,
        key: None,
        with: Some(node("0af7651916cd43dd8448eb211c80319d")),
        without: Some(node("0af7651916cd43dd8448eb211c80319e")),
    };
    let finding = Finding {
        request_type: "POST /checkout".into(),
        principle: Principle::Variance,
        tracepoints: vec!["cart.price".into()],
        edge: h.edge.clone(),
        key: None,
        key_tracepoint: None,
        correlation: None,
        share_of_variance: Some(0.7),
        mean_latency_ns: 1e6,
        group: h.group.clone(),
        group_traces: 40,
        epoch: 1,
        enabled: 1,
    };
    let tree = Tree {
        request_type: "POST /checkout".into(),
        traces: 80,
        root: Some(Node {
            epoch: 0,
            traces: 40,
            groups: vec![group("0af7651916cd43dd8448eb211c80319c", 0.4)],
        }),
        hypotheses: vec![h],
        findings: vec![finding],
        keys: Vec::new(),
        done: true,
        rechecks: 0,
        resumed: 0,
    };
    Forest {
        epochs: 2,
        always_on: vec!["POST /*".into()],
        skeleton: Vec::new(),
        trees: BTreeMap::from([(tree.request_type.clone(), tree)]),
    }
}

#[test]
fn forest_is_stored_validated_and_kept_across_a_restart() {
    let s = server(tempfile::tempdir().unwrap());
    // none yet: the UI shows its empty state
    assert_eq!(s.get_json("/api/ui/explore")["forest"], serde_json::Value::Null);
    let body = serde_json::to_vec(&forest()).unwrap();

    // the token is required, like the rest of the control API
    assert_eq!(put(&s, &[], &body).0, 401);
    assert_eq!(put(&s, &[("Authorization", "Bearer nope")], &body).0, 401);

    // malformed forests: 400 naming the field, nothing stored
    let mut v = serde_json::to_value(forest()).unwrap();
    v["trees"]["POST /checkout"]["hypotheses"][0]["principle"] = "luck".into();
    let mut w = serde_json::to_value(forest()).unwrap();
    w["trees"]["POST /checkout"]["hypotheses"][0]["parent"] = 7.into();
    let mut x = serde_json::to_value(forest()).unwrap();
    x["trees"]["POST /checkout"]["root"]["groups"][0]["representative"] = "<img>".into();
    let mut y = serde_json::to_value(forest()).unwrap();
    y["epochs"] = "two".into();
    for (bad, want) in [
        (
            serde_json::to_vec(&v).unwrap(),
            "field trees.POST /checkout.hypotheses[0].principle: unknown variant",
        ),
        (
            serde_json::to_vec(&w).unwrap(),
            "field trees.POST /checkout.hypotheses[0].parent: names no earlier",
        ),
        (
            serde_json::to_vec(&x).unwrap(),
            "field trees.POST /checkout.root.groups[0].representative: not a trace id",
        ),
        (serde_json::to_vec(&y).unwrap(), "field epochs: invalid type"),
        (b"{\"epochs\": 1,".to_vec(), "EOF"),
        (b"[]".to_vec(), "expected struct Forest"),
    ] {
        let (st, text) = put(&s, &[AUTH], &bad);
        assert_eq!(st, 400, "{text}");
        assert!(text.contains(want), "{want:?} in {text}");
    }
    assert_eq!(s.get_json("/api/ui/explore")["forest"], serde_json::Value::Null);
    let (st, _) = put(&s, &[AUTH], &vec![b' '; weft_explore::forest::MAX_BYTES + 1]);
    assert!(st == 413, "{st}");

    // stored: read back as it was sent, in the data directory
    let (st, text) = put(&s, &[AUTH], &body);
    assert_eq!(st, 200, "{text}");
    let path = weft_server::explore::forest_path(s.store.dir());
    assert!(path.is_file(), "{}", path.display());
    let got = s.get_json("/api/ui/explore");
    assert_eq!(serde_json::from_value::<Forest>(got["forest"].clone()).unwrap(), forest());
    assert!(got["updated_unix_ms"].as_u64().is_some_and(|ms| ms > 0), "{got}");

    // a restart keeps it; a later forest replaces it
    let s = server(s.stop());
    let got = s.get_json("/api/ui/explore");
    assert_eq!(serde_json::from_value::<Forest>(got["forest"].clone()).unwrap(), forest());
    let mut next = forest();
    next.epochs = 3;
    assert_eq!(put(&s, &[AUTH], &serde_json::to_vec(&next).unwrap()).0, 200);
    assert_eq!(s.get_json("/api/ui/explore")["forest"]["epochs"], 3);
    // the temporary files are gone
    let dir = path.parent().unwrap();
    let files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files, ["forest.json"], "{files:?}");
}

#[test]
fn without_a_control_token_no_forest_is_taken() {
    let s = TestServer::start();
    let (st, text) = put(&s, &[AUTH], &serde_json::to_vec(&forest()).unwrap());
    assert_eq!(st, 404, "{text}");
    assert!(text.contains("--control-token"), "{text}");
}
