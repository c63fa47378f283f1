//! `weft explore`: VAIF's control loop — learn a search space from an exhaustive run, run the
//! loop (live against a collector and its agents, or in replay over exhaustive trace files),
//! show the hypothesis forest, and say why a trace's tracepoints are on. The work is
//! `weft_explore`'s; see docs/explore.md.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use weft_analyze::vaif::Config;
use weft_control::client::Collector;
use weft_explore::backend::live::{Live, LiveConfig};
use weft_explore::backend::{Replay, read_traces};
use weft_explore::explore::{Budget, Explorer, Options, Report};
use weft_explore::forest::{self, Forest};
use weft_explore::space::{Learner, SearchSpace};
use weft_explore::strategy::Strategy;
use weft_model::TraceId;

/// What to do.
#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// Learn a search space from exhaustive traces (every tracepoint on) and write it as TOML.
    Learn(LearnArgs),
    /// Run the loop: live against a collector (`--collector`) or in replay over exhaustive
    /// traces (`--replay`).
    Run(Box<RunArgs>),
    /// Print the hypothesis forest (of the state directory, or the one a collector keeps).
    Show(ForestArgs),
    /// Why each tracepoint of a trace is on.
    Why(WhyArgs),
}

/// Arguments of `weft explore`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

/// `weft explore learn`.
#[derive(clap::Args, Debug)]
pub struct LearnArgs {
    /// Exhaustive trace files (OTLP JSON/protobuf, Zipkin, Jaeger; detected).
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// Where to write the search space.
    #[arg(long, short = 'o', default_value = "search-space.toml")]
    pub out: PathBuf,
}

/// The state directory.
#[derive(clap::Args, Debug)]
pub struct StateArgs {
    /// The explore state directory (holds forest.json).
    #[arg(long, default_value = "weft-explore")]
    pub state: PathBuf,
}

/// Where the forest is: the state directory, or a collector.
#[derive(clap::Args, Debug)]
pub struct ForestArgs {
    /// The explore state directory (holds forest.json).
    #[arg(long, default_value = "weft-explore")]
    pub state: PathBuf,
    /// Read the forest a collector keeps (its query listener, e.g. http://127.0.0.1:16686),
    /// published there by `weft explore run`, instead of the state directory's.
    #[arg(long = "collector", value_name = "URL", conflicts_with = "state")]
    pub from_collector: Option<String>,
}

impl ForestArgs {
    fn forest(&self) -> anyhow::Result<Forest> {
        match &self.from_collector {
            Some(url) => forest::fetch(url)?.with_context(|| {
                format!(
                    "the collector at {url} keeps no forest: no `weft explore run` has published one there"
                )
            }),
            None => Ok(Forest::load(&self.state)?),
        }
    }
}

/// `weft explore why`.
#[derive(clap::Args, Debug)]
pub struct WhyArgs {
    /// The trace (hex id).
    pub trace_id: String,
    /// Trace files to find it in; without, it must be a group representative in the forest.
    #[arg(long = "traces", value_name = "FILE")]
    pub traces: Vec<PathBuf>,
    #[command(flatten)]
    pub forest: ForestArgs,
}

