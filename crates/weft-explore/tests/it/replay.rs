//! The loop replays exhaustive traces with three injected problems (weft-synth's `vaif`
//! generator) and must localize each to its function by the right principle, with few
//! tracepoints enabled, and find nothing in the quiet request type.

use std::collections::BTreeSet;

use weft_explore::Error;
use weft_explore::backend::Replay;
use weft_explore::explore::{Budget, Explorer, Options, Report};
use weft_explore::forest::{Forest, Principle};
use weft_explore::space::{Learner, SearchSpace};
use weft_explore::strategy::Strategy;
use weft_synth::vaif::{CATALOG, CHECKOUT, Generator, KEY, Shape};

fn learn(shape: Shape, traces: usize) -> SearchSpace {
    let mut l = Learner::default();
    for t in Generator::new(shape, 1).take(traces) {
        l.add(&t).unwrap();
    }
    l.finish().unwrap()
}

fn known(space: &SearchSpace) -> BTreeSet<String> {
    space.tracepoints.iter().map(|t| t.name.clone()).collect()
}

fn replay(
    space: &SearchSpace,
    shape: Shape,
    options: Options,
    dir: Option<&std::path::Path>,
) -> (Report, Forest) {
    let mut backend = Replay::new(Generator::new(shape, 2), 100, space.always_on.clone(), known(space));
    let mut ex = Explorer::new(space, options).unwrap();
    if let Some(d) = dir {
        ex = ex.with_state_dir(d.to_owned());
    }
    let report = ex.run(&mut backend).unwrap();
    assert!(backend.enabled().is_empty(), "shut-down disables everything the loop enabled");
    (report, ex.forest().clone())
}

fn options(strategy: Strategy) -> Options {
    Options {
        strategy,
        budget: Budget { traces_per_epoch: 1000, ..Budget::default() },
        max_epochs: Some(60),
        ..Options::default()
    }
}

