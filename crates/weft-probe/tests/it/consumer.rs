use std::path::{Path, PathBuf};
use std::time::Duration;
use weft_probe::consumer::{ConsumerError, RecordError, Segment};
use weft_probe::layout::*;
use weft_probe::{Op, Selector, tracepoint};

tracepoint!(static CTL = "ctltest.switch", Debug, group = "ctltest");
tracepoint!(static CTL_ON = "ctltest.always", Info, group = "ctltest", flags = [always_on]);

fn copy_segment(tag: &str) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let src = weft_probe::segment::segment_path().unwrap();
    let bytes = std::fs::read(&src).unwrap();
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(format!("{tag}.weft"));
    std::fs::write(&p, &bytes).unwrap();
    (d, p, bytes)
}

fn patch(p: &Path, off: usize, v: &[u8]) {
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new().write(true).open(p).unwrap().write_all_at(v, off as u64).unwrap();
}

fn rd64(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}

#[test]
fn corrupt_headers_are_rejected_with_the_field_named() {
    let _g = crate::lock();
    let cases: Vec<(&str, usize, Vec<u8>, &str)> = vec![
        ("magic", OFF_MAGIC, b"NOTWEFT!".to_vec(), "not a weft probe segment"),
        ("version", OFF_VERSION, 99u32.to_ne_bytes().to_vec(), "version 99"),
        ("total", OFF_TOTAL_SIZE, 12345u64.to_ne_bytes().to_vec(), "total_size"),
        ("ringcap", OFF_RING_CAPACITY, 1000u64.to_ne_bytes().to_vec(), "ring_capacity"),
        ("stride", OFF_RING_STRIDE, 7u64.to_ne_bytes().to_vec(), "ring_stride"),
        ("regoff", OFF_REGISTRY_OFFSET, (u64::MAX - 3).to_ne_bytes().to_vec(), "registry_offset"),
        ("rings", OFF_RING_COUNT, u32::MAX.to_ne_bytes().to_vec(), "rings_offset"),
        ("state", OFF_STATE_OFFSET, 8u64.to_ne_bytes().to_vec(), "state_offset"),
    ];
    for (tag, off, val, want) in cases {
        let (_d, p, _) = copy_segment(tag);
        patch(&p, off, &val);
        let err = Segment::open(&p).expect_err(tag).to_string();
        assert!(err.contains(want), "{tag}: {err}");
        assert!(err.contains(&p.display().to_string()), "{tag}: the error names the file: {err}");
    }
    // a truncated file
    let (_d, p, bytes) = copy_segment("short");
    std::fs::write(&p, &bytes[..100]).unwrap();
    assert!(matches!(Segment::open(&p), Err(ConsumerError::Header { field: "total_size", .. })));
    // registry_len beyond capacity: open works, registry() fails clearly
    let (_d, p, _) = copy_segment("reglen");
    patch(&p, OFF_REGISTRY_LEN, &u64::MAX.to_ne_bytes());
    let seg = Segment::open(&p).unwrap();
    assert!(seg.registry().unwrap_err().to_string().contains("registry_len"));
}

