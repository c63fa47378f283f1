//! `archipelago`: run one tier, drive load, or run the whole path on this machine.
//!
//! ```text
//! archipelago blocker   --listen 127.0.0.1:7004 --dir /tmp/objects [--fsync-every N]
//! archipelago mapper    --listen 127.0.0.1:7003 --next 127.0.0.1:7004 [--object-size B]
//! archipelago vcomposer --listen 127.0.0.1:7002 --next 127.0.0.1:7003 [--object-size B]
//! archipelago gateway   --listen 127.0.0.1:7001 --next 127.0.0.1:7002
//! archipelago load      --gateway 127.0.0.1:7001 [--clients 8] [--seconds 10] [--size 4096] [--reads 0.3]
//! archipelago run       [--dir D] [--clients 8] [--seconds 10] [--size 4096] [--reads 0.3]
//! ```
//!
//! `run` starts the four tiers as child processes, drives closed-loop load through the gateway
//! and prints `ops/s` and the tiers' CPU time per request (`tier_cpu_us/op`, from
//! `/proc/<pid>/stat`), then stops them. The probes record into shared memory when a weft agent
//! runs (or `WEFT_PROBE_DIR` names a directory it serves).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Command, ExitCode};
use std::time::Duration;

use archipelago::client::{Load, run_load};
use archipelago::run::{Cluster, Role, run_role};

fn opts(args: &[String]) -> Result<HashMap<String, String>, String> {
    let mut m = HashMap::new();
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let k = k.strip_prefix("--").ok_or_else(|| format!("unexpected argument {k:?}"))?;
        m.insert(k.to_string(), it.next().ok_or_else(|| format!("--{k} needs a value"))?.clone());
    }
    Ok(m)
}

fn load_cfg(o: &HashMap<String, String>) -> Result<Load, String> {
    let mut l = Load::default();
    let p = |k: &str| o.get(k).map(|v| v.parse::<f64>().map_err(|e| format!("--{k}: {e}")));
    if let Some(v) = p("clients") {
        l.clients = v? as usize;
    }
    if let Some(v) = p("seconds") {
        l.duration = Duration::from_secs_f64(v?);
    }
    if let Some(v) = p("size") {
        l.size = v? as u32;
    }
    if let Some(v) = p("reads") {
        l.reads = v?;
    }
    Ok(l)
}

fn report(r: &archipelago::client::LoadReport, cpu: Option<f64>) {
    println!(
        "ops {} errors {} seconds {:.3} ops/s {:.1} p50_us {:.1} p99_us {:.1}{} probes {}",
        r.ops,
        r.errors,
        r.elapsed.as_secs_f64(),
        r.ops_per_sec(),
        r.p50_us,
        r.p99_us,
        cpu.map(|c| format!(" tier_cpu_us/op {:.2}", c * 1e6 / r.ops.max(1) as f64)).unwrap_or_default(),
        if archipelago::PROBES { "on" } else { "compiled-out" }
    );
}

fn main_inner() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("gateway" | "vcomposer" | "mapper" | "blocker") => {
            let role = Role::parse(&args)?;
            run_role(role).map_err(|e| e.to_string())
        }
        Some("load") => {
            let o = opts(&args[1..])?;
            let gw: SocketAddr = o
                .get("gateway")
                .ok_or("--gateway is required")?
                .parse()
                .map_err(|e| format!("--gateway: {e}"))?;
            let r = run_load(gw, &load_cfg(&o)?).map_err(|e| e.to_string())?;
            report(&r, None);
            Ok(())
        }
        Some("run") => {
            let o = opts(&args[1..])?;
            let tmp;
            let dir = match o.get("dir") {
                Some(d) => std::path::PathBuf::from(d),
                None => {
                    tmp = std::env::temp_dir().join(format!("archipelago-{}", std::process::id()));
                    tmp.clone()
                }
            };
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let cluster = Cluster::start(&dir, |a| {
                let mut c = Command::new(&exe);
                c.args(a);
                c
            })
            .map_err(|e| e.to_string())?;
            // warm up the connection pools and the page cache
            let mut warm = load_cfg(&o)?;
            warm.duration = Duration::from_millis(500);
            let _ = run_load(cluster.gateway, &warm);
            let cpu0 = cluster.cpu_seconds();
            let r = run_load(cluster.gateway, &load_cfg(&o)?).map_err(|e| e.to_string());
            let cpu = cluster.cpu_seconds() - cpu0;
            cluster.stop();
            if !o.contains_key("dir") {
                let _ = std::fs::remove_dir_all(&dir);
            }
            report(&r?, Some(cpu));
            Ok(())
        }
        _ => {
            Err("usage: archipelago gateway|vcomposer|mapper|blocker|load|run [options] (see the crate docs)"
                .into())
        }
    }
}

fn main() -> ExitCode {
    match main_inner() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("archipelago: {e}");
            ExitCode::FAILURE
        }
    }
}
