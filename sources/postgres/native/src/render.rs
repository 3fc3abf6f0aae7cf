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

use std::fmt::Write;

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

/// ``text`` as a JSON string, escaped as Python's ``json.dumps(..., ensure_ascii=False)`` does.
pub fn push_json_string(out: &mut String, text: &str) {
    if !text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.reserve(text.len() + 2);
        out.push('"');
        out.push_str(text);
        out.push('"');
        return;
    }
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// ``digits`` (the shortest round-trip digits of ``value``, as Rust prints them) with a tie
/// settled as Python settles it.
///
/// When ``value`` lies exactly halfway between two shortest decimals that both read back to it
/// (64.356597900390625: ...062 and ...063), Rust's shortest formatting takes the upper one and
/// Python's ``repr`` (David Gay's dtoa, round-half-even) the even one. A tie shows in the exact
/// expansion: the lower candidate, then a 5, then nothing.
fn even_on_tie(value: f64, digits: String) -> String {
    let n = digits.len();
    let last = digits.as_bytes()[n - 1];
    if (last - b'0').is_multiple_of(2) {
        return digits;
    }
    let mut lowered = digits[..n - 1].to_owned();
    lowered.push(char::from(last - 1));
    let exact = format!("{:.*e}", n + 24, value.abs());
    let (mantissa, exponent) = exact.split_once('e').expect("LowerExp has an exponent");
    let exact_digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let tie = exact_digits.starts_with(&lowered)
        && exact_digits[n..].starts_with('5')
        && exact_digits[n + 1..].bytes().all(|b| b == b'0');
    if !tie {
        return digits;
    }
    // The lower candidate must read back to the value too (not so at a power of two).
    let candidate = format!("{}.{}e{}", &lowered[..1], &lowered[1..], exponent);
    if candidate.parse::<f64>().ok() == Some(value.abs()) {
        lowered
    } else {
        digits
    }
}

/// Python's ``repr`` of a finite float: the shortest digits that read back to it, in fixed
/// notation when the decimal point falls within 16 digits, else in scientific notation.
pub fn push_py_float(out: &mut String, value: f64) {
    if value == 0.0 {
        out.push_str(if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        });
        return;
    }
    // Rust's LowerExp prints the shortest round-trip digits, as Python does.
    let sci = format!("{value:e}");
    let (mantissa, exponent) = sci.split_once('e').expect("LowerExp has an exponent");
    let exponent: i32 = exponent.parse().expect("LowerExp's exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits = even_on_tie(value, mantissa.chars().filter(|c| *c != '.').collect());
    let point = exponent + 1; // digits before the decimal point
    out.push_str(sign);
    if (-3..=16).contains(&point) {
        let n = digits.len() as i32;
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-point) as usize));
            out.push_str(&digits);
        } else if point >= n {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', (point - n) as usize));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..point as usize]);
            out.push('.');
            out.push_str(&digits[point as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.abs()
        );
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

    fn float(value: f64) -> String {
        let mut out = String::new();
        push_py_float(&mut out, value);
        out
    }

    #[test]
    fn floats_read_like_pythons_repr() {
        // Each right-hand side is Python's repr() of the value.
        for (value, python) in [
            (1.25, "1.25"),
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (-0.0, "-0.0"),
            (3.4028234663852886e38, "3.4028234663852886e+38"),
            // Exact ties between two shortest decimals: Python keeps the even last digit.
            (f64::from(64.3566_f32), "64.35659790039062"), // exactly 64.356597900390625
            (-f64::from(64.3566_f32), "-64.35659790039062"),
        ] {
            assert_eq!(float(value), python, "{value:e}");
        }
    }

    #[test]
    fn strings_are_escaped_as_pythons_json() {
        let mut out = String::new();
        push_json_string(&mut out, "a\"b\\c\nd\te\u{1}é\u{7f}");
        assert_eq!(out, "\"a\\\"b\\\\c\\nd\\te\\u0001é\u{7f}\"");
    }

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
