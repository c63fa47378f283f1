//! Writes the synthetic SimBricks ping (client and server gem5 + i40e nicbm, ns-3 with two
//! switches; see `weft_synth::simlog`) and a topology for it into a directory:
//!
//! ```sh
//! cargo run -p weft-weave --example synth_ping -- /tmp/ping 10
//! weft weave /tmp/ping/topology.toml --tree
//! ```

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "ping".into()));
    let rounds = args.next().and_then(|r| r.parse().ok()).unwrap_or(3);
    let s = weft_synth::simlog::Scenario { rounds, ..Default::default() };
    if let Err(e) = write(&dir, &s) {
        eprintln!("{}: {e}", dir.display());
        std::process::exit(1);
    }
    println!(
        "wrote {} rounds to {}; run: weft weave {}/topology.toml --tree",
        rounds,
        dir.display(),
        dir.display()
    );
}

fn write(dir: &std::path::Path, s: &weft_synth::simlog::Scenario) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (log, bytes) in s.generate() {
        std::fs::write(dir.join(log.file_name()), bytes)?;
    }
    std::fs::write(dir.join("kernel.syms"), weft_synth::simlog::kernel_syms())?;
    std::fs::write(dir.join("i40e.syms"), weft_synth::simlog::i40e_syms())?;
    std::fs::write(dir.join("topology.toml"), s.topology("."))
}
