//! A small CTF 1.8 trace writer in LTTng-UST's layout, for tests, benchmarks and fuzzing
//! seeds: `DIR/ust/uid/0/64-bit/metadata` (packetized, magic 0x75D11D57) and one stream file
//! per CPU (`ch_<cpu>`), with LTTng's packet header and context and either event header
//! (`compact`: 5-bit id + 27-bit timestamp, `large`: 16-bit id + 32-bit timestamp; the
//! extended form when the id or the time since the previous event does not fit, as LTTng
//! does). Timestamps wrap the short fields often, so readers must reconstruct them.
//!
//! Event classes (ids): 0 `weft_synth:small` `{ int32 v }`; 1 `weft_synth:mixed` (unsigned
//! and signed integers of 8–64 bits, a hex integer, a big-endian integer, a string, an enum,
//! a float and a double, a fixed array, a text array, a sequence); 2 `weft_synth:bits`
//! (unaligned 3-, 13-, 1- and 64-bit fields, signed and not). Ids 40 and 70000 repeat `small`
//! (they force extended headers).

use std::io::Write;
use std::path::{Path, PathBuf};

use weft_sources::ctf::decode::PACKET_MAGIC;
use weft_sources::ctf::meta::{METADATA_HEADER_LEN, METADATA_MAGIC};

/// Event header layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// 5-bit id, 27-bit timestamp.
    Compact,
    /// 16-bit id, 32-bit timestamp.
    Large,
}

/// What to write.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    /// Events in total.
    pub events: u64,
    /// Stream files (CPUs).
    pub streams: u32,
    /// Packet size in bytes (LTTng's sub-buffer size).
    pub packet_bytes: usize,
    /// Event header layout.
    pub header: Header,
    /// Big-endian trace (LTTng writes the host's order; both must read).
    pub big_endian: bool,
    /// Only `weft_synth:small` events (the benchmark's "small events").
    pub small_only: bool,
    /// Seed of the generator.
    pub seed: u64,
    /// Clock offset from the epoch, ns.
    pub clock_offset_ns: u64,
    /// Mean gap between events of a stream, ns (a few gaps are much longer).
    pub mean_gap_ns: u64,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            events: 1000,
            streams: 2,
            packet_bytes: 64 * 1024,
            header: Header::Compact,
            big_endian: false,
            small_only: false,
            seed: 1,
            clock_offset_ns: 1_700_000_000_000_000_000,
            mean_gap_ns: 500,
        }
    }
}

/// What was written.
#[derive(Debug, Clone, Default)]
pub struct SynthSummary {
    /// The directory holding `metadata`.
    pub trace_dir: PathBuf,
    /// Events written.
    pub events: u64,
    /// Events written with an extended header.
    pub extended: u64,
    /// Times a short timestamp field wrapped (its value was below the previous one's).
    pub wraps: u64,
    /// Packets written.
    pub packets: u64,
}

/// The trace UUID: fixed bytes, then the seed (traces with different seeds are different
/// traces to readers that group streams by UUID, as babeltrace2 does).
fn uuid(opts: &SynthOptions) -> [u8; 16] {
    let mut u = [0x5e, 0xf7, 0x00, 0x01, 0xca, 0xfe, 0x4b, 0x1d, 0, 0, 0, 0, 0, 0, 0, 0];
    u[8..].copy_from_slice(&(opts.seed ^ ((opts.header == Header::Large) as u64) << 63).to_be_bytes());
    u
}