/// `weft explore run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Replay these exhaustive trace files: epoch k sees the next --traces-per-epoch traces
    /// with only the tracepoints enabled at that moment.
    #[arg(long, num_args = 1.., value_name = "TRACES", required_unless_present = "collector")]
    pub replay: Vec<PathBuf>,
    /// Run live: the collector's query listener (read API; control API unless --control).
    #[arg(long, value_name = "URL", conflicts_with = "replay")]
    pub collector: Option<String>,
    /// The collector's control API, when not at --collector.
    #[arg(long, value_name = "URL", requires = "collector")]
    pub control: Option<String>,
    /// File holding the control token (else WEFT_CONTROL_TOKEN); live runs and --publish.
    #[arg(long, value_name = "FILE")]
    pub control_token_file: Option<PathBuf>,
    /// Replay: publish the forest after every epoch to this collector (its query listener),
    /// which keeps it next to the traces and shows it in its UI. Live runs publish to the
    /// collector they run against.
    #[arg(long, value_name = "URL", conflicts_with = "collector")]
    pub publish: Option<String>,
    /// Live: a trace is read once it started this long ago (its spans must reach the store).
    #[arg(long, default_value = "2s", value_parser = weft_cli::units::parse_duration)]
    pub settle: Duration,
    /// Learn the search space from these exhaustive traces (default: the replayed ones).
    #[arg(long, num_args = 1.., value_name = "TRACES", conflicts_with = "space")]
    pub learn: Vec<PathBuf>,
    /// A search-space file (from `weft explore learn`, possibly edited).
    #[arg(long)]
    pub space: Option<PathBuf>,
    /// Request types (root span names) with problems (repeatable; default: all).
    #[arg(long = "request-type", value_name = "NAME")]
    pub request_types: Vec<String>,
    /// Always-on tracepoints (globs), replacing the search space's set (roots, SERVER and
    /// CLIENT spans).
    #[arg(long = "always-on", num_args = 1.., value_name = "GLOB")]
    pub always_on: Vec<String>,
    /// Traces per epoch (replay: taken from the input; live: read per request type at most).
    #[arg(long, default_value_t = 100)]
    pub traces_per_epoch: usize,
    /// Tracepoints enabled per epoch at most.
    #[arg(long, default_value_t = 3)]
    pub tracepoints_per_epoch: usize,
    /// Epoch length (live runs).
    #[arg(long, default_value = "120s", value_parser = weft_cli::units::parse_duration)]
    pub epoch: Duration,
    /// Congestion check interval within an epoch (live runs).
    #[arg(long, default_value = "20s", value_parser = weft_cli::units::parse_duration)]
    pub check_interval: Duration,
    /// Stop after this many epochs.
    #[arg(long)]
    pub max_epochs: Option<u64>,
    /// Keep watching: re-check a done request type every K epochs (with the tracepoints
    /// already on) and resume it when its groups call for a tracepoint again; the run then
    /// ends only at --max-epochs, Ctrl-C or the end of the replayed traces.
    #[arg(long, value_name = "K")]
    pub recheck_every: Option<u64>,
    /// CV threshold of a predictable group.
    #[arg(long, default_value_t = 0.10)]
    pub cv: f64,
    /// Smallest share of a high-variance group's variance an edge needs to be searched.
    #[arg(long, default_value_t = 0.10)]
    pub min_share: f64,
    /// Percentile of response times above which a predictable group is consistently slow.
    #[arg(long, default_value_t = 95.0)]
    pub cs_percentile: f64,
    /// `hierarchical` or `flat`.
    #[arg(long, default_value = "hierarchical", value_parser = parse_strategy)]
    pub strategy: Strategy,
    /// Write the run's report (JSON) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub state: StateArgs,
}

fn parse_strategy(s: &str) -> Result<Strategy, String> {
    match s {
        "hierarchical" => Ok(Strategy::Hierarchical),
        "flat" => Ok(Strategy::Flat),
        _ => Err(format!("{s:?}: expected hierarchical or flat")),
    }
}

/// Runs `weft explore`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.action {
        Action::Learn(a) => learn(a),
        Action::Run(a) => run_loop(*a),
        Action::Show(a) => {
            print!("{}", a.forest()?.render());
            Ok(())
        }
        Action::Why(a) => why(a),
    }
}

fn learn_from(paths: &[PathBuf]) -> anyhow::Result<SearchSpace> {
    let mut l = Learner::default();
    for t in read_traces(paths)? {
        l.add(&t)?;
    }
    Ok(l.finish()?)
}

fn learn(a: LearnArgs) -> anyhow::Result<()> {
    let space = learn_from(&a.traces)?;
    write(&a.out, space.to_toml().as_bytes())?;
    eprintln!(
        "{}: {} tracepoints ({} always on), {} request types, {} potential paths, {} keys",
        a.out.display(),
        space.tracepoints.len(),
        space.always_on.len(),
        space.request_types.len(),
        space.paths.len(),
        space.keys.len()
    );
    Ok(())
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn run_loop(a: RunArgs) -> anyhow::Result<()> {
    let mut space = match &a.space {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
            SearchSpace::parse(&text, &p.display().to_string())?
        }
        None if a.learn.is_empty() && a.collector.is_some() => {
            bail!("a live run needs a search space: --space FILE or --learn EXHAUSTIVE_TRACES")
        }
        None => learn_from(if a.learn.is_empty() { &a.replay } else { &a.learn })?,
    };
    if !a.always_on.is_empty() {
        space.always_on = a.always_on.clone();
        space.validate("--always-on")?;
    }
    if !(0.0..=1.0).contains(&a.min_share) {
        bail!("--min-share {}: a share of variance, in [0, 1]", a.min_share);
    }
    let options = options(&a);
    let mut explorer = Explorer::new(&space, options)?.with_state_dir(a.state.state.clone());
    if let Some(url) = a.publish.as_ref().or(a.control.as_ref()).or(a.collector.as_ref()) {
        explorer = explorer.with_publisher(Collector::new(url, Some(control_token(&a)?)));
    }
    match &a.collector {
        Some(url) => run_live(&a, url, &space, &mut explorer)?,
        None => run_replay(&a, &space, &mut explorer)?,
    }
    match explorer.publish_error() {
        Some(e) => bail!("the forest could not be published: {e}"),
        None => Ok(()),
    }
}

/// The control token: from --control-token-file, else WEFT_CONTROL_TOKEN.
fn control_token(a: &RunArgs) -> anyhow::Result<String> {
    let token = super::control_token(a.control_token_file.as_deref())?;
    if token.is_empty() {
        bail!(
            "a live run switches tracepoints, and --publish stores the forest, through the control API: \
             give --control-token-file FILE"
        );
    }
    Ok(token)
}

