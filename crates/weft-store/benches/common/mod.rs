//! Helpers the benchmarks share.

/// Run by `cargo bench` (which passes `--bench`), not as a smoke test by `cargo test
/// --all-targets`, where the benches only show they still run, on a small size.
pub fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// `k` from the environment, parsed, or `d`.
pub fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

/// CPU seconds (user + system) of the whole process so far.
pub fn process_cpu() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Appends `batch`, waiting while the store is overloaded (flushes catching up).
pub fn append(store: &weft_store::Store, batch: &[weft_model::Span]) {
    loop {
        match store.append(batch) {
            Ok(()) => return,
            Err(weft_store::StoreError::Overloaded { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
    }
}
