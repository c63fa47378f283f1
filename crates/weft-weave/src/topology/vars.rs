//! Variables in paths: `${NAME}` and `${NAME:-default}`.

use std::collections::BTreeMap;

/// Expands `${NAME}` and `${NAME:-default}` from `vars`, else the environment.
pub(super) fn expand(s: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find('}').ok_or_else(|| format!("unclosed `${{` in `{s}`"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let v = vars.get(name).cloned().or_else(|| std::env::var(name).ok()).or(default.map(str::to_owned));
        out.push_str(&v.ok_or_else(|| format!("`${{{name}}}` is not set (and has no `:-default`)"))?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
