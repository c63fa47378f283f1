use std::path::Path;

use super::*;
use crate::ctf::compile::{Node, compile};

fn err(text: &str) -> MetaErr {
    parse(text).expect_err("must not parse")
}

fn compile_err(text: &str) -> String {
    let md = parse(text).unwrap_or_else(|e| panic!("parse: {e:?}"));
    compile(md, Path::new("m")).expect_err("must not compile").to_string()
}

const BASE: &str = r#"
typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
typealias integer { size = 64; align = 8; signed = false; } := unsigned long;
trace { major = 1; minor = 8; byte_order = be; };
"#;

/// An LTTng-UST stream cut to what its event header needs: `event.header` is the `compact` or
/// the `large` layout, events 0 and 70000.
fn lttng_metadata(header: &str) -> String {
    format!(
        r#"
typealias integer {{ size = 5; align = 1; signed = false; }} := uint5_t;
typealias integer {{ size = 16; align = 8; signed = false; }} := uint16_t;
typealias integer {{ size = 32; align = 8; signed = false; }} := uint32_t;
trace {{ major = 1; minor = 8; byte_order = le; }};
clock {{ name = "monotonic"; freq = 1000000000; }};
typealias integer {{ size = 27; align = 1; signed = false; map = clock.monotonic.value; }} := ts27_t;
typealias integer {{ size = 32; align = 8; signed = false; map = clock.monotonic.value; }} := ts32_t;
typealias integer {{ size = 64; align = 8; signed = false; map = clock.monotonic.value; }} := ts64_t;
struct event_header_compact {{
    enum : uint5_t {{ compact = 0 ... 30, extended = 31 }} id;
    variant <id> {{ struct {{ ts27_t timestamp; }} compact; struct {{ uint32_t id; ts64_t timestamp; }} extended; }} v;
}} align(8);
struct event_header_large {{
    enum : uint16_t {{ compact = 0 ... 65534, extended = 65535 }} id;
    variant <id> {{ struct {{ ts32_t timestamp; }} compact; struct {{ uint32_t id; ts64_t timestamp; }} extended; }} v;
}} align(8);
stream {{ id = 0; event.header := struct event_header_{header}; }};
event {{ name = "small"; id = 0; stream_id = 0; fields := struct {{ uint32_t _v; }}; }};
event {{ name = "far"; id = 70000; stream_id = 0; fields := struct {{ uint32_t _v; }}; }};
"#
    )
}

/// LTTng's header layouts take the decoder's fast path (both kinds); others do not. (The whole
/// LTTng-style metadata weft-synth writes is parsed in tests/it/ctf/synth.rs.)
#[test]
fn lttng_headers_are_recognised() {
    let c = compile(parse(&lttng_metadata("compact")).unwrap(), Path::new("m")).unwrap();
    assert_eq!(c.streams[0].event(70000), Some(1));
    assert_eq!(c.streams[0].clock, Some(0));
    let h = c.streams[0].lttng_header.as_ref().expect("compact header recognised");
    assert_eq!((h.id.size, h.ts.size, h.ext), (5, 27, 31));
    let c = compile(parse(&lttng_metadata("large")).unwrap(), Path::new("m")).unwrap();
    let h = c.streams[0].lttng_header.as_ref().expect("large header recognised");
    assert_eq!((h.id.size, h.ts.size, h.ext), (16, 32, 65535));
    let other = lttng_metadata("large").replace(
        "enum : uint16_t { compact = 0 ... 65534, extended = 65535 }",
        "enum : uint16_t { compact = 0 ... 65533, extended = 65534 ... 65535 }",
    );
    let c = compile(parse(&other).unwrap(), Path::new("m")).unwrap();
    assert!(c.streams[0].lttng_header.is_none());
}

