//! The TSDL lexer: identifiers, integer literals (decimal, `0x` hex, `0` octal, `0b` binary,
//! with C suffixes), string and character literals with C escapes, punctuation, and both
//! comment styles. Every token carries its 1-based line and column.

use super::error::MetaErr;

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    /// An unsigned literal (a leading `-` is a separate token).
    Int(u64),
    Str(String),
    /// `{ } [ ] ( ) < > ; , = : . + - *`
    Punct(char),
    /// `:=`
    Assign,
    /// `...`
    Ellipsis,
    /// `->`
    Arrow,
    Eof,
}

impl Tok {
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Int(v) => format!("integer {v}"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Punct(c) => format!("'{c}'"),
            Tok::Assign => "':='".into(),
            Tok::Ellipsis => "'...'".into(),
            Tok::Arrow => "'->'".into(),
            Tok::Eof => "end of metadata".into(),
        }
    }
}

/// A token with its position.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub line: u32,
    pub col: u32,
}

/// Splits TSDL text into tokens (the whole text at once: metadata is small).
pub(crate) fn tokenize(text: &str) -> Result<Vec<Token>, MetaErr> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len() / 4);
    let mut i = 0usize;
    let mut line = 1u32;
    let mut line_start = 0usize;
    // Columns count bytes from 1 (TSDL is ASCII in practice).
    macro_rules! col {
        ($at:expr) => {
            ($at - line_start + 1) as u32
        };
    }
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                i += 1;
                line += 1;
                line_start = i;
            }
            b' ' | b'\t' | b'\r' | 0x0b | 0x0c => i += 1,
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (l0, c0) = (line, col!(i));
                i += 2;
                loop {
                    match b.get(i) {
                        None => return Err(MetaErr::new(l0, c0, "unterminated comment")),
                        Some(b'*') if b.get(i + 1) == Some(&b'/') => {
                            i += 2;
                            break;
                        }
                        Some(b'\n') => {
                            i += 1;
                            line += 1;
                            line_start = i;
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' | b'\'' => {
                let (l0, c0) = (line, col!(i));
                let quote = c;
                i += 1;
                let mut s: Vec<u8> = Vec::new();
                loop {
                    let Some(&ch) = b.get(i) else {
                        return Err(MetaErr::new(l0, c0, "unterminated string literal"));
                    };
                    i += 1;
                    if ch == quote {
                        break;
                    }
                    if ch == b'\n' {
                        return Err(MetaErr::new(l0, c0, "newline in string literal"));
                    }
                    if ch != b'\\' {
                        s.push(ch);
                        continue;
                    }
                    let Some(&e) = b.get(i) else {
                        return Err(MetaErr::new(l0, c0, "unterminated string literal"));
                    };
                    i += 1;
                    match e {
                        b'n' => s.push(b'\n'),
                        b't' => s.push(b'\t'),
                        b'r' => s.push(b'\r'),
                        b'0'..=b'7' => {
                            let mut v = (e - b'0') as u32;
                            for _ in 0..2 {
                                match b.get(i) {
                                    Some(d @ b'0'..=b'7') => {
                                        v = v * 8 + (d - b'0') as u32;
                                        i += 1;
                                    }
                                    _ => break,
                                }
                            }
                            s.push(v as u8);
                        }
                        b'x' => {
                            let mut v = 0u32;
                            let mut n = 0;
                            while let Some(d) = b.get(i).and_then(|d| (*d as char).to_digit(16)) {
                                v = (v * 16 + d) & 0xff;
                                i += 1;
                                n += 1;
                            }
                            if n == 0 {
                                return Err(MetaErr::new(line, col!(i), "\\x without hex digits"));
                            }
                            s.push(v as u8);
                        }
                        b'a' => s.push(7),
                        b'b' => s.push(8),
                        b'f' => s.push(12),
                        b'v' => s.push(11),
                        b'e' => s.push(27),
                        other => s.push(other),
                    }
                }
                let s =
                    String::from_utf8(s).map_err(|_| MetaErr::new(l0, c0, "string literal is not UTF-8"))?;
                if quote == b'\'' {
                    // A character literal is an integer constant.
                    let mut chars = s.chars();
                    match (chars.next(), chars.next()) {
                        (Some(ch), None) => out.push(Token { tok: Tok::Int(ch as u64), line: l0, col: c0 }),
                        _ => return Err(MetaErr::new(l0, c0, "character literal must hold one character")),
                    }
                } else {
                    out.push(Token { tok: Tok::Str(s), line: l0, col: c0 });
                }
            }
            b'0'..=b'9' => {
                let (l0, c0) = (line, col!(i));
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let lit = &text[start..i];
                let v = parse_int(lit)
                    .ok_or_else(|| MetaErr::new(l0, c0, format!("bad integer literal '{lit}'")))?;
                out.push(Token { tok: Tok::Int(v), line: l0, col: c0 });
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let (l0, c0) = (line, col!(i));
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                out.push(Token { tok: Tok::Ident(text[start..i].to_owned()), line: l0, col: c0 });
            }
            b':' if b.get(i + 1) == Some(&b'=') => {
                out.push(Token { tok: Tok::Assign, line, col: col!(i) });
                i += 2;
            }
            b'.' if b.get(i + 1) == Some(&b'.') && b.get(i + 2) == Some(&b'.') => {
                out.push(Token { tok: Tok::Ellipsis, line, col: col!(i) });
                i += 3;
            }
            b'-' if b.get(i + 1) == Some(&b'>') => {
                out.push(Token { tok: Tok::Arrow, line, col: col!(i) });
                i += 2;
            }
            b'{' | b'}' | b'[' | b']' | b'(' | b')' | b'<' | b'>' | b';' | b',' | b'=' | b':' | b'.'
            | b'+' | b'-' | b'*' => {
                out.push(Token { tok: Tok::Punct(c as char), line, col: col!(i) });
                i += 1;
            }
            0 => i += 1, // NUL padding at the end of a metadata packet's text
            _ => {
                let ch = text[i..].chars().next().unwrap_or('?');
                return Err(MetaErr::new(line, col!(i), format!("unexpected character {ch:?}")));
            }
        }
    }
    out.push(Token { tok: Tok::Eof, line, col: col!(b.len()) });
    Ok(out)
}

