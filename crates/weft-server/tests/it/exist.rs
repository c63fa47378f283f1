//! EXIST's cluster level as pure functions: the coverage optimizer's properties, profiles,
//! merging and accuracy, the anomaly rules.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use weft_server::exist::{
    AnomalyRule, MAX_ERROR, OptimizerConfig, Profile, Replica, RuleState, ServiceInput, Trigger, period_ms,
    plan,
};

fn replicas() -> impl Strategy<Value = Vec<Replica>> {
    proptest::collection::vec((0u8..5, 1u32..50, 0u64..(1 << 30)), 0..12).prop_map(|v| {
        v.into_iter()
            .map(|(a, pid, size)| Replica { agent: format!("node-{a}"), pid, binary_bytes: size })
            .collect()
    })
}

fn services() -> impl Strategy<Value = Vec<ServiceInput>> {
    proptest::collection::vec((replicas(), -0.5f64..1.5, proptest::option::of(-0.2f64..1.2)), 0..6).prop_map(
        |v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (replicas, priority, instability))| ServiceInput {
                    service: format!("svc-{i}"),
                    replicas,
                    priority,
                    instability,
                })
                .collect()
        },
    )
}

fn config() -> impl Strategy<Value = OptimizerConfig> {
    (0.0f64..10.0, 0.0f64..0.05, 1u64..300, 0.0f64..1.5, [0.0f64..2.0, 0.0f64..2.0, 0.0f64..2.0]).prop_map(
        |(overhead, budget, round, sample, weights)| OptimizerConfig {
            reference_overhead: overhead,
            overhead_budget: budget,
            round: Duration::from_secs(round),
            sample,
            weights,
            ..OptimizerConfig::default()
        },
    )
}

proptest! {
    #[test]
    fn periods_stay_in_bounds_and_under_the_overhead_cap(s in services(), cfg in config(), seed in any::<u64>()) {
        let p = plan(&s, &cfg, &Trigger::Profiling, seed);
        for c in &p.captures {
            prop_assert!((100..=2000).contains(&c.period_ms), "{}", c.period_ms);
            prop_assert!(c.period_ms as f64 <= cfg.overhead_cap_ms(), "{} > cap {}", c.period_ms, cfg.overhead_cap_ms());
        }
        // Every service is either planned or skipped with a reason.
        prop_assert_eq!(p.captures.len() + p.skipped.len(), s.len());
    }

    #[test]
    fn every_service_with_a_replica_gets_one(s in services(), seed in any::<u64>()) {
        let cfg = OptimizerConfig::default();
        let p = plan(&s, &cfg, &Trigger::Profiling, seed);
        for svc in s.iter().filter(|x| !x.replicas.is_empty()) {
            let c = p.captures.iter().find(|c| c.service == svc.service).expect("planned");
            prop_assert!(!c.replicas.is_empty());
            // Chosen among the service's own replicas, none twice.
            for r in &c.replicas {
                prop_assert!(svc.replicas.contains(r));
            }
            let mut u = c.replicas.clone();
            u.dedup();
            prop_assert_eq!(u.len(), c.replicas.len());
            // Spread: no node gets a second replica while a node with replicas has none.
            let nodes: std::collections::BTreeSet<&str> = svc.replicas.iter().map(|r| &*r.agent).collect();
            let chosen: std::collections::BTreeSet<&str> = c.replicas.iter().map(|r| &*r.agent).collect();
            prop_assert!(chosen.len() == nodes.len().min(c.replicas.len()));
        }
    }

    #[test]
    fn an_anomaly_selects_all_replicas_of_its_service(s in services(), seed in any::<u64>(), pick in 0usize..6) {
        let cfg = OptimizerConfig::default();
        let Some(target) = s.get(pick) else { return Ok(()) };
        let p = plan(&s, &cfg, &Trigger::Anomaly(target.service.clone()), seed);
        let mut all = target.replicas.clone();
        all.sort();
        all.dedup();
        prop_assert!(p.captures.iter().all(|c| c.service == target.service));
        if all.is_empty() {
            prop_assert!(p.captures.is_empty() && p.skipped.len() == 1);
        } else {
            prop_assert_eq!(&p.captures[0].replicas, &all);
        }
    }

    #[test]
    fn the_same_inputs_and_seed_give_the_same_plan(s in services(), cfg in config(), seed in any::<u64>()) {
        let a = plan(&s, &cfg, &Trigger::Profiling, seed);
        let mut rev = s.clone();
        rev.reverse();
        prop_assert_eq!(&a, &plan(&s, &cfg, &Trigger::Profiling, seed));
        prop_assert_eq!(&a, &plan(&rev, &cfg, &Trigger::Profiling, seed));
    }

    #[test]
    fn merging_is_never_less_accurate_than_the_least_accurate_replica(
        parts in proptest::collection::vec(proptest::collection::vec((0usize..6, 1u64..1000), 1..6), 1..5),
        reference in proptest::collection::vec((0usize..6, 1u64..1000), 1..6),
    ) {
        let prof = |v: &Vec<(usize, u64)>| {
            let c: Vec<(String, u64)> = v.iter().map(|(f, n)| (format!("f{f}"), *n)).collect();
            Profile::from_counts(&c)
        };
        let r = prof(&reference);
        let mut merged = Profile::default();
        let mut worst = f64::MAX;
        for p in &parts {
            let p = prof(p);
            let a = p.accuracy(&r);
            prop_assert!((0.0..=1.0).contains(&a));
            worst = worst.min(a);
            merged.merge(&p);
        }
        // Shares of the merge are a weighted mean of the parts': the error is convex.
        prop_assert!(merged.accuracy(&r) >= worst - 1e-9);
    }
}

