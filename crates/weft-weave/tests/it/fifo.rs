//! Online mode: the same logs read from named pipes — written by threads in small, irregular
//! chunks while the pipeline runs — give byte-identical traces to reading them from files.

use std::io::Write;
use std::path::Path;

use weft_synth::simlog::{Log, Scenario};
use weft_weave::{Run, Topology};

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo has no other preconditions.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(r, 0, "mkfifo {}: {}", p.display(), std::io::Error::last_os_error());
}

fn run(topology: &str, dir: &Path) -> (Vec<u8>, weft_weave::RunReport) {
    let out = dir.join("out.otlp.json");
    let toml = format!("{topology}\n[[sink]]\nkind = \"file\"\npath = \"{}\"\n", out.display());
    let topo = Topology::parse(&toml, Path::new("fifo.toml"), dir).unwrap();
    let rep = Run::start(&topo, vec![]).unwrap().wait().unwrap();
    (std::fs::read(&out).unwrap(), rep)
}

#[test]
fn files_and_fifos_give_identical_traces() {
    let s = Scenario { rounds: 40, noise: 3, ..Scenario::default() };
    let logs = s.generate();
    let files = tempfile::tempdir().unwrap();
    let pipes = tempfile::tempdir().unwrap();
    for d in [files.path(), pipes.path()] {
        std::fs::write(d.join("kernel.syms"), weft_synth::simlog::kernel_syms()).unwrap();
        std::fs::write(d.join("i40e.syms"), weft_synth::simlog::i40e_syms()).unwrap();
    }
    for (log, bytes) in &logs {
        std::fs::write(files.path().join(log.file_name()), bytes).unwrap();
        mkfifo(&pipes.path().join(log.file_name()));
    }
    let (from_files, rep_files) = run(&s.topology(files.path().to_str().unwrap()), files.path());

    // Writers: each pipe in pseudo-random chunks of 1..=700 bytes with yields in between.
    let writers: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(k, (log, bytes)): (usize, &(Log, Vec<u8>))| {
            let path = pipes.path().join(log.file_name());
            let bytes = bytes.clone();
            std::thread::spawn(move || {
                let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                let mut x = 0x9e37_79b9u64 ^ (k as u64 * 7919);
                let mut pos = 0;
                while pos < bytes.len() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let n = (1 + (x % 700) as usize).min(bytes.len() - pos);
                    f.write_all(&bytes[pos..pos + n]).unwrap();
                    pos += n;
                    if x.is_multiple_of(5) {
                        std::thread::yield_now();
                    }
                    if x.is_multiple_of(97) {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    let (from_pipes, rep_pipes) = run(&s.topology(pipes.path().to_str().unwrap()), pipes.path());
    for w in writers {
        w.join().unwrap();
    }
    assert!(rep_pipes.sources.iter().all(|s| s.stream), "the pipes were read as streams");
    assert!(rep_files.sources.iter().all(|s| !s.stream));
    assert_eq!(rep_pipes.merge.forced, 0);
    assert!(rep_files.spans > 40 * 40, "{} spans", rep_files.spans);
    assert_eq!(rep_files.spans, rep_pipes.spans);
    assert!(
        from_files == from_pipes,
        "file and FIFO runs differ ({} vs {} bytes)",
        from_files.len(),
        from_pipes.len()
    );
}