fn options(a: &RunArgs) -> Options {
    Options {
        config: Config { cv_threshold: a.cv, cs_percentile: a.cs_percentile, ..Config::default() },
        budget: Budget {
            tracepoints_per_epoch: a.tracepoints_per_epoch,
            epoch: a.epoch,
            check_interval: a.check_interval,
            traces_per_epoch: a.traces_per_epoch.max(1),
        },
        strategy: a.strategy,
        request_types: a.request_types.clone(),
        max_epochs: a.max_epochs,
        min_share: a.min_share,
        recheck_every: a.recheck_every.filter(|&k| k > 0),
        ..Options::default()
    }
}

fn run_live(a: &RunArgs, url: &str, space: &SearchSpace, explorer: &mut Explorer<'_>) -> anyhow::Result<()> {
    let token = control_token(a)?;
    let config = LiveConfig {
        reads: url.to_owned(),
        control: a.control.clone().unwrap_or_else(|| url.to_owned()),
        token: Some(token),
        state_dir: a.state.state.clone(),
        settle: a.settle,
        switch_wait: Duration::from_secs(10),
    };
    let mut live = Live::connect(config, space)?.with_interrupt(|| INTERRUPTED.load(Ordering::SeqCst));
    if live.cleaned() > 0 {
        eprintln!("disabled {} tracepoints a previous run had left enabled", live.cleaned());
    }
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let started = std::time::Instant::now();
    let outcome = explorer.run(&mut live);
    // whatever happened, undo what this run enabled (and nothing else)
    let restored = live.restore();
    let report = match outcome {
        Ok(r) => r,
        Err(e) if INTERRUPTED.load(Ordering::SeqCst) => {
            restored?;
            eprintln!("interrupted: every tracepoint this run enabled is disabled again ({e})");
            return Ok(());
        }
        Err(e) => {
            if let Err(r) = restored {
                eprintln!("weft explore: cleaning up failed too: {r}");
            }
            return Err(e.into());
        }
    };
    restored?;
    let congested = match live.congested_checks() {
        0 => String::new(),
        n => format!(" ({n} congestion checks found a queue over half full: nothing enabled then)"),
    };
    finish(a, &report, &format!("in {:.0} s{congested}", started.elapsed().as_secs_f64()))
}

/// Writes the report, prints the summary line (`how` says how the epochs went) and the findings.
fn finish(a: &RunArgs, report: &Report, how: &str) -> anyhow::Result<()> {
    if let Some(p) = &a.report {
        write(p, &serde_json::to_vec_pretty(report)?)?;
    }
    eprintln!(
        "{} epochs {how}: {} of {} tracepoints enabled beyond the {} always on; {} findings",
        report.epochs,
        report.tracepoints_enabled,
        report.tracepoints_total,
        report.tracepoints_always_on,
        report.findings.len()
    );
    for f in &report.findings {
        println!("{} [{}]: {}", f.request_type, f.principle.as_str(), f.tracepoints.join(" ⊂ "));
    }
    Ok(())
}

fn run_replay(a: &RunArgs, space: &SearchSpace, explorer: &mut Explorer<'_>) -> anyhow::Result<()> {
    let traces = read_traces(&a.replay)?;
    let known: BTreeSet<String> = space.tracepoints.iter().map(|t| t.name.clone()).collect();
    let mut backend = Replay::new(traces.into_iter(), a.traces_per_epoch, space.always_on.clone(), known);
    let report = explorer.run(&mut backend)?;
    let how = format!(
        "over {} traces ({} of other request types or over the cap unread)",
        backend.traces_seen(),
        backend.dropped()
    );
    finish(a, &report, &how)
}

fn why(a: WhyArgs) -> anyhow::Result<()> {
    let forest = a.forest.forest()?;
    let id: TraceId = a.trace_id.parse().with_context(|| format!("{:?} is not a trace id", a.trace_id))?;
    let lines = if a.traces.is_empty() {
        let Some((rt, path)) = forest.representative(&id.to_string()) else {
            bail!(
                "trace {id} is not a group representative in the forest; give --traces FILE to read it from"
            );
        };
        forest.explain(rt, path.iter().map(String::as_str))
    } else {
        let traces = read_traces(&a.traces)?;
        let Some(spans) = traces.iter().find(|t| t.first().is_some_and(|s| s.trace_id == id)) else {
            bail!("trace {id} is not in the files given");
        };
        let Some(root) = spans.iter().find(|s| s.parent_span_id.is_none()) else {
            bail!("trace {id} has no root span");
        };
        let names: Vec<String> = spans
            .iter()
            .flat_map(|s| {
                std::iter::once(s.name.to_string())
                    .chain(s.events.iter().map(|e| format!("{}/{}", s.name, e.name)))
            })
            .collect();
        forest.explain(&root.name, names.iter().map(String::as_str))
    };
    for l in lines {
        println!("{l}");
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}
