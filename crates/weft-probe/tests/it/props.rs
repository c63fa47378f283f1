use proptest::prelude::*;
use weft_probe::Context;
use weft_probe::consumer::decode_record;

proptest! {
    #[test]
    fn traceparent_round_trip(trace in 1u128.., span in 1u64.., sampled: bool) {
        let c = Context { trace_id: trace, span_id: span, sampled };
        let h = c.to_traceparent();
        prop_assert_eq!(h.len(), 55);
        prop_assert_eq!(Context::from_traceparent(&h).unwrap(), c);
    }

    #[test]
    fn b3_round_trip(trace in 1u128.., span in 1u64.., sampled: bool) {
        let c = Context { trace_id: trace, span_id: span, sampled };
        prop_assert_eq!(Context::from_b3(&c.to_b3()).unwrap(), c);
        let hs = c.to_b3_headers();
        let back = Context::from_b3_headers(|k| hs.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.as_str())).unwrap();
        prop_assert_eq!(back, c);
        prop_assert_eq!(Context::from_bytes(&c.to_bytes()).unwrap(), c);
    }

    #[test]
    fn garbage_carriers_never_panic(s in ".{0,80}") {
        let _ = Context::from_traceparent(&s);
        let _ = Context::from_b3(&s);
        let _ = Context::from_bytes(s.as_bytes());
    }

    #[test]
    fn decode_record_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let n = bytes.len();
        if n >= 2 {
            bytes[0] = (n & 0xff) as u8;
            bytes[1] = (n >> 8) as u8;
        }
        let _ = decode_record(&bytes);
    }

    #[test]
    fn registry_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = weft_probe::consumer::decode_registry(&bytes);
    }

    #[test]
    fn keyed_records_round_trip(
        key in "[a-z]{0,20}",
        s in ".{0,40}",
        i: i64,
        f in proptest::num::f64::NORMAL,
        b: bool,
        raw in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        use weft_probe::KeyedValue as K;
        use weft_probe::consumer::{FieldName, FieldValue};
        let _g = crate::lock();
        let mut seg = crate::own_segment();
        crate::drain_all(&mut seg);
        let tp = dynamic_tp();
        weft_probe::span::emit_keyed(tp, &[(&key, K::Str(&s)), ("i", K::I64(i)), ("f", K::F64(f)), ("b", K::Bool(b)), ("raw", K::Bytes(&raw))]);
        let id = tp.id();
        let mut got = Vec::new();
        let mut reencoded_ok = true;
        seg.drain(|r| if r.tracepoint == id {
            let mut enc = Vec::new();
            weft_probe::capture::encode_record(r, &mut enc);
            reencoded_ok &= decode_record(&enc).as_ref() == Ok(r);
            got.push(r.fields.iter().map(|f| (match f.name { FieldName::Key(k) => k.to_string(), _ => "?".into() }, match f.value {
                FieldValue::Str(x) => format!("s{x}"), FieldValue::I64(x) => format!("i{x}"), FieldValue::F64(x) => format!("f{x}"),
                FieldValue::Bool(x) => format!("b{x}"), FieldValue::Bytes(x) => format!("r{x:?}"), FieldValue::U64(x) => format!("u{x}"),
            })).collect::<Vec<_>>());
        });
        prop_assert!(reencoded_ok);
        prop_assert_eq!(got.len(), 1);
        prop_assert_eq!(&got[0], &vec![(key.clone(), format!("s{s}")), ("i".into(), format!("i{i}")), ("f".into(), format!("f{f}")),
            ("b".into(), format!("b{b}")), ("raw".into(), format!("r{raw:?}"))]);
    }
}

fn dynamic_tp() -> &'static weft_probe::Tracepoint {
    static TP: std::sync::OnceLock<&'static weft_probe::Tracepoint> = std::sync::OnceLock::new();
    TP.get_or_init(|| {
        weft_probe::registry::register_dynamic(
            "proptest.keyed",
            weft_probe::Level::Info,
            "",
            "",
            weft_probe::tracepoint::FLAG_DEFAULT_ON,
        )
    })
}
