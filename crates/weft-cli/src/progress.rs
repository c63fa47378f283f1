//! Progress bars and closing summaries shared by long-running commands.
//!
//! Bars draw on stderr only when it is a terminal and `--quiet` is not given, so piping or
//! CI logs stay clean; summaries always print.

use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

static QUIET: AtomicBool = AtomicBool::new(false);

/// Called once from `main`.
pub fn set_quiet(q: bool) {
    QUIET.store(q, Ordering::Relaxed);
}

/// True when bars are hidden (`--quiet`).
pub fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A byte-progress bar over `total` bytes (a spinner when `total` is unknown).
pub fn bytes_bar(total: Option<u64>, label: &str) -> ProgressBar {
    let bar = match total {
        Some(t) => ProgressBar::new(t).with_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{prefix} {spinner} {bytes} {bytes_per_sec} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    labelled(bar, label)
}

/// A count-progress bar over `total` items (spans, requests) with a rate.
pub fn count_bar(total: u64, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {human_pos}/{human_len} {per_sec} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    labelled(bar, label)
}

/// A spinner with a message, for commands that run until stopped (`weft agent`).
pub fn spinner(label: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{prefix} {spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    labelled(bar, label)
}

/// Sets the bar's label and draws it on stderr, unless `--quiet`.
fn labelled(bar: ProgressBar, label: &str) -> ProgressBar {
    bar.set_prefix(label.to_owned());
    if QUIET.load(Ordering::Relaxed) {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    } else {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    }
    bar
}
