//! `weft` — one binary for every job: convert trace files, weave simulator logs, serve the
//! collector and UI, query the store, control probes, run the agent, record the kernel, capture a service's function calls.

mod cmd;

use clap::{Parser, Subcommand};

/// mimalloc: with glibc's allocator, malloc/free were half of span decoding time (see the
/// decode benchmark in weft-model); mimalloc doubles decode throughput.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option (`mi_option_purge_delay` in mimalloc 3's `mimalloc.h`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// mimalloc's `allow_thp` option (`mi_option_allow_thp` in mimalloc 3's `mimalloc.h`).
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// For `weft serve`: freed memory goes back to the OS after 10 s unused (jemalloc's default
/// decay) instead of mimalloc's 1 s. The collector frees each flushed buffer (tens of MiB) and refills its
/// buffers right after; pages returned in between are faulted back in and zeroed by the
/// kernel (`clear_page_erms`: 4–16 % of durable ingest CPU in `perf`). weft-store's
/// `ingest_cpu` example (decode + durable append + flush), 6 alternating runs of 1M spans:
/// median 4.86 CPU-s (4.73–5.08) with 10 s against 5.12 (4.89–5.55) with 1 s. The other
/// commands keep 1 s: they stream with small buffers, and holding freed pages longer only
/// raises their peak RSS (`weft convert`: +6 MiB on a 47 MiB input).
///
/// And no transparent huge pages: mimalloc asks for them on its arenas (`MADV_HUGEPAGE`), so
/// each first touch of a 2 MiB region made the kernel zero all of it (`clear_page_erms` under
/// `folio_zero_user`: 7.6 % of the server's CPU in `perf` during `weft loadgen`, 0.7 % without).
/// Without them, 2M-span loadgen runs peaked at 497–498 MiB RSS instead of 574–581 MiB. The
/// option alone comes too late (mimalloc reads it when the process starts), so the process
/// also opts out with `PR_SET_THP_DISABLE`, which the kernel honours for madvised memory too.
fn tune_allocator() {
    // SAFETY: sets process-wide integer options. mimalloc documents `mi_option_set` as not
    // thread safe; it is called from `main` right after parsing the arguments, before any
    // other thread exists. `prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)` takes no pointers.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10_000);
        libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0);
        // On failure (a kernel without the flag) huge pages simply stay on: nothing to do.
        let _ = libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// weft builds end-to-end traces across layers: application tracepoints, the kernel, and
/// (simulated) hardware.
#[derive(Parser)]
#[command(name = "weft", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    globals: weft_cli::Globals,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert traces between formats (OTLP proto/JSON, Zipkin v1/v2, Jaeger JSON, Chrome trace).
    Convert(cmd::convert::Args),
    /// Run the collector and store: OTLP/Zipkin receivers, Zipkin/Jaeger/SQL read APIs, metrics.
    Serve(Box<cmd::serve::Args>),
    /// Run SQL over stored spans and events (against `weft serve`, or a data directory).
    Query(cmd::query::Args),
    /// Send realistic spans to an OTLP/HTTP endpoint and measure ingest throughput.
    Loadgen(cmd::loadgen::Args),
    /// Record the kernel (perf_event_open): scheduler switches, syscalls, tracepoints, uprobes.
    Record(cmd::record::Args),
    /// EXIST's bounded captures: `weft exist capture --pid P --period 500ms` traces a target's
    /// function calls and weaves them into its requests.
    Exist(cmd::exist::Args),
    /// Import recorded traces: `weft import ctf TRACE_DIR` (LTTng/CTF: BlkKin spans, every event).
    Import(cmd::import::Args),
    /// Weave simulator logs (gem5, nicbm, ns-3, QEMU) into end-to-end traces, from files or pipes.
    Weave(cmd::weave::Args),
    /// Where the time went: per component (host, NIC, switch, wire) and request direction.
    Breakdown(cmd::breakdown::Args),
    /// Run the per-node agent: drain weft-probe rings, ship spans, take tracepoint commands.
    Agent(weft_agent::cli::Args),
    /// List, enable or disable the weft-probe tracepoints of local processes.
    Probes(cmd::probes::Args),
    /// VAIF's loop: learn a search space, run (replay), show the hypothesis forest, why.
    Explore(cmd::explore::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Serve(_)) {
        tune_allocator();
    }
    cli.globals.init();
    let result = match cli.command {
        Command::Convert(a) => cmd::convert::run(a),
        Command::Serve(a) => cmd::serve::run(*a),
        Command::Query(a) => cmd::query::run(a),
        Command::Loadgen(a) => cmd::loadgen::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Exist(a) => cmd::exist::run(a),
        Command::Import(a) => cmd::import::run(a),
        Command::Weave(a) => cmd::weave::run(a),
        Command::Breakdown(a) => cmd::breakdown::run(a),
        Command::Agent(a) => weft_agent::cli::run(a),
        Command::Probes(a) => cmd::probes::run(a),
        Command::Explore(a) => cmd::explore::run(a),
    };
    weft_cli::exit_code(result)
}