#[test]
fn the_temporal_decider_weighs_priority_size_and_instability() {
    let cfg = OptimizerConfig { overhead_budget: 1.0, ..OptimizerConfig::default() };
    let svc = |priority, size, instability| ServiceInput {
        service: "s".into(),
        replicas: vec![Replica { agent: "a".into(), pid: 1, binary_bytes: size }],
        priority,
        instability,
    };
    let low = period_ms(&svc(0.0, 0, Some(0.0)), &cfg).unwrap();
    let high = period_ms(&svc(1.0, 1 << 30, Some(1.0)), &cfg).unwrap();
    assert_eq!((low, high), (100, 2000));
    let mid = period_ms(&svc(1.0, 0, Some(0.0)), &cfg).unwrap();
    assert_eq!(mid, 100 + (0.4 * 1900.0) as u64);
    // Unknown stability counts as unstable.
    assert!(period_ms(&svc(0.0, 0, None), &cfg).unwrap() > low);
    // The overhead cap: 1 % of a 60 s round at 2.8x is 214 ms.
    let capped = period_ms(&svc(1.0, 1 << 30, Some(1.0)), &OptimizerConfig::default()).unwrap();
    assert_eq!(capped, 214);
    let none = OptimizerConfig { overhead_budget: 0.001, ..OptimizerConfig::default() };
    let e = period_ms(&svc(1.0, 0, None), &none).unwrap_err();
    assert!(e.contains("below the shortest period"), "{e}");
}

#[test]
fn profiling_samples_by_priority_and_keeps_singletons() {
    let cfg = OptimizerConfig::default();
    let reps: Vec<Replica> =
        (0..8).map(|i| Replica { agent: format!("node-{}", i % 4), pid: 100 + i, binary_bytes: 0 }).collect();
    let svc = |name: &str, priority, replicas: Vec<Replica>| ServiceInput {
        service: name.into(),
        replicas,
        priority,
        instability: None,
    };
    let p = plan(
        &[svc("hi", 1.0, reps.clone()), svc("lo", 0.0, reps.clone()), svc("one", 0.0, reps[..1].to_vec())],
        &cfg,
        &Trigger::Profiling,
        7,
    );
    let n = |s: &str| p.captures.iter().find(|c| c.service == s).unwrap().replicas.len();
    assert_eq!((n("hi"), n("lo"), n("one")), (4, 2, 1));
}

