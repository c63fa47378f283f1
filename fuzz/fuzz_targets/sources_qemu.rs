//! The QEMU log parser (trace events and executed translation blocks) over arbitrary bytes,
//! through the line reader and driver as `weft` runs it. Must never panic; every event comes
//! from one line (untimed lines held back are released, never multiplied).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::SourceId;
use weft_sources::drive::Driver;
use weft_sources::reader::LineReader;
use weft_sources::sim::qemu::{QEMU_CLOCK, QemuParser};

fuzz_target!(|data: &[u8]| {
    let parser = QemuParser::new(SourceId(0), QEMU_CLOCK);
    let mut d = Driver::new(LineReader::with_limits(data, 64, 512), parser, 2);
    let mut events = Vec::new();
    while d.step(&mut events).unwrap_or(false) {}
    assert!(events.len() as u64 <= d.stats().lines);
});