fn uuid_text(opts: &SynthOptions) -> String {
    let h: String = uuid(opts).iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// The TSDL text of a synthetic trace.
pub fn metadata(opts: &SynthOptions) -> String {
    let bo = if opts.big_endian { "be" } else { "le" };
    let header = match opts.header {
        Header::Compact => "event_header_compact",
        Header::Large => "event_header_large",
    };
    let (off_s, off) = (opts.clock_offset_ns / 1_000_000_000, opts.clock_offset_ns % 1_000_000_000);
    format!(
        r#"/* CTF 1.8 */

typealias integer {{ size = 8; align = 8; signed = false; }} := uint8_t;
typealias integer {{ size = 16; align = 8; signed = false; }} := uint16_t;
typealias integer {{ size = 32; align = 8; signed = false; }} := uint32_t;
typealias integer {{ size = 64; align = 8; signed = false; }} := uint64_t;
typealias integer {{ size = 64; align = 8; signed = false; }} := unsigned long;
typealias integer {{ size = 5; align = 1; signed = false; }} := uint5_t;
typealias integer {{ size = 27; align = 1; signed = false; }} := uint27_t;

trace {{
	major = 1;
	minor = 8;
	uuid = "{uuid}";
	byte_order = {bo};
	packet.header := struct {{
		uint32_t magic;
		uint8_t  uuid[16];
		uint32_t stream_id;
		uint64_t stream_instance_id;
	}};
}};

env {{
	hostname = "synth";
	domain = "ust";
	tracer_name = "weft-synth";
	tracer_major = 2;
	tracer_minor = 13;
}};

clock {{
	name = "monotonic";
	uuid = "{clock_uuid}";
	description = "Monotonic Clock";
	freq = 1000000000; /* Frequency, in Hz */
	offset_s = {off_s};
	offset = {off};
}};

typealias integer {{
	size = 27; align = 1; signed = false;
	map = clock.monotonic.value;
}} := uint27_clock_monotonic_t;

typealias integer {{
	size = 32; align = 8; signed = false;
	map = clock.monotonic.value;
}} := uint32_clock_monotonic_t;

typealias integer {{
	size = 64; align = 8; signed = false;
	map = clock.monotonic.value;
}} := uint64_clock_monotonic_t;

struct packet_context {{
	uint64_clock_monotonic_t timestamp_begin;
	uint64_clock_monotonic_t timestamp_end;
	uint64_t content_size;
	uint64_t packet_size;
	uint64_t packet_seq_num;
	unsigned long events_discarded;
	uint32_t cpu_id;
}};

struct event_header_compact {{
	enum : uint5_t {{ compact = 0 ... 30, extended = 31 }} id;
	variant <id> {{
		struct {{
			uint27_clock_monotonic_t timestamp;
		}} compact;
		struct {{
			uint32_t id;
			uint64_clock_monotonic_t timestamp;
		}} extended;
	}} v;
}} align(8);

struct event_header_large {{
	enum : uint16_t {{ compact = 0 ... 65534, extended = 65535 }} id;
	variant <id> {{
		struct {{
			uint32_clock_monotonic_t timestamp;
		}} compact;
		struct {{
			uint32_t id;
			uint64_clock_monotonic_t timestamp;
		}} extended;
	}} v;
}} align(8);

stream {{
	id = 0;
	event.header := struct {header};
	packet.context := struct packet_context;
	event.context := struct {{
		integer {{ size = 32; align = 8; signed = 1; encoding = none; base = 10; }} _vtid;
	}};
}};

event {{
	name = "weft_synth:small";
	id = 0;
	stream_id = 0;
	loglevel = 13;
	fields := struct {{
		integer {{ size = 32; align = 8; signed = 1; encoding = none; base = 10; }} _v;
	}};
}};

event {{
	name = "weft_synth:mixed";
	id = 1;
	stream_id = 0;
	fields := struct {{
		integer {{ size = 8; align = 8; signed = 1; encoding = none; base = 10; }} _i8;
		integer {{ size = 16; align = 8; signed = 0; encoding = none; base = 10; }} _u16;
		integer {{ size = 64; align = 8; signed = 1; encoding = none; base = 10; }} _i64;
		integer {{ size = 64; align = 8; signed = 0; encoding = none; base = 16; }} _u64x;
		integer {{ size = 32; align = 8; signed = 0; encoding = none; base = 10; byte_order = {other}; }} _swapped;
		string _s;
		enum : integer {{ size = 8; align = 8; signed = 0; }} {{ "ZERO" = 0, "SMALL" = 1 ... 9, "BIG" = 200 ... 255 }} _e;
		floating_point {{ exp_dig = 8; mant_dig = 24; align = 8; }} _f;
		floating_point {{ exp_dig = 11; mant_dig = 53; align = 8; }} _d;
		integer {{ size = 16; align = 8; signed = 1; encoding = none; base = 10; }} _arr[3];
		integer {{ size = 8; align = 8; signed = 1; encoding = UTF8; base = 10; }} _txt[6];
		integer {{ size = 32; align = 8; signed = 0; encoding = none; base = 10; }} __seq_length;
		integer {{ size = 32; align = 32; signed = 1; encoding = none; base = 10; }} _seq[ __seq_length ];
	}};
}};

event {{
	name = "weft_synth:bits";
	id = 2;
	stream_id = 0;
	fields := struct {{
		integer {{ size = 3; align = 1; signed = 0; }} _a;
		integer {{ size = 13; align = 1; signed = 1; }} _b;
		integer {{ size = 1; align = 1; signed = 0; }} _c;
		integer {{ size = 64; align = 1; signed = 0; base = 16; }} _d;
		integer {{ size = 7; align = 1; signed = 1; }} _e;
	}};
}};

event {{
	name = "weft_synth:small40";
	id = 40;
	stream_id = 0;
	fields := struct {{
		integer {{ size = 32; align = 8; signed = 1; encoding = none; base = 10; }} _v;
	}};
}};

event {{
	name = "weft_synth:small70000";
	id = 70000;
	stream_id = 0;
	fields := struct {{
		integer {{ size = 32; align = 8; signed = 1; encoding = none; base = 10; }} _v;
	}};
}};
"#,
        uuid = uuid_text(opts),
        // One host clock: traces of one machine (kernel and user space) share its UUID.
        clock_uuid = "5ef70001-c10c-4b1d-9a11-223344556677",
        other = if opts.big_endian { "le" } else { "be" },
    )
}

/// Metadata text cut into metadata packets of at most `chunk` text bytes each.
pub fn packetize_metadata(text: &str, chunk: usize, big_endian: bool, uuid: [u8; 16]) -> Vec<u8> {
    let w = |v: u32| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
    let mut out = Vec::new();
    for part in text.as_bytes().chunks(chunk.max(1)) {
        let content = (METADATA_HEADER_LEN + part.len()) as u32;
        let size = content.div_ceil(64) * 64;
        out.extend_from_slice(&w(METADATA_MAGIC));
        out.extend_from_slice(&uuid);
        out.extend_from_slice(&w(0));
        out.extend_from_slice(&w(content * 8));
        out.extend_from_slice(&w(size * 8));
        out.extend_from_slice(&[0, 0, 0, 1, 8]);
        out.extend_from_slice(part);
        out.resize(out.len() + (size - content) as usize, 0);
    }
    out
}

/// Bit-level writer in CTF bit order.
struct Bits {
    buf: Vec<u8>,
    pos: u64,
    be: bool,
}

impl Bits {
    fn align(&mut self, a: u64) {
        self.pos = self.pos.div_ceil(a) * a;
        self.grow();
    }
    fn grow(&mut self) {
        let need = self.pos.div_ceil(8) as usize + 16;
        if self.buf.len() < need {
            self.buf.resize(need, 0);
        }
    }
    fn int(&mut self, v: u64, size: u32, align: u64, be: bool) {
        self.align(align);
        let end = self.pos + size as u64;
        let need = end.div_ceil(8) as usize + 16;
        if self.buf.len() < need {
            self.buf.resize(need, 0);
        }
        for i in 0..size as u64 {
            let bit = if be { (v >> (size as u64 - 1 - i)) & 1 } else { (v >> i) & 1 };
            let p = self.pos + i;
            let shift = if be { 7 - p % 8 } else { p % 8 };
            let b = &mut self.buf[(p / 8) as usize];
            *b = (*b & !(1 << shift)) | ((bit as u8) << shift);
        }
        self.pos = end;
    }
    fn u(&mut self, v: u64, size: u32) {
        let be = self.be;
        let align = if size.is_multiple_of(8) { 8 } else { 1 };
        self.int(v, size, align, be);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.align(8);
        for x in b {
            self.u(*x as u64, 8);
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// Writes a trace under `root` (`root/ust/uid/0/64-bit/`).
pub fn write_trace(root: &Path, opts: &SynthOptions) -> std::io::Result<SynthSummary> {
    let dir = root.join("ust").join("uid").join("0").join("64-bit");
    std::fs::create_dir_all(&dir)?;
    let text = metadata(opts);
    std::fs::write(dir.join("metadata"), packetize_metadata(&text, 1000, opts.big_endian, uuid(opts)))?;
    let mut sum = SynthSummary { trace_dir: dir.clone(), ..SynthSummary::default() };
    let mut rng = Rng(opts.seed.max(1));
    let n = opts.streams.max(1);
    for cpu in 0..n {
        let count = opts.events / n as u64 + u64::from((cpu as u64) < opts.events % n as u64);
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join(format!("ch_{cpu}")))?);
        write_stream(&mut f, opts, cpu, count, &mut rng, &mut sum)?;
        f.flush()?;
    }
    Ok(sum)
}

fn write_stream(
    f: &mut impl Write,
    opts: &SynthOptions,
    cpu: u32,
    count: u64,
    rng: &mut Rng,
    sum: &mut SynthSummary,
) -> std::io::Result<()> {
    let be = opts.big_endian;
    let (id_bits, ts_bits, ext_id) = match opts.header {
        Header::Compact => (5u32, 27u32, 31u64),
        Header::Large => (16, 32, 65535),
    };
    let mut ts: u64 = 1_000 + cpu as u64 * 7;
    let mut last_ts = ts;
    let mut written = 0u64;
    let mut seq = 0u64;
    let mut i = 0u64;
    while written < count || (count == 0 && seq == 0) {
        // One packet.
        let mut p = Bits { buf: Vec::with_capacity(opts.packet_bytes + 64), pos: 0, be };
        p.u(PACKET_MAGIC as u64, 32);
        p.bytes(&uuid(opts));
        p.u(0, 32);
        p.u(cpu as u64, 64);
        let ctx_at = p.pos;
        // Placeholders: timestamp_begin, timestamp_end, content_size, packet_size.
        for _ in 0..4 {
            p.u(0, 64);
        }
        p.u(seq, 64);
        p.u(0, 64);
        p.u(cpu as u64, 32);
        let begin = ts;
        let limit = (opts.packet_bytes as u64 - 256) * 8;
        while written < count && p.pos < limit {
            // Advance time: mostly small gaps, sometimes one that wraps the short field or
            // needs the extended header.
            let r = rng.next();
            let gap = match r % 1000 {
                0 => (1u64 << ts_bits) + r % 1000,        // too far: extended header
                1..=3 => (1u64 << ts_bits) - 1 - r % 100, // just fits: wraps the short field
                _ => r % (2 * opts.mean_gap_ns + 1),
            };
            ts += gap;
            let id: u64 = if opts.small_only {
                0
            } else {
                match (r >> 20) % 20 {
                    0..=9 => 0,
                    10..=15 => 1,
                    16..=17 => 2,
                    18 => 40,
                    _ => 70000,
                }
            };
            let extended = id >= ext_id || (ts - last_ts) >> ts_bits != 0;
            p.align(8);
            if extended {
                p.int(ext_id, id_bits, 1, be);
                p.u(id, 32);
                p.u(ts, 64);
                sum.extended += 1;
            } else {
                let m = (1u64 << ts_bits) - 1;
                if ts & m < last_ts & m {
                    sum.wraps += 1;
                }
                p.int(id, id_bits, 1, be);
                p.int(ts & m, ts_bits, if ts_bits.is_multiple_of(8) { 8 } else { 1 }, be);
            }
            last_ts = ts;
            p.u(1000 + cpu as u64, 32); // vtid
            match id {
                1 => {
                    p.align(32); // the payload struct aligns to its most aligned member (`seq`)
                    p.u((-(i as i64 % 100)) as u8 as u64, 8);
                    p.u(i % 65536, 16);
                    p.u((i as i64 * -1_000_003) as u64, 64);
                    p.u(0xfedc_ba98_7654_3210 ^ i, 64);
                    p.int(0xdead_0000 + i % 65536, 32, 8, !be);
                    let s = format!("s{}", "x".repeat((i % 7) as usize));
                    p.bytes(s.as_bytes());
                    p.bytes(&[0]);
                    p.u([0u64, 5, 222, 100][(i % 4) as usize], 8);
                    p.u((i as f32 * 0.5).to_bits() as u64, 32);
                    p.u((i as f64 / 3.0).to_bits(), 64);
                    for k in 0..3u64 {
                        p.u((k as i64 - 1) as u16 as u64, 16);
                    }
                    let t: &[u8; 6] = if i.is_multiple_of(2) { b"abc\0\0\0" } else { b"abcdef" };
                    p.bytes(t);
                    let len = i % 4;
                    p.u(len, 32);
                    p.align(32); // a sequence aligns to its elements even when empty
                    for k in 0..len {
                        p.int((k as i32 - 2) as u32 as u64, 32, 32, be);
                    }
                }
                2 => {
                    p.int(i % 8, 3, 1, be);
                    p.int(((i as i64 % 8000) - 4000) as u64 & 0x1fff, 13, 1, be);
                    p.int(i % 2, 1, 1, be);
                    p.int(0x0123_4567_89ab_cdef ^ (i << 7), 64, 1, be);
                    p.int((-(i as i64 % 64)) as u64 & 0x7f, 7, 1, be);
                }
                _ => p.u(i as u32 as u64, 32),
            }
            written += 1;
            i += 1;
        }
        let content = p.pos;
        let size = (opts.packet_bytes as u64 * 8).max(content.div_ceil(8) * 8);
        // Fill in the packet context.
        let mut q = Bits { buf: std::mem::take(&mut p.buf), pos: ctx_at, be };
        q.u(begin, 64);
        q.u(ts, 64);
        q.u(content, 64);
        q.u(size, 64);
        let mut bytes = q.buf;
        bytes.resize((size / 8) as usize, 0);
        // Anything past the content is padding: zero it (the writer's slack).
        let c = content.div_ceil(8) as usize;
        if !content.is_multiple_of(8) {
            bytes[c - 1] &= if be { 0xffu8 << (8 - content % 8) } else { 0xffu8 >> (8 - content % 8) };
        }
        bytes[c..].fill(0);
        f.write_all(&bytes)?;
        sum.packets += 1;
        seq += 1;
        if count == 0 {
            break;
        }
    }
    sum.events += written;
    Ok(())
}
