//! Parsing of query parameters shared by the read APIs: RFC 3339 times, Go-style durations,
//! booleans, trace ids — every error names the parameter.

use std::collections::HashMap;

use weft_model::TraceId;

/// A bad parameter (→ 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError(pub String);

impl std::fmt::Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Query parameters (last value wins).
pub type Params = HashMap<String, String>;

/// The first non-empty value among `names` (canonical name first, then aliases), with the
/// name it was found under.
pub fn get<'a, 'n>(p: &'a Params, names: &[&'n str]) -> Option<(&'a str, &'n str)> {
    names.iter().find_map(|n| p.get(*n).filter(|v| !v.is_empty()).map(|v| (v.as_str(), *n)))
}

/// Parses an unsigned integer parameter.
pub fn u64_param(name: &str, v: &str) -> Result<u64, ParamError> {
    v.trim()
        .parse::<u64>()
        .map_err(|_| ParamError(format!("malformed parameter {name}: {v:?} is not a non-negative integer")))
}

/// Parses a boolean parameter (`true`/`false`/`1`/`0`).
pub fn bool_param(name: &str, v: &str) -> Result<bool, ParamError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" | "" => Ok(false),
        _ => Err(ParamError(format!("malformed parameter {name}: {v:?} is not true or false"))),
    }
}

/// Parses a trace id (16 or 32 hex digits).
pub fn trace_id_param(name: &str, v: &str) -> Result<TraceId, ParamError> {
    TraceId::from_hex(v.trim()).map_err(|e| ParamError(format!("malformed parameter {name}: {e}")))
}

/// Parses a Go duration (`1.5s`, `300ms`, `1h2m`, `250us`, `10ns`) into ns.
pub fn go_duration(name: &str, v: &str) -> Result<u64, ParamError> {
    let err =
        || ParamError(format!("malformed parameter {name}: {v:?} is not a duration like 100ms or 1.5s"));
    let s = v.trim();
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() || s.starts_with('-') {
        return Err(err());
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
        if num_end == 0 {
            return Err(err());
        }
        let n: f64 = rest[..num_end].parse().map_err(|_| err())?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let mult = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(err()),
        };
        total += n * mult;
        rest = &rest[unit_end..];
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(err());
    }
    Ok(total as u64)
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses an RFC 3339 timestamp (`2024-05-01T12:00:00.123456789Z`, offsets allowed; a space
/// before the offset is read as `+`) into ns since the epoch.
pub fn rfc3339(name: &str, v: &str) -> Result<u64, ParamError> {
    let err =
        |why: &str| ParamError(format!("malformed parameter {name}: {v:?} is not an RFC 3339 time ({why})"));
    let s = v.trim().as_bytes();
    let num = |a: usize, b: usize| -> Result<i64, ParamError> {
        let t = s.get(a..b).ok_or_else(|| err("too short"))?;
        if !t.iter().all(u8::is_ascii_digit) {
            return Err(err("digit expected"));
        }
        std::str::from_utf8(t).ok().and_then(|t| t.parse().ok()).ok_or_else(|| err("digit expected"))
    };
    if s.len() < 20
        || s[4] != b'-'
        || s[7] != b'-'
        || !(s[10] == b'T' || s[10] == b't' || s[10] == b' ')
        || s[13] != b':'
        || s[16] != b':'
    {
        return Err(err("expected YYYY-MM-DDTHH:MM:SS"));
    }
    let (y, mo, d, h, mi, se) =
        (num(0, 4)?, num(5, 7)?, num(8, 10)?, num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return Err(err("field out of range"));
    }
    let mut i = 19;
    let mut frac_ns: i64 = 0;
    if s.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(err("empty fraction"));
        }
        let digits = &s[start..i.min(start + 9)];
        let mut f: i64 = 0;
        for c in digits {
            f = f * 10 + (c - b'0') as i64;
        }
        for _ in digits.len()..9 {
            f *= 10;
        }
        frac_ns = f;
    }
    let offset_s: i64 = match s.get(i) {
        Some(b'Z') | Some(b'z') if i + 1 == s.len() => 0,
        // A space stands for `+`: a client that puts the time in a query string unencoded (as
        // Grafana's Jaeger data source does) has its `+` decoded to a space.
        Some(&c) if matches!(c, b'+' | b'-' | b' ') && s.len() == i + 6 && s[i + 3] == b':' => {
            let oh = num(i + 1, i + 3)?;
            let om = num(i + 4, i + 6)?;
            let o = oh * 3600 + om * 60;
            if c == b'-' { -o } else { o }
        }
        _ => return Err(err("expected Z or ±HH:MM")),
    };
    let days = days_from_civil(y, mo as u32, d as u32);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_s;
    if secs < 0 {
        return Err(err("before 1970"));
    }
    Ok((secs as u64).saturating_mul(1_000_000_000).saturating_add(frac_ns as u64))
}