#[test]
fn every_type_form() {
    let md = parse(&format!(
        r#"{BASE}
        typedef uint8_t uuid_t[16];
        enum color : uint8_t {{ RED, GREEN, "BLUE" = 10 ... 12, NEXT, NEG = -1 }};
        struct pair {{ uint32_t a; uint8_t b; }} align(64);
        variant opt {{ uint8_t x; string y; }};
        event {{
            name = e; id = 0;
            fields := struct {{
                uuid_t u;
                enum color c;
                struct pair p;
                uint32_t n;
                variant opt <c> v;
                integer {{ size = 3; align = 1; signed = true; byte_order = network; base = x; }} bits;
                integer {{ size = 16; base = hex; encoding = ASCII; map = clock.c.value; }} h;
                floating_point {{ exp_dig = 11; mant_dig = 53; byte_order = le; align = 32; }} d;
                string {{ encoding = ASCII; }} s;
                uint8_t grid[2][3];
                uint8_t seq[n];
                uint8_t seq2[event.fields.n];
                unsigned long ul;
                struct {{ typealias integer {{ size = 2; }} := tiny; tiny t; }} inner;
            }};
        }};
        clock {{ name = c; freq = 1000; offset_s = -5; absolute = TRUE; }};
        "#
    ))
    .unwrap();
    let Some(TypeDecl::Struct(f)) = &md.events[0].fields else { panic!() };
    let ty = |n: &str| &f.fields.iter().find(|x| x.name == n).unwrap().ty;
    assert!(matches!(ty("u"), TypeDecl::Array { len: 16, .. }));
    let TypeDecl::Enum(e) = ty("c") else { panic!() };
    let ranges: Vec<_> = e.entries.iter().map(|x| (x.label.to_string(), x.lo, x.hi)).collect();
    assert_eq!(
        ranges,
        [
            ("RED".into(), 0, 0),
            ("GREEN".into(), 1, 1),
            ("BLUE".into(), 10, 12),
            ("NEXT".into(), 13, 13),
            ("NEG".into(), -1, -1)
        ]
    );
    let TypeDecl::Struct(p) = ty("p") else { panic!() };
    assert_eq!(p.min_align, 64);
    let TypeDecl::Int(b) = ty("bits") else { panic!() };
    assert_eq!((b.size, b.align, b.signed, b.byte_order, b.base), (3, 1, true, ByteOrder::Be, 16));
    let TypeDecl::Int(h) = ty("h") else { panic!() };
    assert_eq!((h.align, h.encoding, h.map.as_deref()), (8, Encoding::Ascii, Some("c")));
    assert!(matches!(ty("d"), TypeDecl::Float(x) if x.align == 32 && x.byte_order == ByteOrder::Le));
    assert!(matches!(ty("s"), TypeDecl::String(Encoding::Ascii)));
    let TypeDecl::Array { elem, len: 2 } = ty("grid") else { panic!() };
    assert!(matches!(&**elem, TypeDecl::Array { len: 3, .. }));
    assert!(matches!(ty("seq"), TypeDecl::Sequence { len, .. } if len == &["n".to_string()]));
    assert!(matches!(ty("ul"), TypeDecl::Int(x) if x.size == 64));
    assert_eq!(md.clocks[0].offset_s, -5);
    assert!(md.clocks[0].absolute);
    // It compiles: the variant is tagged by the enum, the sequences resolve to `n`.
    let c = compile(md, Path::new("m")).unwrap();
    let root = c.events[0].payload;
    let Node::Struct { fields, align } = &c.prog.nodes[root as usize] else { panic!() };
    assert_eq!(*align, 64, "a struct aligns to its most aligned member");
    assert_eq!(fields.len(), 14);
}

#[test]
fn declarations_are_scoped() {
    let e = err(&format!(
        "{BASE} struct a {{ typealias integer {{ size = 4; }} := nib; nib x; }}; struct b {{ nib y; }};"
    ));
    assert!(e.msg.contains("unknown type 'nib'"), "{e:?}");
}

#[test]
fn unknown_blocks_and_attributes_are_skipped() {
    let md = parse(&format!(
        "{BASE} callsite {{ name = \"x\"; func = \"f\"; ip = 0x1; file = \"a.c\"; line = 3; }};\n\
         event {{ name = \"e\"; model.emf.uri = \"u\"; newthing = 3; }};"
    ))
    .unwrap();
    assert_eq!(md.events[0].model_emf_uri.as_deref(), Some("u"));
}