#[test]
fn localizes_each_problem_by_its_principle() {
    let shape = Shape::default();
    let problems = shape.problems();
    let space = learn(shape, 200);
    let dir = std::env::temp_dir().join(format!("weft-explore-it-{}", std::process::id()));
    let (report, forest) = replay(&space, shape, options(Strategy::Hierarchical), Some(&dir));
    let beyond = report.tracepoints_total - report.tracepoints_always_on;
    println!("problem | principle | localized to | enabled / total | epoch");
    for f in &report.findings {
        println!(
            "{} | {} | {} | {} / {} | {}",
            f.request_type,
            f.principle.as_str(),
            f.tracepoints.join(" ⊂ "),
            f.enabled,
            report.tracepoints_total,
            f.epoch
        );
    }
    println!(
        "total: {} enabled beyond {} always on, of {} tracepoints, {} epochs",
        report.tracepoints_enabled, report.tracepoints_always_on, report.tracepoints_total, report.epochs
    );
    let found = |p: Principle| {
        report
            .findings
            .iter()
            .find(|f| f.principle == p)
            .unwrap_or_else(|| panic!("no {} finding: {:#?}", p.as_str(), report.findings))
    };
    assert_eq!(found(Principle::Variance).tracepoints[0], problems.variance);
    assert_eq!(found(Principle::Slow).tracepoints[0], problems.slow);
    let key = found(Principle::Key);
    assert_eq!(key.tracepoints[0], problems.key);
    assert_eq!((key.key.as_deref(), key.key_tracepoint.as_deref()), (Some(KEY), Some(CHECKOUT)));
    assert!(key.correlation.is_some_and(|r| r > 0.9), "{key:?}");
    assert_eq!(report.findings.len(), 3, "{:#?}", report.findings);
    assert!(report.findings.iter().all(|f| f.request_type == CHECKOUT), "the quiet type has no finding");
    let catalog = report.request_types.iter().find(|t| t.name == CATALOG).unwrap();
    assert_eq!((catalog.hypotheses, catalog.done), (0, true));
    assert!(
        report.tracepoints_enabled * 10 <= beyond,
        "{} enabled of {beyond} not always on",
        report.tracepoints_enabled
    );
    // Principle 3 reported the key (and nothing for the quiet type's random one).
    assert!(
        report.keys.iter().any(|k| k.key == KEY && k.tracepoint == CHECKOUT && k.pearson > 0.5),
        "{:?}",
        report.keys
    );
    assert!(report.keys.iter().all(|k| k.tracepoint != CATALOG), "{:?}", report.keys);
    // Every hypothesis got its + and ~ nodes from the next epoch's 80 checkouts; the slow
    // path's tracepoints are only in its 4 rare traces.
    let tree = &forest.trees[CHECKOUT];
    for h in &tree.hypotheses {
        let (Some(with), Some(without)) = (&h.with, &h.without) else {
            panic!("hypothesis #{} not evaluated", h.id)
        };
        assert_eq!((with.epoch, with.traces + without.traces), (h.epoch + 1, 80), "#{}", h.id);
        if h.principle == Principle::Slow {
            assert_eq!(with.traces, 4, "#{}", h.id);
        }
    }
    // The forest was saved; it reads back and explains the enabled tracepoints.
    let saved = Forest::load(&dir).unwrap();
    assert_eq!(saved, forest);
    let text = saved.render();
    assert!(text.contains(&format!("enable {}", problems.variance)), "{text}");
    let why = saved.explain(CHECKOUT, [CHECKOUT, "cart.load:entry", problems.key.as_str(), "auth.verify.f0"]);
    assert!(why[0].contains("root"), "{why:?}");
    assert!(why[1].contains("always on"), "{why:?}");
    assert!(why[2].contains("hypothesis #") && why[2].contains("key"), "{why:?}");
    assert!(why[3].ends_with("not enabled by weft explore"), "{why:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flat_search_localizes_too() {
    let shape = Shape::default();
    let problems = shape.problems();
    let space = learn(shape, 200);
    let (report, _) = replay(&space, shape, options(Strategy::Flat), None);
    let tops: BTreeSet<(&str, &str)> =
        report.findings.iter().map(|f| (f.principle.as_str(), f.tracepoints[0].as_str())).collect();
    let want: BTreeSet<(&str, &str)> = [
        ("variance", problems.variance.as_str()),
        ("slow", problems.slow.as_str()),
        ("key", problems.key.as_str()),
    ]
    .into();
    assert_eq!(tops, want);
}

#[test]
fn bad_inputs_are_named_errors() {
    let shape = Shape { depth: 2, fanout: 2 };
    let space = learn(shape, 50);
    // A request type the search space does not know.
    let o = Options { request_types: vec!["DELETE /x".into()], ..Options::default() };
    let e = Explorer::new(&space, o).err().unwrap();
    assert!(e.to_string().starts_with("request type \"DELETE /x\" is not in the search space"), "{e}");
    // One it knows that never occurs in the replay.
    let o = Options { request_types: vec![CATALOG.into()], ..Options::default() };
    let only_checkouts = Generator::new(shape, 3).filter(|t| t[0].name == CHECKOUT).take(50);
    let mut b = Replay::new(only_checkouts, 25, space.always_on.clone(), known(&space));
    let e = Explorer::new(&space, o).unwrap().run(&mut b).unwrap_err();
    assert!(matches!(&e, Error::NeverOccurred(t) if t == CATALOG), "{e}");
    // A replayed trace without a root.
    let mut broken: Vec<_> = Generator::new(shape, 4).take(3).collect();
    broken[1][0].parent_span_id = Some(broken[1][1].span_id);
    let id = broken[1][0].trace_id.to_string();
    let mut b = Replay::new(broken.into_iter(), 10, space.always_on.clone(), known(&space));
    let e = Explorer::new(&space, Options::default()).unwrap().run(&mut b).unwrap_err().to_string();
    assert!(e.contains(&id) && e.contains("no root span"), "{e}");
    // Search-space files with broken bins or unknown tracepoints.
    let text = space.to_toml().replacen("bins = []", "bins = [5.0, 1.0]", 1);
    let e = SearchSpace::parse(&text, "space.toml").unwrap_err().to_string();
    assert!(
        e.contains("space.toml") && e.contains("keys[0].bins") && e.contains("not strictly increasing"),
        "{e}"
    );
    let text = space.to_toml().replacen("\"cart.load.f0:entry\"", "\"cart.load.nope:entry\"", 1);
    let e = SearchSpace::parse(&text, "space.toml").unwrap_err().to_string();
    assert!(e.contains("\"cart.load.nope:entry\": unknown tracepoint"), "{e}");
}

#[test]
fn bins_split_groups() {
    // With bins on the key, groups are split by bin: the normal path's requests form one
    // group per bin, and within a bin the wait no longer correlates enough to be a finding.
    let shape = Shape::default();
    let mut space = learn(shape, 200);
    let k = space.keys.iter_mut().find(|k| k.key == KEY && k.tracepoint == CHECKOUT).unwrap();
    k.bins = vec![10.0, 20.0];
    let space = SearchSpace::parse(&space.to_toml(), "edited.toml").unwrap();
    let o = Options { max_epochs: Some(1), ..options(Strategy::Hierarchical) };
    let mut backend = Replay::new(Generator::new(shape, 2), 100, space.always_on.clone(), known(&space));
    let mut ex = Explorer::new(&space, o).unwrap();
    ex.run(&mut backend).unwrap();
    let tree = &ex.forest().trees[CHECKOUT];
    let first = tree.hypotheses.iter().map(|h| (h.principle, h.key.clone())).collect::<Vec<_>>();
    assert!(first.iter().all(|(p, _)| *p != Principle::Key), "{first:?}");
    // Without bins, the first epoch pursues the key.
    let space = learn(shape, 200);
    let o = Options { max_epochs: Some(1), ..options(Strategy::Hierarchical) };
    let mut backend = Replay::new(Generator::new(shape, 2), 100, space.always_on.clone(), known(&space));
    let mut ex = Explorer::new(&space, o).unwrap();
    ex.run(&mut backend).unwrap();
    let tree = &ex.forest().trees[CHECKOUT];
    assert!(tree.hypotheses.iter().any(|h| h.principle == Principle::Key && h.key.as_deref() == Some(KEY)));
}

/// Catalog requests, quiet for the first `quiet` traces; after that every other one waits
/// 12 ms more at the end of `catalog.scan` (everything from that instant on is shifted).
fn catalog_turning_erratic(quiet: usize) -> impl Iterator<Item = Vec<weft_model::Span>> {
    const DELAY: u64 = 12_000_000;
    Generator::new(Shape::default(), 2).filter(|t| t[0].name == CATALOG).enumerate().map(move |(i, mut t)| {
        if i >= quiet && i % 2 == 0 {
            let at = t.iter().find(|s| s.name == "catalog.scan").unwrap().end_ns;
            for s in &mut t {
                for ts in [&mut s.start_ns, &mut s.end_ns] {
                    if *ts >= at {
                        *ts += DELAY;
                    }
                }
                s.events.iter_mut().filter(|e| e.time_ns >= at).for_each(|e| e.time_ns += DELAY);
            }
        }
        t
    })
}

#[test]
fn a_done_request_type_is_rechecked_and_resumes_when_its_variance_returns() {
    let space = learn(Shape::default(), 200);
    let run = |recheck_every: Option<u64>| {
        let o = Options {
            request_types: vec![CATALOG.to_owned()],
            max_epochs: Some(20),
            recheck_every,
            ..options(Strategy::Hierarchical)
        };
        // 100 catalog requests per epoch: quiet for epochs 0–5, erratic from epoch 6 on
        let mut backend =
            Replay::new(catalog_turning_erratic(600), 100, space.always_on.clone(), known(&space));
        let mut ex = Explorer::new(&space, o).unwrap();
        let report = ex.run(&mut backend).unwrap();
        assert!(backend.enabled().is_empty(), "shut-down disables everything the loop enabled");
        (report, ex.forest().trees[CATALOG].clone())
    };
    // Without re-checks the quiet type is done after its first epoch and never looked at again.
    let (report, tree) = run(None);
    assert_eq!((report.epochs, tree.traces, tree.rechecks, tree.hypotheses.len()), (1, 100, 0, 0));
    // Re-checked every 2 epochs with the skeleton on: epochs 2 and 4 find it quiet (and fetch
    // nothing in epochs 1, 3, 5); epoch 6's re-check sees the variance and resumes it, and the
    // loop localizes the wait to catalog.scan.
    let (report, tree) = run(Some(2));
    assert_eq!(report.epochs, 20);
    let first = tree.hypotheses.first().unwrap_or_else(|| panic!("never resumed: {tree:?}"));
    assert_eq!(first.epoch, 6, "{:?}", tree.hypotheses);
    assert_eq!(first.principle, Principle::Variance);
    let f = report.findings.iter().find(|f| f.principle == Principle::Variance);
    assert_eq!(f.map(|f| f.tracepoints[0].as_str()), Some("catalog.scan"), "{:#?}", report.findings);
    // Done again once localized, it is only re-checked: epochs 0, 2, 4, 6, 7, then every other.
    assert_eq!((tree.resumed, tree.rechecks, tree.traces), (1, 9, 100 * 11), "{tree:?}");
}
