//! The Intel PT decoder against libipt's own test vectors (`shared/fixtures/intel-pt`): every
//! vector's packet listing must equal its `-ptdump.exp` and its instruction flow its
//! `-ptxed.exp`, compared as libipt's test script does (`diff -ub`: runs of blanks are equal),
//! except the vectors listed in `SKIP_*` with their reason. Run with `--features intel-pt`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weft_sources::intel_pt::flow::{self, CallKind, FlowItem, Image, ListingOptions};
use weft_sources::intel_pt::packet::{self, DumpOptions, Packet};
use weft_sources::intel_pt::{AddrFilter, DecoderConfig};
use weft_testkit::fixture;

/// The vectors were made with libipt 2.3 (commit 8978561f); the decoder is libipt 2.1.2, the
/// version `libipt-sys` builds. What 2.2 and 2.3 added is not there.
const TRIG: &str = "TRIG packet (trace trigger): added in libipt 2.2";
const SWINTR: &str = "CFE type 14 (software interrupt) and its swintr event: added in libipt 2.2";
const ERETU: &str = "the ERETU instruction (FRED): decoded from libipt 2.2";
const JMPABS: &str = "the JMPABS instruction (APX): decoded from libipt 2.2";
const POWER_ORDER: &str = "libipt 2.2 binds mwait/pwre/exstop/pwrx events to the instruction at the FUP's IP; 2.1.2 reports them ahead of it";
const RESYNC: &str = "--resync-on-error needs pt_insn_resync, added in libipt 2.2";
const BLOCK: &str = "ptxed's block decoder (--block-decoder): EXIST decodes with the instruction decoder";

/// Vectors with TRIG packets: neither listing is compared.
const TRIG_VECTORS: &[(&str, &str)] = &[
    ("fup-tip-trig", TRIG),
    ("mode-trig-trig", TRIG),
    ("psb-fup-ptw-trig", TRIG),
    ("psb-fup-trig", TRIG),
    ("tip-trig", TRIG),
    ("tip_pge-trig", TRIG),
    ("tnt-trig", TRIG),
    ("trig", TRIG),
];

/// Vectors whose packet listing is not compared, and why.
const SKIP_PTDUMP: &[&[(&str, &str)]] = &[
    TRIG_VECTORS,
    &[
        ("ptet-int-eretu", SWINTR),
        ("ptet-int-iret", SWINTR),
        ("ptet-int-iret-cpl_0", SWINTR),
        ("ptet-int-iret-cpl_3", SWINTR),
    ],
];

/// Vectors whose instruction flow is not compared, and why.
const SKIP_PTXED: &[&[(&str, &str)]] = &[
    TRIG_VECTORS,
    &[
        ("ptet-int-iret", SWINTR),
        ("ptet-int-iret-cpl_0", SWINTR),
        ("ptet-int-iret-cpl_3", SWINTR),
        ("ptet-int-eretu", ERETU),
        ("int-eretu-cpl_0", ERETU),
        ("tip-jmpabs", JMPABS),
        ("tip_pgd-jmpabs", JMPABS),
        ("mwait-pwre-ovf", POWER_ORDER),
        ("pwre-exstop_ip-pwrx", POWER_ORDER),
        ("tip_pgd-mwait-pwre-exstop-pwrx-tip_pge", POWER_ORDER),
        ("tip_pgd-mwait-pwre-exstop_ip-pwrx", POWER_ORDER),
        ("tip_pge-pwre-pwrx-tip_pgd", POWER_ORDER),
        ("ptxed-resync-bad_query-ovf", RESYNC),
        ("ptxed-resync-nomap-mode_exec-fup", RESYNC),
        ("ptxed-resync-nomap-mode_tsx-eos", RESYNC),
        ("ptxed-resync-nomap-mode_tsx-fup-tip", RESYNC),
        ("ptxed-resync-nomap-mode_tsx-tip_pgd", RESYNC),
        ("ptxed-resync-nomap-psb", RESYNC),
        ("ptxed-resync-nomap-ptw-fup", RESYNC),
        ("ptxed-resync-nomap-ptw-tip", RESYNC),
        ("ptxed-resync-nomap-tip", RESYNC),
        ("ptxed-resync-nomap-tip_pgd", RESYNC),
        ("ptxed-resync-nomap-tip_pge", RESYNC),
        ("ptxed-resync-psb-bad_status-psb", RESYNC),
        ("ptxed-block-stat_blocks", BLOCK),
        ("ptxed-end_on_call-fup-tip", BLOCK),
        ("ptxed-end_on_call-fup-tip_pgd", BLOCK),
        ("ptxed-end_on_call-tip_pgd", BLOCK),
        ("ptxed-end_on_jump-fup-tip_pgd", BLOCK),
    ],
];

