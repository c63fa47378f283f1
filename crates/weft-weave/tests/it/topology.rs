//! Topology errors name the file, the key and the problem.

use std::path::Path;

use weft_weave::Topology;

fn err(toml: &str) -> String {
    match Topology::parse(toml, Path::new("exp.toml"), Path::new("/tmp")) {
        Ok(_) => panic!("accepted:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn errors_name_file_key_and_problem() {
    let src = "[[source]]\nname = \"a\"\nkind = \"gem5\"\npath = \"a.log\"\n";
    assert_eq!(
        err("[[source]]\nname = \"a\"\nkind = \"gem7\"\npath = \"x\"\n"),
        "exp.toml: source[0].kind: unknown kind `gem7` (gem5, nicbm, ns3, ns3-stock, qemu)"
    );
    let e = err("[[source]]\nname = \"a\"\nkind = \"gem5\"\npath = \"x\"\ncolour = 1\n");
    assert!(e.starts_with("exp.toml: toml: ") && e.contains("colour") && e.contains("line 5"), "{e}");
    assert_eq!(
        err(&format!("{src}[[link]]\nkind = \"pcie\"\nhost = \"a\"\nnic = \"b\"\n")),
        "exp.toml: link[0].nic: no source named `b`"
    );
    assert_eq!(
        err(&format!("{src}symbols = [{{ path = \"s\", offset = \"0xzz\" }}]\n")),
        "exp.toml: source[0].symbols[0].offset: not a number: Str(\"0xzz\")"
    );
    assert_eq!(
        err("[[source]]\nname = \"a\"\nkind = \"gem5\"\npath = \"${WEFT_TEST_UNSET_VAR}/a\"\n"),
        "exp.toml: source[0].path: `${WEFT_TEST_UNSET_VAR}` is not set (and has no `:-default`)"
    );
    assert_eq!(
        err(&format!("{src}[filter]\ndrop_types = [\"HostInstrr\"]\n")).split(" (one of").next().unwrap(),
        "exp.toml: filter.drop_types[0]: unknown event type `HostInstrr`"
    );
    assert_eq!(
        err(&format!("{src}[[sink]]\nkind = \"file\"\npath = \"out.txt\"\n")),
        "exp.toml: sink[0].format: missing, and the file name does not say it (e.g. x.otlp.json)"
    );
    assert_eq!(err(""), "exp.toml: source: no [[source]] given: a topology needs at least one log");
    let ok = Topology::parse(
        &format!("{src}symbols = [{{ path = \"${{HOME_X:-/s}}/v.syms\", offset = \"0xffffffffa0000000\" }}]\n[run]\nseed = 7\n"),
        Path::new("exp.toml"),
        Path::new("/base"),
    )
    .unwrap();
    assert_eq!(ok.sources[0].path, Path::new("/base/a.log"));
    assert_eq!(ok.sources[0].symbols[0].path, Path::new("/s/v.syms"));
    assert_eq!(ok.sources[0].symbols[0].options.offset, 0xffff_ffff_a000_0000);
    assert_eq!(ok.run.seed, 7);
}
