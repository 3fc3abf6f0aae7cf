//! Rendering PostgreSQL rows, as ``COPY ... TO STDOUT`` prints their ``::text`` columns, to
//! the JSON text every path of the connector produces for a row image.
//!
//! The rules are the connector's (``sources/postgres/tables.py``'s ``parse_text_value`` and
//! ``wal2json.py``'s ``normalize_value``, then ``json.dumps(..., ensure_ascii=False)``), so a
//! snapshot row reads text for text like the same row streamed:
//!
//! - integers (``smallint``, ``integer``, ``bigint``, ``oid``): JSON numbers, as printed;
//! - ``numeric``/``decimal``: JSON strings with every digit as printed;
//! - ``real``/``double precision``: JSON numbers in Python's shortest ``repr`` (``1.0``,
//!   ``1e+16``), ``NaN`` and the infinities as strings spelled as PostgreSQL does;
//! - ``boolean``: ``true``/``false``;
//! - anything else: a JSON string of the text.

pub use bridge::{push_json_string, push_py_float};

/// How a column's text becomes a JSON value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Integer,
    Numeric,
    Float,
    Boolean,
}

impl Kind {
    pub fn from_code(code: u8) -> Option<Kind> {
        Some(match code {
            0 => Kind::Text,
            1 => Kind::Integer,
            2 => Kind::Numeric,
            3 => Kind::Float,
            4 => Kind::Boolean,
            _ => return None,
        })
    }
}

/// A column value (``None``: SQL NULL) as JSON, appended to ``out``.
pub fn push_value(out: &mut String, kind: Kind, text: Option<&str>) -> Result<(), String> {
    let Some(text) = text else {
        out.push_str("null");
        return Ok(());
    };
    match kind {
        Kind::Text | Kind::Numeric => push_json_string(out, text),
        Kind::Integer => {
            let digits = text.strip_prefix('-').unwrap_or(text);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("an integer column printed {text:?}"));
            }
            out.push_str(text);
        }
        Kind::Float => {
            let value: f64 = text
                .parse()
                .map_err(|_| format!("a float column printed {text:?}"))?;
            if value.is_finite() {
                push_py_float(out, value);
            } else {
                push_json_string(out, text); // NaN, Infinity, -Infinity: no JSON literal
            }
        }
        Kind::Boolean => out.push_str(if text == "t" || text == "true" {
            "true"
        } else {
            "false"
        }),
    }
    Ok(())
}

/// One field of a ``COPY ... TO STDOUT`` text row, unescaped (``None`` for ``\N``).
pub fn unescape_field(raw: &[u8]) -> Result<Option<std::borrow::Cow<'_, str>>, String> {
    if raw == b"\\N" {
        return Ok(None);
    }
    if !raw.contains(&b'\\') {
        let text = std::str::from_utf8(raw).map_err(|e| format!("a field is not UTF-8: {e}"))?;
        return Ok(Some(std::borrow::Cow::Borrowed(text)));
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        i += 1;
        if b != b'\\' || i == raw.len() {
            out.push(b);
            continue;
        }
        let c = raw[i];
        i += 1;
        match c {
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(value as u8);
            }
            b'x' => {
                let mut value = 0u32;
                let mut seen = 0;
                while seen < 2 {
                    match raw.get(i).and_then(|d| (*d as char).to_digit(16)) {
                        Some(d) => {
                            value = value * 16 + d;
                            i += 1;
                            seen += 1;
                        }
                        None => break,
                    }
                }
                if seen == 0 {
                    out.push(b'x');
                } else {
                    out.push(value as u8);
                }
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out)
        .map(|s| Some(std::borrow::Cow::Owned(s)))
        .map_err(|e| format!("a field is not UTF-8: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_fields_unescape() {
        assert_eq!(unescape_field(b"\\N").unwrap(), None);
        assert_eq!(
            unescape_field(b"a\\tb\\\\c\\nd").unwrap().unwrap(),
            "a\tb\\c\nd"
        );
        assert_eq!(unescape_field(b"\\101\\x42").unwrap().unwrap(), "AB");
        assert_eq!(unescape_field(b"\\\\x0102").unwrap().unwrap(), "\\x0102");
    }

    #[test]
    fn values_follow_the_column_kind() {
        let mut out = String::new();
        push_value(&mut out, Kind::Numeric, Some("12.50")).unwrap();
        push_value(&mut out, Kind::Integer, Some("-7")).unwrap();
        push_value(&mut out, Kind::Float, Some("NaN")).unwrap();
        push_value(&mut out, Kind::Float, Some("1e+20")).unwrap();
        push_value(&mut out, Kind::Boolean, Some("f")).unwrap();
        push_value(&mut out, Kind::Text, None).unwrap();
        assert_eq!(out, "\"12.50\"-7\"NaN\"1e+20falsenull");
        assert!(push_value(&mut out, Kind::Integer, Some("1.5")).is_err());
    }
}