/// A C integer literal: decimal, `0x`/`0X` hex, `0b` binary, `0` octal, with optional `u`/`l`
/// suffixes.
fn parse_int(lit: &str) -> Option<u64> {
    let body = lit.trim_end_matches(['u', 'U', 'l', 'L']);
    if body.is_empty() {
        return None;
    }
    if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if let Some(bin) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
        u64::from_str_radix(bin, 2).ok()
    } else if body.len() > 1 && body.starts_with('0') {
        u64::from_str_radix(&body[1..], 8).ok()
    } else {
        body.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn tokens_and_positions() {
        let t = tokenize(
            "/* c */ typealias integer { size = 0x1F; } := uint8_t; // x\n  \"a\\n\" 'A' ... -> 017 -3",
        )
        .unwrap();
        let kinds: Vec<_> = t.iter().map(|t| t.tok.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                Tok::Ident("typealias".into()),
                Tok::Ident("integer".into()),
                Tok::Punct('{'),
                Tok::Ident("size".into()),
                Tok::Punct('='),
                Tok::Int(31),
                Tok::Punct(';'),
                Tok::Punct('}'),
                Tok::Assign,
                Tok::Ident("uint8_t".into()),
                Tok::Punct(';'),
                Tok::Str("a\n".into()),
                Tok::Int(65),
                Tok::Ellipsis,
                Tok::Arrow,
                Tok::Int(15),
                Tok::Punct('-'),
                Tok::Int(3),
                Tok::Eof,
            ]
        );
        assert_eq!((t[0].line, t[0].col), (1, 9));
        assert_eq!((t[11].line, t[11].col), (2, 3));
    }

    #[test]
    fn errors_have_positions() {
        assert_eq!(tokenize("a\n  /* x").unwrap_err(), MetaErr::new(2, 3, "unterminated comment"));
        assert_eq!(tokenize("\n\"abc").unwrap_err().line, 2);
        assert!(tokenize("x = 12zz;").unwrap_err().msg.contains("12zz"));
        assert!(tokenize("x = @;").unwrap_err().msg.contains('@'));
        assert_eq!(toks("1u 2UL 0b101"), vec![Tok::Int(1), Tok::Int(2), Tok::Int(5), Tok::Eof]);
    }
}