#[test]
fn errors_name_line_and_column() {
    let e = err("trace {\n  major = 1;\n  byte_order = sideways;\n};");
    assert_eq!((e.line, e.col), (3, 3));
    assert!(e.msg.contains("sideways"));
    let e = err(&format!("{BASE}\nevent {{ name = x; fields := struct {{ nosuch_t f; }}; }};"));
    assert!(e.msg.contains("unknown type 'nosuch_t'"), "{e:?}");
    assert_eq!(e.line, 7);
    assert!(err("typealias integer { size = 0; } := z;").msg.contains("size 0"));
    assert!(err("typealias integer { size = 65; } := z;").msg.contains("size 65"));
    assert!(err("typealias integer { align = 8; } := z;").msg.contains("without a size"));
    assert!(err("typealias integer { size = 8; align = 3; } := z;").msg.contains("power of two"));
    assert!(
        err("typealias floating_point { exp_dig = 5; mant_dig = 11; } := half;")
            .msg
            .contains("not supported")
    );
    assert!(err(&format!("{BASE} struct s {{ uint8_t a; uint8_t a; }};")).msg.contains("duplicate member"));
    assert!(
        err(&format!("{BASE} typealias string := str_t; enum e : str_t {{ A }};")).msg.contains("container")
    );
    assert!(err(&format!("{BASE} enum e {{ A }};")).msg.contains("'int'"));
    assert!(err(&format!("{BASE} enum e : uint8_t {{ A = 5 ... 2 }};")).msg.contains("empty"));
    assert!(err("event { id = 1; };").msg.contains("without a name"));
    assert!(err("clock { freq = 0; name = c; };").msg.contains("freq is 0"));
    assert!(err("trace { uuid = \"xyz\"; };").msg.contains("bad uuid"));
    assert!(err("trace { major = 1; ").msg.contains("unterminated"));
    assert!(err("trace { } ; trace { };").msg.contains("second trace"));
    assert!(err("42;").msg.contains("unexpected integer"));
    // Deep nesting is refused, not a stack overflow.
    let deep = format!("{BASE} struct s {{ {} uint8_t x; {} }};", "struct {".repeat(100), "} y;".repeat(100));
    assert!(err(&deep).msg.contains("nested deeper"));
}

#[test]
fn compile_errors_name_the_declaration() {
    let e = compile_err(&format!("{BASE} event {{ name = e; fields := struct {{ uint8_t s[nolen]; }}; }};"));
    assert!(e.contains("'nolen' names no field"), "{e}");
    assert!(e.starts_with("m:6:"), "{e}");
    let e = compile_err(&format!(
        "{BASE} event {{ name = e; fields := struct {{ uint8_t t; variant <t> {{ uint8_t a; }} v; }}; }};"
    ));
    assert!(e.contains("not an enumeration"), "{e}");
    let e = compile_err(&format!("{BASE} event {{ name = a; id = 1; }}; event {{ name = b; id = 1; }};"));
    assert!(e.contains("event id 1 used twice"), "{e}");
    let e = compile_err(&format!(
        "{BASE} event {{ name = e; fields := struct {{ integer {{ size = 8; map = clock.nope.value; }} x; }}; }};"
    ));
    assert!(e.contains("unknown clock 'nope'"), "{e}");
    let e = compile_err(&format!("{BASE} event {{ name = e; stream_id = 9; }};"));
    assert!(e.contains("stream class"), "{e}");
    let e = compile_err(&format!(
        "{BASE} stream {{ packet.context := struct {{ uint8_t s[event.fields.n]; }}; }}; \
         event {{ name = e; fields := struct {{ uint8_t n; }}; }};"
    ));
    assert!(e.contains("decoded later"), "{e}");
    // Exponential expansion through aliases is bounded.
    let mut t = format!("{BASE} typealias struct {{ uint8_t a; uint8_t b; }} := t0;\n");
    for i in 1..40 {
        t.push_str(&format!("typealias struct {{ t{p} a; t{p} b; }} := t{i};\n", p = i - 1));
    }
    t.push_str("event { name = e; fields := struct { t39 x; }; };");
    let e = compile_err(&t);
    assert!(e.contains("type nodes"), "{e}");
}

#[test]
fn comments_and_crlf() {
    let md = parse("/* CTF 1.8 */\r\n// line comment\r\ntrace {\r\n major = 1; /* c */ minor = 8;\r\n};\r\n")
        .unwrap();
    assert_eq!(md.minor, Some(8));
}
