//! Writes realistic sample spans (`weft_synth::sample`) to a file in any format weft
//! writes, until the file reaches a size — inputs for `weft convert` benchmarks and memory
//! checks.
//!
//! ```sh
//! cargo run --release -p weft-model --example gen_spans -- otlp-proto 1GiB /tmp/big.pb
//! ```

use std::io::{BufWriter, Write};

use weft_model::codec::stream::{self, Format, WriterOptions};
use weft_synth::sample;

/// Counts bytes written.
struct Counter<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counter<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(b)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..split].parse().ok()?;
    let mult = match &s[split..].to_ascii_lowercase()[..] {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(format), Some(size), Some(path)) =
        (args.get(1).and_then(|f| Format::parse(f)), args.get(2).and_then(|s| parse_size(s)), args.get(3))
    else {
        eprintln!("usage: gen_spans FORMAT SIZE OUT   (e.g. gen_spans otlp-proto 1GiB big.pb)");
        return std::process::ExitCode::FAILURE;
    };
    let file = match std::fs::File::create(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot create {path}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut counter = Counter { inner: BufWriter::with_capacity(1 << 20, file), n: 0 };
    let result = (|| {
        let mut w = stream::writer(format, &mut counter, WriterOptions::default())?;
        let mut spans = 0u64;
        let mut seed = 1;
        // `counter` is borrowed by the writer; track the size through the spans' average.
        let probe = sample::spans(1000, 0);
        let per_span = {
            let mut v = Vec::new();
            let mut pw = stream::writer(format, &mut v, WriterOptions::default())?;
            pw.write(&probe)?;
            pw.finish()?;
            (v.len() as u64 / 1000).max(1)
        };
        while spans * per_span < size {
            let batch = sample::spans(1000, seed);
            seed += 1;
            w.write(&batch)?;
            spans += batch.len() as u64;
        }
        w.finish()?;
        Ok::<u64, weft_model::codec::CodecError>(spans)
    })();
    match result {
        Ok(spans) => {
            let _ = counter.flush();
            eprintln!("wrote {spans} spans, {} bytes, to {path}", counter.n);
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
