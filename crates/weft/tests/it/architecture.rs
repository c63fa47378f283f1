//! docs/architecture.md's crate table says which weft crates each crate depends on; this test
//! holds it against the Cargo manifests, so the map stays true when a dependency is added.

use std::collections::BTreeMap;
use std::path::Path;

/// `crate name → its normal weft-* dependencies`, from every `crates/*/Cargo.toml`.
fn manifests(root: &Path) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
        let mut name = None;
        let mut deps = Vec::new();
        let mut section = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.to_string();
            } else if section == "[package]" && line.starts_with("name") {
                name = line.split('"').nth(1).map(str::to_string);
            } else if section == "[dependencies]" && line.starts_with("weft") {
                let dep: String =
                    line.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
                deps.push(dep);
            }
        }
        deps.sort();
        out.insert(name.unwrap_or_else(|| panic!("{}: no package name", manifest.display())), deps);
    }
    out
}

/// The same map, from the table's rows `| \`crate\` | job | dep, dep |` (`—` for none).
fn documented(doc: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `weft")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 3, "docs/architecture.md: a crate row has three cells: {line}");
        let name = cells[0].trim_matches('`').to_string();
        let mut deps: Vec<String> = match cells[2] {
            "—" => Vec::new(),
            list => list.split(", ").map(str::to_string).collect(),
        };
        deps.sort();
        assert!(out.insert(name.clone(), deps).is_none(), "docs/architecture.md: {name} twice");
    }
    out
}

#[test]
fn architecture_doc_matches_the_manifests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let built = manifests(&root);
    let said = documented(&doc);
    assert!(built.len() >= 10, "found only {} crates", built.len());
    for (name, deps) in &built {
        match said.get(name) {
            None => panic!("docs/architecture.md has no row for {name}"),
            Some(d) => assert_eq!(d, deps, "docs/architecture.md: the weft dependencies of {name}"),
        }
    }
    for name in said.keys() {
        assert!(built.contains_key(name), "docs/architecture.md names {name}, which is no crate");
    }
    // The rules the page states, over what each crate links transitively.
    let links = |name: &str| {
        let mut seen = vec![name.to_string()];
        let mut i = 0;
        while i < seen.len() {
            for d in built.get(&seen[i]).into_iter().flatten() {
                if !seen.contains(d) {
                    seen.push(d.clone());
                }
            }
            i += 1;
        }
        seen
    };
    for lean in ["weft-model", "weft-probe", "weft-sources", "weft-weave", "weft-agent", "weft-control"] {
        let l = links(lean);
        assert!(!l.iter().any(|d| d == "weft-store" || d == "weft-server"), "{lean} links the store: {l:?}");
    }
    assert!(links("weft-probe").len() == 1, "weft-probe has no weft dependencies");
    let server = links("weft-server");
    assert!(!server.iter().any(|d| d == "weft-agent" || d == "weft-weave"), "weft-server links {server:?}");
}