#[test]
fn corrupt_rings_are_skipped_not_fatal() {
    let _g = crate::lock();
    let (_d, p, bytes) = copy_segment("ring");
    let rings = rd64(&bytes, OFF_RINGS_OFFSET) as usize;
    let stride = rd64(&bytes, OFF_RING_STRIDE) as usize;
    let cap = rd64(&bytes, OFF_RING_CAPACITY);
    // ring 0: a record whose length is not a multiple of 8
    let r0 = rings;
    let t0 = rd64(&bytes, r0 + RING_OFF_TAIL);
    patch(&p, r0 + RING_OFF_HEAD, &(t0 + 64).to_ne_bytes());
    let at = r0 + RING_HEADER_SIZE + (t0 % cap) as usize;
    patch(&p, at, &(7u64 | (KIND_EVENT as u64) << 16).to_ne_bytes());
    // ring 1: head and tail further apart than the capacity
    let r1 = rings + stride;
    let t1 = rd64(&bytes, r1 + RING_OFF_TAIL);
    patch(&p, r1 + RING_OFF_HEAD, &(t1 + cap * 3).to_ne_bytes());
    // ring 2: a well-framed record with an unknown kind
    let r2 = rings + 2 * stride;
    let t2 = rd64(&bytes, r2 + RING_OFF_TAIL);
    patch(&p, r2 + RING_OFF_HEAD, &(t2 + 48).to_ne_bytes());
    patch(&p, r2 + RING_HEADER_SIZE + (t2 % cap) as usize, &(48u64 | 77 << 16).to_ne_bytes());

    let mut seg = Segment::open(&p).unwrap();
    let rep = seg.drain(|_| {});
    let msgs: Vec<String> = rep.errors.iter().map(|e| e.to_string()).collect();
    assert!(
        rep.errors.iter().any(|e| matches!(
            e,
            ConsumerError::Record { ring: 0, source: RecordError::Length { len: 7, .. }, .. }
        )),
        "{msgs:?}"
    );
    assert!(rep.errors.iter().any(|e| matches!(e, ConsumerError::Ring { ring: 1, .. })), "{msgs:?}");
    assert!(
        rep.errors
            .iter()
            .any(|e| matches!(e, ConsumerError::Record { ring: 2, source: RecordError::Kind(77), .. })),
        "{msgs:?}"
    );
    assert!(rep.skipped_bytes >= 64 + 48);
    // the tails moved to the heads: a second drain is clean
    let rep2 = seg.drain(|_| {});
    assert!(rep2.errors.is_empty(), "{:?}", rep2.errors);
}

#[test]
fn second_consumer_is_refused() {
    let _g = crate::lock();
    let a = crate::own_segment();
    let path = a.path().to_path_buf();
    assert!(matches!(Segment::open(&path), Err(ConsumerError::Busy { .. })));
    drop(a);
    Segment::open(&path).expect("free again after the first consumer detached");
}

#[test]
fn control_through_shared_memory() {
    let _g = crate::lock();
    let seg = crate::own_segment();
    assert_eq!(seg.pid(), std::process::id());
    assert_eq!(seg.service(), "weft-probe-tests");
    assert!(seg.producer_alive());
    let reg = seg.registry().unwrap();
    let me = reg.iter().find(|t| t.name == "ctltest.switch").expect("exported");
    assert_eq!(me.group, "ctltest");
    assert!(!CTL.enabled());

    let (ids, seq) = seg.switch(&"ctltest.switch".parse::<Selector>().unwrap(), Op::Enable).unwrap();
    assert_eq!(ids, vec![CTL.id()]);
    assert!(seg.wait_applied(seq, Duration::from_secs(5)), "the control thread applies requests");
    assert!(CTL.enabled());
    assert!(
        seg.registry().unwrap().iter().find(|t| t.name == "ctltest.switch").unwrap().enabled,
        "state mirrored"
    );

    // a plain disable leaves the always-on one on and is counted
    let protected_before = seg.stats().ctl_protected;
    let (_, seq) = seg.switch(&"group:ctltest".parse::<Selector>().unwrap(), Op::Disable).unwrap();
    assert!(seg.wait_applied(seq, Duration::from_secs(5)));
    assert!(!CTL.enabled());
    assert!(CTL_ON.enabled());
    assert_eq!(seg.stats().ctl_protected, protected_before + 1);

    // a malformed control byte is rejected and counted, nothing else changes
    let rejected_before = seg.stats().ctl_rejected;
    let raw = std::fs::OpenOptions::new().write(true).open(seg.path()).unwrap();
    let coff = rd64(&std::fs::read(seg.path()).unwrap(), OFF_CONTROL_OFFSET);
    std::os::unix::fs::FileExt::write_all_at(&raw, &[0xEE], coff + CTL.id() as u64).unwrap();
    let seq = seg.control(&[]).unwrap();
    assert!(seg.wait_applied(seq, Duration::from_secs(5)));
    assert_eq!(seg.stats().ctl_rejected, rejected_before + 1);
    assert!(!CTL.enabled());

    // ids beyond the control array are refused locally
    assert!(matches!(seg.control(&[(u32::MAX, Op::Enable)]), Err(ConsumerError::Id { .. })));

    let (_, seq) = seg.switch(&"ctltest.always".parse::<Selector>().unwrap(), Op::ForceDisable).unwrap();
    assert!(seg.wait_applied(seq, Duration::from_secs(5)));
    assert!(!CTL_ON.enabled());
    weft_probe::enable(&"ctltest.always".parse::<Selector>().unwrap());
}