/// What a check says of a CPU libipt 2.1.2 has no errata table for (newer models): that run
/// is left out; a vector needs at least one known CPU.
const UNKNOWN_CPU: &str = "cpu errata: unknown cpu";

/// A `cpu F/M` line of a vector (`None`: no CPU given).
type Cpu = Option<(u16, u8)>;

/// One vector: its files and the options of its `.ptt`.
struct Vector {
    name: String,
    dir: PathBuf,
    org: Option<u64>,
    ptdump_opts: Vec<String>,
    ptxed_opts: Vec<String>,
    cpus: Vec<(u16, u8)>,
}

fn vectors() -> Vec<Vector> {
    let dir = fixture("intel-pt/vectors");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".ptt").map(str::to_owned))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let ptt = std::fs::read_to_string(dir.join(format!("{name}.ptt"))).unwrap();
            let mut v = Vector {
                name,
                dir: dir.clone(),
                org: None,
                ptdump_opts: vec![],
                ptxed_opts: vec![],
                cpus: vec![],
            };
            for line in ptt.lines() {
                let l = line.trim();
                if let Some(org) = l.strip_prefix("org ").or_else(|| l.strip_prefix("ORG ")) {
                    v.org = Some(number(org.trim()));
                }
                let Some(c) = l.strip_prefix(';') else { continue };
                let c = c.trim();
                if let Some(o) = c.strip_prefix("opt:ptdump ") {
                    v.ptdump_opts.extend(o.split_whitespace().map(str::to_owned));
                } else if let Some(o) = c.strip_prefix("opt:ptxed ") {
                    v.ptxed_opts.extend(o.split_whitespace().map(str::to_owned));
                } else if let Some(cpu) = c.strip_prefix("cpu ") {
                    let (f, m) = cpu.trim().split_once('/').unwrap();
                    v.cpus.push((f.parse().unwrap(), m.parse().unwrap()));
                }
            }
            v
        })
        .collect()
}

fn number(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

/// The decoder settings both tools take (`--cpu` comes from the vector's `cpu` lines).
fn config(opts: &[String], cpu: Option<(u16, u8)>) -> (DecoderConfig, Vec<String>) {
    let mut c = DecoderConfig { cpu, ..DecoderConfig::default() };
    let mut rest = Vec::new();
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        let mut val = || number(it.next().unwrap());
        match o.as_str() {
            "--mtc-freq" => c.mtc_freq = val() as u8,
            "--nom-freq" => c.nom_freq = val() as u8,
            "--cpuid-0x15.eax" => c.cpuid_0x15_eax = val() as u32,
            "--cpuid-0x15.ebx" => c.cpuid_0x15_ebx = val() as u32,
            "--event:iflags" => c.iflags_events = true,
            "--event:tick" => c.tick_events = true,
            "--insn:keep-tcal-on-ovf" => c.keep_tcal_on_ovf = true,
            f if f.starts_with("--filter:addr") => {
                let n: usize = f["--filter:addr".len()..][..1].parse().unwrap();
                let r = c.addr_filter[n].get_or_insert(AddrFilter { cfg: 0, from: 0, to: 0 });
                match &f["--filter:addr".len() + 1..] {
                    "_cfg" => r.cfg = val() as u8,
                    "_a" => r.from = val(),
                    "_b" => r.to = val(),
                    other => panic!("unknown filter option {other}"),
                }
            }
            _ => rest.push(o.clone()),
        }
    }
    (c, rest)
}

