//! Selecting tracepoints: by exact name, glob, level or group.

use crate::tracepoint::Level;
use std::fmt;

/// Which tracepoints a switch applies to.
///
/// Text form ([`Selector::parse`]): `name:EXACT`, `glob:PATTERN`, `group:GROUP` (the group may be
/// a glob), `level:LEVEL` (every tracepoint at that level or more severe), `all`; a bare word is a
/// glob when it contains `*`, `?` or `[`, else an exact name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Name(String),
    Glob(String),
    Group(String),
    Level(Level),
    All,
}

/// A selector string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad tracepoint selector {input:?}: {reason}")]
pub struct SelectorError {
    pub input: String,
    pub reason: &'static str,
}

impl Selector {
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        let s = s.trim();
        let err = |reason| SelectorError { input: s.to_string(), reason };
        if s.is_empty() {
            return Err(err("empty"));
        }
        if s == "all" || s == "*" {
            return Ok(Selector::All);
        }
        if let Some((k, v)) = s.split_once(':') {
            if v.is_empty() {
                return Err(err("nothing after ':'"));
            }
            return match k {
                "name" => Ok(Selector::Name(v.to_string())),
                "glob" => Ok(Selector::Glob(v.to_string())),
                "group" => Ok(Selector::Group(v.to_string())),
                "level" => Level::parse(v).map(Selector::Level).ok_or(err("unknown level")),
                _ => Err(err("unknown kind (name:, glob:, group:, level:)")),
            };
        }
        if s.contains(['*', '?', '[']) {
            Ok(Selector::Glob(s.to_string()))
        } else {
            Ok(Selector::Name(s.to_string()))
        }
    }

    /// Does a tracepoint with this name, group and level match?
    pub fn matches(&self, name: &str, group: &str, level: Level) -> bool {
        match self {
            Selector::Name(n) => n == name,
            Selector::Glob(g) => glob_match(g, name),
            Selector::Group(g) => !group.is_empty() && glob_match(g, group),
            Selector::Level(l) => level <= *l,
            Selector::All => true,
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Name(n) => write!(f, "name:{n}"),
            Selector::Glob(g) => write!(f, "glob:{g}"),
            Selector::Group(g) => write!(f, "group:{g}"),
            Selector::Level(l) => write!(f, "level:{l}"),
            Selector::All => f.write_str("all"),
        }
    }
}

/// Shell-style glob: `*` any run, `?` one character, `[abc]`/`[a-z]`/`[!x]` a class; everything
/// else literal. Iterative with backtracking to the last `*` (linear-ish, no recursion).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ti));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                '[' => {
                    if let Some((ok, next)) = class_match(&p, pi, t[ti])
                        && ok
                    {
                        pi = next;
                        ti += 1;
                        continue;
                    } else if class_match(&p, pi, t[ti]).is_none() && t[ti] == '[' {
                        // unterminated class: literal '['
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
                c if c == t[ti] => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Match `c` against the class starting at `p[start] == '['`; `None` when unterminated, else
/// (matched, index after `]`).
fn class_match(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = i < p.len() && (p[i] == '!' || p[i] == '^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("blocker.*", "blocker.write"));
        assert!(!glob_match("blocker.*", "mapper.write"));
        assert!(glob_match("*.write", "blocker.write"));
        assert!(glob_match("b?ocker.w*e", "blocker.write"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("?", ""));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("v[0-9]", "v7"));
        assert!(!glob_match("v[!0-9]", "v7"));
        assert!(glob_match("x[", "x["));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    #[test]
    fn parse() {
        assert_eq!(Selector::parse("a.b").unwrap(), Selector::Name("a.b".into()));
        assert_eq!(Selector::parse("a.*").unwrap(), Selector::Glob("a.*".into()));
        assert_eq!(Selector::parse("group:io").unwrap(), Selector::Group("io".into()));
        assert_eq!(Selector::parse("level:debug").unwrap(), Selector::Level(Level::Debug));
        assert_eq!(Selector::parse("all").unwrap(), Selector::All);
        assert!(Selector::parse("level:loud").is_err());
        assert!(Selector::parse("color:red").is_err());
        assert!(Selector::parse("").is_err());
        assert!(Selector::Level(Level::Info).matches("x", "", Level::Warn));
        assert!(!Selector::Level(Level::Info).matches("x", "", Level::Debug));
        assert!(!Selector::Group("*".into()).matches("x", "", Level::Info));
    }
}
