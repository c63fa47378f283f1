//! EXIST's capture allocator: property tests over random nodes and targets, and its live
//! inputs read from this machine's `/proc`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use weft_agent::capture::alloc::{AllocConfig, AllocError, Allocator, MIB, NodeUsage, Target};
use weft_agent::capture::usage;

/// A node of 1..=64 cores with utilization in [0, 1] (coarse steps, so ties happen).
fn node() -> impl Strategy<Value = NodeUsage> {
    prop::collection::vec(0u32..=20, 1..=64).prop_map(|u| NodeUsage {
        utilization: u.iter().enumerate().map(|(i, &x)| (i as u32, f64::from(x) / 20.0)).collect(),
    })
}

/// A target whose cores exist on a node of `n` cores.
fn target(n: usize) -> impl Strategy<Value = Target> {
    let cores = prop::collection::btree_set(0..n as u32, 1..=n.min(16));
    prop_oneof![
        cores.clone().prop_map(|c| Target::CpuSet { cores: c.into_iter().collect() }),
        (cores, any::<u64>())
            .prop_map(|(c, seed)| Target::CpuShare { recent_cores: c.into_iter().collect(), seed }),
    ]
}

fn config() -> impl Strategy<Value = AllocConfig> {
    (0u64..=2048 * MIB, 0usize..=6).prop_map(|(budget, extra_cores)| AllocConfig {
        budget,
        extra_cores,
        ..AllocConfig::default()
    })
}

fn case() -> impl Strategy<Value = (AllocConfig, NodeUsage, Vec<Target>)> {
    (config(), node()).prop_flat_map(|(c, n)| {
        let len = n.utilization.len();
        (Just(c), Just(n), prop::collection::vec(target(len), 1..=4))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn allocations_keep_every_bound((cfg, usage, targets) in case()) {
        let mut a = Allocator::new(cfg).unwrap();
        let mut live: BTreeMap<u32, u64> = BTreeMap::new();
        for t in &targets {
            let before = a.available();
            match a.allocate(t, &usage) {
                Ok(got) => {
                    prop_assert!(got.total_bytes() <= before, "{got:?} over {before}");
                    for b in &got.buffers {
                        prop_assert!((4 * MIB..=128 * MIB).contains(&b.bytes) && b.bytes.is_power_of_two(), "{b:?}");
                        prop_assert!(live.insert(b.core, b.bytes).is_none(), "core {} traced twice", b.core);
                    }
                    if let Target::CpuSet { cores } = t {
                        let fits = before / (4 * MIB) >= cores.len() as u64;
                        if fits {
                            prop_assert!(got.uncovered.is_empty(), "{got:?}");
                            let mut traced: Vec<u32> = got.buffers.iter().map(|b| b.core).collect();
                            let mut want = cores.clone();
                            traced.sort_unstable();
                            want.sort_unstable();
                            prop_assert_eq!(traced, want);
                        }
                        // equally: one size for all
                        prop_assert!(got.buffers.windows(2).all(|w| w[0].bytes == w[1].bytes), "{got:?}");
                    }
                    if let Target::CpuShare { recent_cores, .. } = t {
                        for b in &got.buffers {
                            for c in &got.buffers {
                                let (ub, uc) = (usage.utilization[&b.core], usage.utilization[&c.core]);
                                prop_assert!(!(ub < uc && b.bytes < c.bytes), "core {} (u {ub}) got less than core {} (u {uc}): {got:?}", b.core, c.core);
                            }
                        }
                        prop_assert!(got.buffers.len() <= recent_cores.len() + cfg.extra_cores);
                    }
                }
                Err(AllocError::BudgetTooSmall { available, .. }) => prop_assert!(available < 4 * MIB),
                Err(AllocError::CoreBusy { core, .. }) => prop_assert!(live.contains_key(&core)),
                Err(e) => prop_assert!(false, "unexpected refusal {e}"),
            }
            prop_assert!(a.in_use() <= cfg.budget, "in use {} over budget {}", a.in_use(), cfg.budget);
            prop_assert_eq!(a.in_use(), live.values().sum::<u64>());
        }
    }

    /// Pure and deterministic: the same inputs give the same allocation.
    #[test]
    fn allocation_is_deterministic((cfg, usage, targets) in case()) {
        let run = || {
            let mut a = Allocator::new(cfg).unwrap();
            targets.iter().map(|t| a.allocate(t, &usage)).collect::<Vec<_>>()
        };
        prop_assert_eq!(run(), run());
    }
}

#[test]
fn default_budget_is_512_mib() {
    let a = Allocator::new(AllocConfig::default()).unwrap();
    assert_eq!(a.available(), 512 * MIB);
}

/// Two `/proc/stat` samples of this machine: every online core, each in [0, 1]; a core kept
/// busy in between shows up busy.
#[test]
fn live_utilization_from_proc_stat() {
    let online = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let before = usage::sample_stat().unwrap();
    assert!(before.cores.len() >= online, "{before:?}");
    // spin on one core for a while so that the next sample sees it working
    let core = *before.cores.keys().next().unwrap();
    let spin = std::thread::spawn(move || {
        pin(core);
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    });
    spin.join().unwrap();
    let after = usage::sample_stat().unwrap();
    let u = usage::utilization(&before, &after);
    assert_eq!(u.utilization.len(), after.cores.len());
    assert!(u.utilization.values().all(|x| (0.0..=1.0).contains(x)), "{u:?}");
    assert!(u.utilization[&core] > 0.5, "core {core} spun 300 ms yet shows {u:?}");
    // the live figures drive the allocator
    let mut a = Allocator::new(AllocConfig::default()).unwrap();
    let got = a.allocate(&Target::CpuShare { recent_cores: vec![core], seed: 1 }, &u).unwrap();
    assert!(got.buffers.iter().any(|b| b.core == core));
}

/// The recent cores of this process include the core a pinned thread ran on.
#[test]
fn live_recent_cores_of_a_pid() {
    let cores = usage::sample_stat().unwrap();
    let last = *cores.cores.keys().last().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        pin(last);
        let mut x = 0u64;
        for _ in 0..1_000_000 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        tx.send(()).unwrap();
        let _ = done_rx.recv();
    });
    rx.recv().unwrap();
    let recent = usage::recent_cores(std::process::id()).unwrap();
    done_tx.send(()).unwrap();
    t.join().unwrap();
    assert!(recent.contains(&last), "thread pinned to core {last}, recent cores {recent:?}");
    assert!(recent.iter().all(|c| cores.cores.contains_key(c)), "{recent:?}");
    assert!(usage::recent_cores(u32::MAX).is_err());
}

fn pin(core: u32) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays within its fixed size for core < 1024.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core as usize, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0);
    }
}