/// `diff -b`'s view of a line: runs of blanks are one, trailing blanks none.
fn norm(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn expected(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(norm).collect()
}

/// ptdump's time-tracking output is ptdump's own estimate, made with libipt's internal
/// (unexported) time code, not part of the decode: lines of its calibration diagnostics go
/// and the `tsc`/`fcr` column is cut from timing packets.
fn without_time_columns(lines: Vec<String>) -> Vec<String> {
    lines
        .into_iter()
        .filter(|l| {
            !(l.starts_with('[')
                && (l.contains("calibrat")
                    || l.contains("error updating time")
                    || l.contains("error printing time")))
        })
        .map(|l| {
            let t: Vec<&str> = l.split(' ').collect();
            let timing = t.len() >= 2 && ["tsc", "cbr", "tma", "mtc", "cyc", "psb", "ovf"].contains(&t[1]);
            match t.iter().rposition(|w| *w == "tsc" || *w == "fcr") {
                Some(i) if timing && i >= 2 => t[..i].join(" "),
                _ => l,
            }
        })
        .collect()
}

fn diff(name: &str, want: &[String], got: &[String]) -> Option<String> {
    if want == got {
        return None;
    }
    let at = want.iter().zip(got).position(|(a, b)| a != b).unwrap_or(want.len().min(got.len()));
    Some(format!(
        "{name}: first difference at line {}: expected {:?}, got {:?} ({} vs {} lines)",
        at + 1,
        want.get(at),
        got.get(at),
        want.len(),
        got.len()
    ))
}

fn run_ptdump(v: &Vector, cpu: Option<(u16, u8)>) -> Result<(), String> {
    let (cfg, rest) = config(&v.ptdump_opts, cpu);
    let mut opts = DumpOptions::default();
    let mut time = false;
    for o in &rest {
        match o.as_str() {
            "--lastip" => opts.last_ip = true,
            "--exec-mode" => opts.exec_mode = true,
            "--no-offset" => opts.offset = false,
            "--raw" => opts.raw = true,
            "--no-cyc" => opts.no_cyc = true,
            "--time" | "--tcal" => time = true,
            "--time-delta" | "--no-tcal" | "--no-wall-clock" | "--keep-tcal-on-ovf" => {}
            other => return Err(format!("{}: ptdump option {other} not supported", v.name)),
        }
    }
    let trace = std::fs::read(v.dir.join(format!("{}.pt", v.name))).unwrap();
    let got: Vec<String> = packet::dump(&trace, &cfg, opts)
        .map_err(|e| format!("{}: {e}", v.name))?
        .iter()
        .map(|l| norm(l))
        .collect();
    let mut want = expected(&v.dir.join(format!("{}-ptdump.exp", v.name)));
    if time {
        want = without_time_columns(want);
    }
    diff(&v.name, &want, &got).map_or(Ok(()), Err)
}

fn decode_flow(v: &Vector, cfg: &DecoderConfig) -> Result<Vec<FlowItem>, String> {
    let trace = std::fs::read(v.dir.join(format!("{}.pt", v.name))).unwrap();
    let mut image = Image::new().unwrap();
    let bin = v.dir.join(format!("{}.bin", v.name));
    let org = v.org.ok_or_else(|| format!("{}: no org", v.name))?;
    let size = std::fs::metadata(&bin).map_err(|e| format!("{}: {e}", bin.display()))?.len();
    if size > 0 {
        image.add_file(&bin, 0, size, org).map_err(|e| format!("{}: {e}", v.name))?;
    }
    let mut items = Vec::new();
    flow::decode(&trace, &image, cfg, |i| items.push(i)).map_err(|e| format!("{}: {e}", v.name))?;
    Ok(items)
}

fn run_ptxed(v: &Vector, cpu: Option<(u16, u8)>) -> Result<(), String> {
    let (cfg, rest) = config(&v.ptxed_opts, cpu);
    let mut opts = ListingOptions::default();
    for o in &rest {
        match o.as_str() {
            "--event:ip" => opts.event_ip = true,
            "--event:time" => opts.event_time = true,
            "--quiet" => opts.quiet = true,
            "--stat" | "--stat:insn" => opts.stat_insn = true,
            // the instruction decoder is the default; the block decoder's setting does not apply
            "--insn-decoder" | "--block:keep-tcal-on-ovf" => {}
            other => return Err(format!("{}: ptxed option {other} not supported", v.name)),
        }
    }
    let got: Vec<String> = flow::listing(&decode_flow(v, &cfg)?, opts).iter().map(|l| norm(l)).collect();
    let want = expected(&v.dir.join(format!("{}-ptxed.exp", v.name)));
    diff(&v.name, &want, &got).map_or(Ok(()), Err)
}

/// Run `check` on every vector that has `tool`'s expectation, once per `cpu` line of the
/// vector (or once without a CPU), as libipt's test script does.
fn check_all(tool: &str, skip: &[&[(&str, &str)]], check: fn(&Vector, Cpu) -> Result<(), String>) -> usize {
    let vs = vectors();
    assert_eq!(vs.len(), 172, "the fixture set changed");
    let skip: BTreeMap<&str, &str> = skip.iter().flat_map(|s| s.iter().copied()).collect();
    let mut failures = Vec::new();
    let mut passed = 0;
    let mut skipped_but_passing = Vec::new();
    for v in &vs {
        if !v.dir.join(format!("{}-{tool}.exp", v.name)).exists() {
            continue;
        }
        let cpus: Vec<Option<(u16, u8)>> =
            if v.cpus.is_empty() { vec![None] } else { v.cpus.iter().copied().map(Some).collect() };
        let mut known = 0;
        let result = cpus.iter().try_for_each(|&cpu| match check(v, cpu) {
            Err(e) if e.ends_with(UNKNOWN_CPU) => Ok(()),
            r => {
                known += 1;
                r
            }
        });
        let result = if known == 0 {
            Err(format!("{}: no CPU of the vector is known to libipt", v.name))
        } else {
            result
        };
        match (result, skip.contains_key(v.name.as_str())) {
            (Ok(()), false) => passed += 1,
            (Ok(()), true) => skipped_but_passing.push(v.name.clone()),
            (Err(e), false) => failures.push(e),
            (Err(_), true) => {}
        }
    }
    assert!(failures.is_empty(), "{} {tool} vectors differ:\n{}", failures.len(), failures.join("\n"));
    assert!(skipped_but_passing.is_empty(), "listed as skipped but passing: {skipped_but_passing:?}");
    eprintln!("{tool}: {passed} vectors equal, {} listed as not compared", skip.len());
    passed
}

#[test]
fn packets_match_ptdump() {
    let passed = check_all("ptdump", SKIP_PTDUMP, run_ptdump);
    assert!(passed >= 160, "only {passed} ptdump vectors compared");
}

#[test]
fn instruction_flow_matches_ptxed() {
    let passed = check_all("ptxed", SKIP_PTXED, run_ptxed);
    assert!(passed >= 107, "only {passed} ptxed vectors compared");
}

fn transfers(name: &str) -> Vec<(CallKind, u64, u64)> {
    let v = vectors().into_iter().find(|v| v.name == name).unwrap();
    let items = decode_flow(&v, &DecoderConfig::default()).unwrap();
    flow::calls(&items).iter().map(|t| (t.kind, t.from, t.to)).collect()
}

/// Calls and returns come out of the instruction flow with their targets: a direct call
/// (`call l4` at 0x100000, 5 bytes) and its return to the call site's next instruction; an
/// indirect call whose target only the trace knows (`call rbx`, TIP to l4).
#[test]
fn function_calls_and_returns() {
    assert_eq!(
        transfers("call_direct-ret_compressed"),
        [(CallKind::Call, 0x100000, 0x100008), (CallKind::Return, 0x100008, 0x100005)]
    );
    assert_eq!(
        transfers("call_indirect-ret_uncompressed"),
        [(CallKind::Call, 0x100000, 0x100004), (CallKind::Return, 0x100004, 0x100002)]
    );
    // a transfer cut by disabling (tip.pgd right after the call) has no known target
    for v in vectors() {
        if v.org.is_none() || !v.dir.join(format!("{}.bin", v.name)).exists() {
            continue;
        }
        let Ok(items) = decode_flow(&v, &DecoderConfig::default()) else { continue };
        let ips: Vec<u64> = items
            .iter()
            .filter_map(|i| if let FlowItem::Insn { insn, .. } = i { Some(insn.ip) } else { None })
            .collect();
        for t in flow::calls(&items) {
            assert!(ips.contains(&t.from) && ips.contains(&t.to), "{}: {t:?} not in the flow", v.name);
        }
    }
}

/// Packets are typed, and every one prints as ptdump names it.
#[test]
fn packets_are_typed() {
    let trace = std::fs::read(fixture("intel-pt/vectors/call_direct-ret_compressed.pt")).unwrap();
    let mut dec = packet::PacketDecoder::new(&trace, &DecoderConfig::default()).unwrap();
    assert!(dec.sync_forward().unwrap());
    let mut got = Vec::new();
    while let Some((off, _, p)) = dec.next_packet().unwrap() {
        got.push((off, p));
    }
    assert_eq!(got[0], (0, Packet::Psb));
    assert!(got.iter().any(|(_, p)| *p == Packet::Tnt { wide: false, bits: vec![true, true] }), "{got:?}");
    assert_eq!(got.last().map(|(_, p)| p.to_string()).as_deref(), Some("tip.pgd 0: ????????????????"));
    // garbage: errors, never a panic
    let noise: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let _ = packet::dump(&noise, &DecoderConfig::default(), DumpOptions::default()).unwrap();
    let mut items = 0;
    flow::decode(&noise, &Image::new().unwrap(), &DecoderConfig::default(), |_| items += 1).unwrap();
    // the real stream with no code image: every instruction fetch fails, as an error item
    let mut errors = Vec::new();
    flow::decode(&trace, &Image::new().unwrap(), &DecoderConfig::default(), |i| {
        if let FlowItem::Error { error, .. } = i {
            errors.push(error.to_string())
        }
    })
    .unwrap();
    assert_eq!(errors, ["error: no memory mapped at this address"]);
}