#[test]
fn accuracy_is_exists_measure() {
    let p = |v: &[(&str, u64)]| {
        Profile::from_counts(&v.iter().map(|(f, n)| (f.to_string(), *n)).collect::<Vec<_>>())
    };
    let reference = p(&[("a", 50), ("b", 50)]);
    assert_eq!(p(&[("a", 5), ("b", 5)]).accuracy(&reference), 1.0);
    assert_eq!(p(&[("c", 5)]).error(&reference), MAX_ERROR);
    assert_eq!(p(&[("c", 5)]).accuracy(&reference), 0.0);
    // a: 0.75 vs 0.5, b: 0.25 vs 0.5 → error 0.5, accuracy 0.75.
    assert_eq!(p(&[("a", 3), ("b", 1)]).accuracy(&reference), 0.75);
    // Two replicas that each saw half of the mix merge into the whole.
    let mut m = p(&[("a", 10)]);
    m.merge(&p(&[("b", 10)]));
    assert_eq!(m.accuracy(&reference), 1.0);
    assert_eq!(p(&[("a", 10)]).change(&p(&[("b", 10)])), 1.0);
    assert_eq!(Profile::default().accuracy(&reference), 0.0);
}

#[test]
fn rules_parse_with_named_mistakes() {
    let r = AnomalyRule::parse("service=api p99>50ms window=10s functions=handle_*,lookup").unwrap();
    assert_eq!((r.service.as_str(), r.quantile, r.threshold), ("api", 0.99, Duration::from_millis(50)));
    assert_eq!((r.window, r.cooldown), (Duration::from_secs(10), Duration::from_secs(60)));
    assert_eq!(r.functions, ["handle_*", "lookup"]);
    for (bad, want) in [
        ("p99>50ms", "missing service"),
        ("service=a window=1s", "missing a condition"),
        ("service=a p99>50", "duration in ms or s"),
        ("service=a p0>5ms", "quantile"),
        ("service=a p99>5ms window=-1s", "above 0"),
        ("service=a p99>5ms bogus", "expected service=S"),
    ] {
        let e = AnomalyRule::parse(bad).unwrap_err();
        assert!(e.contains(want), "{bad}: {e}");
    }
}

#[test]
fn a_rule_fires_on_a_slow_window_once_per_cooldown() {
    let rule = AnomalyRule::parse("service=api p99>50ms window=1s cooldown=5s").unwrap();
    let mut st = RuleState::new(rule);
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // A fast window: nothing.
    for i in 0..100 {
        assert!(st.observe(Duration::from_millis(10), at(i * 5)).is_none());
    }
    // A slow window (2 % of spans at 120 ms puts the p99 over 50 ms) closes at the next span.
    let mut fired = Vec::new();
    for i in 0..100 {
        let l = if i % 50 == 0 { 120 } else { 10 };
        fired.extend(st.observe(Duration::from_millis(l), at(1000 + i * 5)));
    }
    fired.extend(st.observe(Duration::from_millis(10), at(2000)));
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0].value > Duration::from_millis(100) && fired[0].samples == 100, "{fired:?}");
    // Slow again within the cooldown: quiet; after it: fires again.
    for w in 0..8u64 {
        for i in 0..20 {
            fired.extend(st.observe(Duration::from_millis(200), at(2001 + w * 1000 + i)));
        }
    }
    assert_eq!(st.fired, 2, "{fired:?}");
    // Too few spans in a window never fire.
    let mut quiet = RuleState::new(AnomalyRule::parse("service=api p99>1ms window=1s").unwrap());
    for i in 0..4 {
        assert!(quiet.observe(Duration::from_secs(1), at(i * 2000)).is_none());
    }
}
