use weft_probe::{Level, Selector, tracepoint};

tracepoint!(static REG_A = "regtest.alpha", Info, group = "regtest", fields = [a: u64, b: str]);
tracepoint!(static REG_B = "regtest.beta", Debug, group = "regtest");
tracepoint!(static REG_C = "regtest.gamma.deep", Trace, group = "other");
tracepoint!(static REG_ON = "regtest.always", Warn, group = "regtest", flags = [always_on]);
tracepoint!(static REG_DEF = "regtest.default", Info, flags = [default_on]);

// Never called: still listed (it is in the same object file).
#[allow(dead_code)]
fn never_called() {
    weft_probe::probe!("regtest.never.called", Error, x = 1u64);
}

fn find(name: &str) -> weft_probe::TracepointInfo {
    weft_probe::list().into_iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{name} not listed"))
}

#[test]
fn registry_lists_every_tracepoint_enabled_or_not() {
    let _g = crate::lock();
    let a = find("regtest.alpha");
    assert_eq!(a.level, Level::Info);
    assert_eq!(a.group, "regtest");
    assert_eq!(a.field_names(), vec!["a", "b"]);
    assert!(a.fields.contains("a:u64"));
    assert!(a.file.ends_with("registry.rs"), "{}", a.file);
    assert!(a.line > 0);
    assert!(!a.enabled);
    let n = find("regtest.never.called");
    assert_eq!(n.level, Level::Error);
    assert_eq!(n.field_names(), vec!["x"]);
    assert!(find("regtest.always").always_on());
    assert!(find("regtest.always").enabled);
    // on at start (other tests may switch it since)
    assert_ne!(find("regtest.default").flags & weft_probe::tracepoint::FLAG_DEFAULT_ON, 0);
    assert!(!find("regtest.default").always_on());
    // ids are dense and unique
    let all = weft_probe::list();
    for (i, t) in all.iter().enumerate() {
        assert_eq!(t.id as usize, i);
    }
    assert!(!all.iter().any(|t| t.name == "weft.probe.sentinel"));
    let _ = (&REG_A, &REG_B, &REG_C, &REG_ON, &REG_DEF);
}

#[test]
fn switch_by_name_glob_level_group() {
    let _g = crate::lock();
    let sel = |s: &str| s.parse::<Selector>().unwrap();
    weft_probe::force_disable(&sel("regtest.*"));
    weft_probe::force_disable(&sel("group:other"));
    assert!(!REG_A.enabled() && !REG_B.enabled() && !REG_C.enabled());

    let r = weft_probe::enable(&sel("regtest.alpha"));
    assert_eq!((r.matched, r.changed), (1, 1));
    assert!(REG_A.enabled() && !REG_B.enabled());

    let r = weft_probe::enable(&sel("regtest.gam*"));
    assert_eq!(r.changed, 1);
    assert!(REG_C.enabled());

    weft_probe::disable(&sel("all"));
    assert!(!REG_A.enabled() && !REG_C.enabled());

    // level:debug = error..debug
    weft_probe::enable(&sel("level:debug"));
    assert!(REG_A.enabled() && REG_B.enabled() && !REG_C.enabled());
    weft_probe::disable(&sel("level:trace"));

    let r = weft_probe::enable(&sel("group:regtest"));
    assert_eq!(r.matched, 3);
    assert!(REG_A.enabled() && REG_B.enabled() && !REG_C.enabled());
    weft_probe::disable(&sel("group:regtest"));
    assert!(!REG_A.enabled());
    assert!(REG_ON.enabled(), "always-on stays on");
}

#[test]
fn always_on_survives_plain_disables() {
    let _g = crate::lock();
    let sel = |s: &str| s.parse::<Selector>().unwrap();
    weft_probe::enable(&sel("regtest.always"));
    for s in ["regtest.always", "regtest.*", "group:regtest", "level:warn", "all"] {
        let r = weft_probe::disable(&sel(s));
        assert!(REG_ON.enabled(), "disable {s} turned an always-on tracepoint off");
        assert!(r.protected >= 1, "{s}: {r:?}");
    }
    let r = weft_probe::force_disable(&sel("regtest.always"));
    assert_eq!(r.changed, 1);
    assert!(!REG_ON.enabled());
    weft_probe::enable(&sel("regtest.always"));
    assert!(REG_ON.enabled());
}

#[test]
fn dynamic_registration_gets_the_next_id() {
    let _g = crate::lock();
    let before = weft_probe::list().len();
    let tp = weft_probe::registry::register_dynamic("regtest.dynamic", Level::Info, "dyn", "k", 0);
    let after = weft_probe::list();
    assert_eq!(after.len(), before + 1);
    let t = after.last().unwrap();
    assert_eq!(t.name, "regtest.dynamic");
    assert_eq!(t.id, tp.id());
    assert_ne!(t.flags & weft_probe::tracepoint::FLAG_DYNAMIC, 0);
}
