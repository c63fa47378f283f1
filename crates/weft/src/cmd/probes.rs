//! `weft probes`: list and switch the weft-probe tracepoints of the local processes — through
//! the local agent's control socket when an agent runs, else directly on the segments.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use weft_agent::control;
use weft_control::proto::{CommandResult, ProbeCommand, ProbeOp};

/// What to do.
#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// List the tracepoints (all, or those SELECTOR matches).
    List(Target),
    /// Enable the tracepoints SELECTOR matches.
    Enable(Target),
    /// Disable the tracepoints SELECTOR matches (always-on ones stay on).
    Disable(Target),
    /// Disable the tracepoints SELECTOR matches, always-on ones included.
    ForceDisable(Target),
}

/// Which tracepoints, in which processes.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// `name:N`, `glob:P`, `group:G`, `level:L` (that level and more severe), `all`, or a bare
    /// name or glob.
    pub selector: Option<String>,
    /// Only this process.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Only processes whose service name matches this glob.
    #[arg(long)]
    pub service: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `weft probes`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
    /// Segment directory (as for `weft agent`).
    #[arg(long, global = true, env = "WEFT_PROBE_DIR")]
    pub probe_dir: Option<PathBuf>,
    /// Work on the segments directly even when an agent runs.
    #[arg(long, global = true)]
    pub direct: bool,
    /// How long to wait for the processes to acknowledge a switch.
    #[arg(long, global = true, default_value = "2s", value_parser = weft_cli::units::parse_duration)]
    pub wait: Duration,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = args.probe_dir.clone().unwrap_or_else(weft_probe::layout::default_dir);
    let (op, t) = match args.action {
        Action::List(t) => (ProbeOp::List, t),
        Action::Enable(t) => (ProbeOp::Enable, t),
        Action::Disable(t) => (ProbeOp::Disable, t),
        Action::ForceDisable(t) => (ProbeOp::ForceDisable, t),
    };
    let cmd = ProbeCommand {
        op,
        selector: t.selector.clone(),
        pid: t.pid,
        service: t.service.clone(),
        agent: None,
    };
    if let Err(e) = cmd.validate() {
        bail!("{e}");
    }
    let sock = control::socket_path(&dir);
    let mut via = "directly";
    let result = if !args.direct && sock.exists() {
        match control::request(&sock, &cmd, args.wait + Duration::from_secs(5)) {
            Ok(reply) => {
                via = "through the agent";
                match (reply.result, reply.error) {
                    (Some(r), _) => r,
                    (None, Some(e)) => bail!("the agent refused the command: {e}"),
                    (None, None) => bail!("the agent sent an empty reply"),
                }
            }
            Err(e) => {
                eprintln!("note: {e}; working on the segments directly");
                control::execute(&dir, &cmd, args.wait, "weft-probes", &weft_agent::agent::hostname())
            }
        }
    } else {
        control::execute(&dir, &cmd, args.wait, "weft-probes", &weft_agent::agent::hostname())
    };
    if let Some(e) = &result.error {
        bail!("{e}");
    }
    if t.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print(op, &result, via, &dir);
    }
    let failed = result.processes.iter().filter(|p| p.error.is_some()).count();
    if result.processes.is_empty() {
        bail!("no instrumented process matched in {}", dir.display());
    }
    if failed > 0 && op != ProbeOp::List {
        bail!("{failed} process(es) did not apply the switch");
    }
    Ok(())
}

fn print(op: ProbeOp, r: &CommandResult, via: &str, dir: &std::path::Path) {
    if op == ProbeOp::List {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(["pid", "service", "tracepoint", "level", "group", "on", "flags", "fields"]);
        let mut n = 0;
        for p in &r.processes {
            if let Some(e) = &p.error {
                eprintln!("{} ({}): {e}", p.segment, p.pid);
            }
            for tp in &p.tracepoints {
                n += 1;
                let mut flags = Vec::new();
                if tp.always_on {
                    flags.push("always-on");
                }
                if tp.span {
                    flags.push("span");
                }
                t.add_row([
                    p.pid.to_string(),
                    p.service.clone(),
                    tp.name.clone(),
                    tp.level.clone(),
                    tp.group.clone(),
                    if tp.enabled { "on".into() } else { "-".into() },
                    flags.join(","),
                    tp.fields.clone(),
                ]);
            }
        }
        println!("{t}");
        let on: usize = r.processes.iter().flat_map(|p| &p.tracepoints).filter(|t| t.enabled).count();
        println!(
            "{n} tracepoints ({on} on) in {} processes under {} ({via})",
            r.processes.len(),
            dir.display()
        );
        return;
    }
    for p in &r.processes {
        let state = match (&p.error, p.applied) {
            (Some(e), _) => format!("FAILED: {e}"),
            (None, true) => "applied".into(),
            (None, false) => "not acknowledged".into(),
        };
        println!(
            "pid {} ({}): {} tracepoint(s) matched, {}: {state}",
            p.pid,
            p.service,
            p.matched,
            op.as_str()
        );
    }
    println!("{} process(es) ({via})", r.processes.len());
}
