//! What the connectors' native modules (``sources/*/native``) share: handing Arrow arrays to
//! pyarrow, quoting a text the way the connectors' Python messages do, and writing JSON strings
//! and floats as Python's ``json.dumps`` writes them (every connector's rows are the JSON text
//! its Python rules give).

use std::fmt::Write;

use arrow_array::Array;
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Hand ``array`` to pyarrow through the Arrow C data interface: pyarrow takes ownership of the
/// buffers (the exported structs are released and dropped here). Once per array built.
pub fn to_pyarrow<'py>(py: Python<'py>, array: &dyn Array) -> PyResult<Bound<'py, PyAny>> {
    let data = array.to_data();
    let mut ffi_array = FFI_ArrowArray::new(&data);
    let mut ffi_schema = FFI_ArrowSchema::try_from(data.data_type())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.import("pyarrow")?.getattr("Array")?.call_method1(
        "_import_from_c",
        (
            std::ptr::addr_of_mut!(ffi_array) as usize,
            std::ptr::addr_of_mut!(ffi_schema) as usize,
        ),
    )
}

/// Python's ``repr`` of a string: single quotes unless the text has one and no double quote.
pub fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
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

#[cfg(test)]
mod tests {
    use super::{push_json_string, push_py_float, py_repr_str};

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
    fn texts_are_quoted_as_python_repr_quotes_them() {
        assert_eq!(py_repr_str("tx-1"), "'tx-1'");
        assert_eq!(py_repr_str("it's"), "\"it's\"");
        assert_eq!(py_repr_str("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(py_repr_str("\\\n\t\u{1}\u{7f}é"), "'\\\\\\n\\t\\x01\\x7fé'");
    }
}
