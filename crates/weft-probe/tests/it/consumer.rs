use std::path::{Path, PathBuf};
use std::time::Duration;
use weft_probe::consumer::{ConsumerError, FieldValue, RecordError, Segment};
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
    // Another test thread's fork holds a copy of the fd (and so the flock) until its child
    // execs (O_CLOEXEC): the lock is free again within moments, not necessarily at once.
    let mut again = Segment::open(&path);
    for _ in 0..200 {
        if !matches!(again, Err(ConsumerError::Busy { .. })) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        again = Segment::open(&path);
    }
    again.expect("free again after the first consumer detached");
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

tracepoint!(static POS = "postest.hit", Debug, group = "postest", fields = [seq: u64]);

/// `read_ring` reads without consuming; `commit` stores tail and mark; a second consumer (after
/// the first one "died") sees the stored positions; `open_shared` controls but cannot drain.
#[test]
fn read_ring_commit_and_positions_survive_a_consumer_restart() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    weft_probe::enable(&"postest.hit".parse::<Selector>().unwrap());
    for i in 0..10u64 {
        weft_probe::event!(POS, seq = i);
    }
    let id = POS.id();
    let tid = weft_probe::tid();
    let ring = seg.stats().rings.iter().find(|r| r.tid == tid && r.pending > 0).expect("our ring").index;
    let p0 = seg.positions()[ring];
    assert_eq!(p0.tail, p0.mark, "drain() leaves mark = tail");
    assert!(p0.head > p0.tail);
    let mut seen = Vec::new();
    let r = seg
        .read_ring(ring, p0.tail, |pos, rec| {
            if rec.tracepoint == id {
                seen.push(pos)
            }
        })
        .unwrap();
    assert_eq!(seen.len(), 10);
    assert_eq!(r.next, p0.head);
    assert!(r.error.is_none());
    // nothing consumed yet: reading again gives the same records at the same positions
    let mut again = Vec::new();
    seg.read_ring(ring, p0.tail, |pos, rec| {
        if rec.tracepoint == id {
            again.push(pos)
        }
    })
    .unwrap();
    assert_eq!(seen, again);
    assert_eq!(seg.stats().rings[ring].pending, p0.head - p0.tail);
    // keep record 3 onwards (tail), delivered up to record 7 (mark)
    seg.commit(ring, seen[3], seen[7]).unwrap();
    // bad commits are refused
    assert!(seg.commit(ring, seen[7], seen[3]).is_err(), "mark behind tail");
    assert!(seg.commit(ring, p0.tail, p0.head + 8).is_err(), "mark past head");
    assert!(seg.commit(ring, seen[2], seen[7]).is_err(), "tail moved backwards");
    assert!(seg.commit(ring + 100_000, 0, 0).is_err());
    drop(seg);
    // "restart": a new consumer finds both positions
    let mut seg = crate::own_segment();
    let p1 = seg.positions()[ring];
    assert_eq!((p1.tail, p1.mark), (seen[3], seen[7]));
    let mut replay = Vec::new();
    seg.read_ring(ring, p1.tail, |pos, rec| {
        if let FieldValue::U64(s) = rec.fields[0].value {
            replay.push((pos >= p1.mark, s))
        }
    })
    .unwrap();
    let want: Vec<(bool, u64)> = (3..10u64).map(|s| (s >= 7, s)).collect();
    assert_eq!(replay, want);
    // a read position outside [tail, head] is an error that skips to the head
    let r = seg.read_ring(ring, p1.tail.wrapping_sub(8), |_, _| {}).unwrap();
    assert!(r.error.unwrap().to_string().contains("outside"));
    assert_eq!(r.next, p1.head);
    // control-only handle: switches work, draining is refused, and it does not take the lock
    let path = weft_probe::segment::segment_path().unwrap();
    let mut ctl = Segment::open_shared(&path).unwrap();
    assert!(ctl.read_ring(ring, p1.tail, |_, _| {}).is_err());
    assert!(ctl.commit(ring, p1.tail, p1.mark).is_err());
    assert!(!ctl.drain(|_| {}).errors.is_empty());
    let (ids, seq) = ctl.switch(&"postest.hit".parse::<Selector>().unwrap(), Op::Disable).unwrap();
    assert_eq!(ids, vec![id]);
    assert!(ctl.wait_applied(seq, Duration::from_secs(10)));
    assert!(!POS.enabled());
    assert!(ctl.registry().unwrap().iter().any(|t| t.name == "postest.hit" && !t.enabled));
    crate::drain_all(&mut seg);
    let p2 = seg.positions()[ring];
    assert_eq!((p2.tail, p2.mark), (p2.head, p2.head));
}
