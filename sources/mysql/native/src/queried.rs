//! A snapshot query's rows, as the server sends them in the text protocol, rendered to the
//! ``key`` and ``after`` JSON texts of ``op='r'`` rows by the rules a binlog row gets
//! (``sources/mysql/values.py``'s ``queried_values``: PyMySQL's conversions, then
//! ``json_value``), so a row has the same text whether it came from the snapshot or the binlog.
//!
//! A text-protocol row (MySQL's client/server protocol, "Text Resultset Row") is each column's
//! value as a length-encoded string, or 0xFB for NULL: numbers, dates and times as MySQL prints
//! them, text in the connection's character set (``utf8mb4``), binary strings as their bytes.
//! PyMySQL parsed about a third of the snapshot's 40 us per row, rendering the rest.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::ArrayRef;
use base64::Engine;
use bridge::to_pyarrow;
use pyo3::prelude::*;

use crate::columns::{push_bit, Column, Kind};
use crate::framing::{Frames, Packet};
use crate::text::{
    float32_value, is_valid_date, push_datetime, push_json_string, push_py_float, push_time,
};

/// Renders the rows of one query over a table's columns (driver, one per table snapshot).
///
/// Parameters (Python): ``described``, the columns as the binlog decoder takes them (in the
/// query's select order); ``key``, the key's columns by name.
#[pyclass(module = "spark_ckpt.sources.mysql._native")]
pub struct QueriedRows {
    columns: Vec<Column>,
    key: Vec<(String, Option<usize>)>,
    frames: Frames,
    rendered: Vec<(String, String)>,
    ended: bool,
}

#[pymethods]
impl QueriedRows {
    #[new]
    fn new(described: Vec<crate::DescribedTuple>, key: Vec<String>) -> PyResult<Self> {
        let columns = crate::columns_of(described, None)?;
        let rendering = crate::rows::Rendering::key_positions(&columns, &key);
        Ok(QueriedRows {
            columns,
            key: rendering,
            frames: Frames::default(),
            rendered: Vec::new(),
            ended: false,
        })
    }

    /// Bytes read from the connection after the result's column definitions; renders every
    /// row they complete. Raises ``ValueError(code, message)`` for the server's error packet,
    /// ``ValueError(text)`` for a row that cannot be rendered.
    fn push(&mut self, data: &[u8]) -> PyResult<()> {
        self.frames.push(data);
        while !self.ended {
            match self.frames.next_row() {
                None => break,
                Some(Packet::Eof) => self.ended = true,
                Some(Packet::Error(code, message)) => {
                    self.ended = true;
                    let message = String::from_utf8_lossy(&message).into_owned();
                    return Err(pyo3::exceptions::PyValueError::new_err((code, message)));
                }
                Some(Packet::Row(payload)) => {
                    let row = self.row(&payload).map_err(crate::value_error)?;
                    self.rendered.push(row);
                }
                Some(Packet::Event(_) | Packet::Other) => {
                    unreachable!("a result set's packets are rows, its end or an error")
                }
            }
        }
        Ok(())
    }

    /// Whether the server's end of the result was read.
    #[getter]
    fn ended(&self) -> bool {
        self.ended
    }

    /// Rows rendered and not taken yet.
    #[getter]
    fn ready(&self) -> usize {
        self.rendered.len()
    }

    /// The first ``limit`` rows rendered: their ``key`` and ``after`` texts.
    fn take<'py>(
        &mut self,
        py: Python<'py>,
        limit: usize,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let count = limit.min(self.rendered.len());
        let mut keys = StringBuilder::with_capacity(count, 16 * count);
        let mut afters = StringBuilder::with_capacity(count, 128 * count);
        for (key, after) in self.rendered.drain(..count) {
            keys.append_value(key);
            afters.append_value(after);
        }
        let keys: ArrayRef = Arc::new(keys.finish());
        let afters: ArrayRef = Arc::new(afters.finish());
        Ok((
            to_pyarrow(py, keys.as_ref())?,
            to_pyarrow(py, afters.as_ref())?,
        ))
    }
}

/// A length-encoded string of a text row: None for NULL (0xFB).
fn lenenc<'a>(row: &'a [u8], at: &mut usize) -> Result<Option<&'a [u8]>, String> {
    let short = || "a result row ends inside a value".to_owned();
    let first = *row.get(*at).ok_or_else(short)?;
    *at += 1;
    let (length, width) = match first {
        0xFB => return Ok(None),
        0xFC => (2, 2),
        0xFD => (3, 3),
        0xFE => (8, 8),
        n => (usize::from(n), 0),
    };
    let length = if width == 0 {
        length
    } else {
        let bytes = row.get(*at..*at + width).ok_or_else(short)?;
        *at += width;
        bytes
            .iter()
            .rev()
            .fold(0usize, |acc, byte| (acc << 8) | usize::from(*byte))
    };
    let value = row.get(*at..*at + length).ok_or_else(short)?;
    *at += length;
    Ok(Some(value))
}

impl QueriedRows {
    fn row(&self, payload: &[u8]) -> Result<(String, String), String> {
        let mut at = 0;
        let mut text = String::from("{");
        let mut values = Vec::with_capacity(self.columns.len());
        for (index, column) in self.columns.iter().enumerate() {
            if index > 0 {
                text.push(',');
            }
            text.push_str(&column.label);
            let start = text.len();
            match lenenc(payload, &mut at)? {
                None => text.push_str("null"),
                Some(raw) => push_queried(&mut text, column, raw)
                    .map_err(|e| format!("column {}: {e}", column.label.trim_end_matches(':')))?,
            }
            values.push((start, text.len()));
        }
        text.push('}');
        let mut key = String::from("{");
        for (n, (label, position)) in self.key.iter().enumerate() {
            if n > 0 {
                key.push(',');
            }
            key.push_str(label);
            match position {
                Some(p) => key.push_str(&text[values[*p].0..values[*p].1]),
                None => key.push_str("null"),
            }
        }
        key.push('}');
        Ok((key, text))
    }
}

fn ascii(raw: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(raw).map_err(|_| "a value that is not text".to_owned())
}

fn number<T: std::str::FromStr>(text: &str) -> Option<T> {
    text.parse().ok()
}

/// ``[-]H+:MM:SS[.ffffff]`` (PyMySQL's ``convert_timedelta``): sign, hours, minutes, seconds,
/// microseconds.
fn parse_time(text: &str) -> Option<(bool, u64, u64, u64, u64)> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (clock, fraction) = rest.split_once('.').unwrap_or((rest, ""));
    let mut parts = clock.split(':');
    let hours = number(parts.next()?)?;
    let minutes = number(parts.next()?)?;
    let seconds = number(parts.next()?)?;
    Some((negative, hours, minutes, seconds, micros_of(fraction)?))
}

/// A fraction's digits as microseconds (the first six, right-padded, as PyMySQL reads them).
fn micros_of(fraction: &str) -> Option<u64> {
    if fraction.is_empty() {
        return Some(0);
    }
    let digits: String = fraction.chars().take(6).collect();
    let value: u64 = number(&digits)?;
    Some(value * 10u64.pow(6 - digits.len() as u32))
}

/// ``YYYY-MM-DD[ HH:MM:SS[.ffffff]]`` as numbers, when it is a date Python's ``datetime`` takes.
#[allow(clippy::type_complexity)]
fn parse_datetime(text: &str) -> Option<((u32, u32, u32), (u32, u32, u32), u32)> {
    let (date, clock) = text.split_once(' ').unwrap_or((text, ""));
    let mut ymd = date.split('-');
    let (year, month, day) = (
        number(ymd.next()?)?,
        number(ymd.next()?)?,
        number(ymd.next()?)?,
    );
    if !is_valid_date(year, month, day) {
        return None;
    }
    if clock.is_empty() {
        return Some(((year, month, day), (0, 0, 0), 0));
    }
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut parts = hms.split(':');
    let (hour, minute, second): (u32, u32, u32) = (
        number(parts.next()?)?,
        number(parts.next()?)?,
        number(parts.next()?)?,
    );
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    Some((
        (year, month, day),
        (hour, minute, second),
        micros_of(fraction)? as u32,
    ))
}

/// One non-null text-protocol value of ``column`` as the JSON text a binlog row gives it.
fn push_queried(out: &mut String, column: &Column, raw: &[u8]) -> Result<(), String> {
    match &column.kind {
        Kind::Integer | Kind::Int24 => {
            let text = ascii(raw)?;
            let _: i128 = number(text).ok_or("an integer that does not parse")?;
            out.push_str(text);
        }
        Kind::Year => {
            let year: u32 = number(ascii(raw)?).ok_or("a YEAR that does not parse")?;
            out.push_str(&year.to_string());
        }
        Kind::Float => {
            let value = finite(number(ascii(raw)?), "a FLOAT")?;
            push_py_float(out, float32_value(value));
        }
        Kind::Double => {
            let value = finite(number(ascii(raw)?), "a DOUBLE")?;
            push_py_float(out, value);
        }
        Kind::Decimal => push_json_string(out, ascii(raw)?),
        Kind::Date | Kind::DateTime { .. } | Kind::Timestamp | Kind::Timestamp2 { .. } => {
            let (fsp, zoned) = match column.kind {
                Kind::DateTime { fsp } => (fsp, false),
                Kind::Timestamp2 { fsp } => (fsp, true),
                Kind::Timestamp => (0, true),
                _ => (0, false),
            };
            // a zero or invalid date (outside strict SQL modes) is null, as from the binlog
            match parse_datetime(ascii(raw)?) {
                None => out.push_str("null"),
                Some(((y, m, d), _, _)) if matches!(column.kind, Kind::Date) => {
                    out.push('"');
                    crate::text::push_date(out, y, m, d);
                    out.push('"');
                }
                Some((date, clock, micros)) => {
                    out.push('"');
                    push_datetime(out, date, clock, micros, fsp);
                    if zoned {
                        out.push_str("+00:00");
                    }
                    out.push('"');
                }
            }
        }
        Kind::Time | Kind::Time2 { .. } => {
            let fsp = match column.kind {
                Kind::Time2 { fsp } => fsp,
                _ => 0,
            };
            let text = ascii(raw)?;
            match parse_time(text) {
                Some((negative, h, m, s, us)) => {
                    out.push('"');
                    push_time(out, negative, (h * 3600 + m * 60 + s) * 1_000_000 + us, fsp);
                    out.push('"');
                }
                None => push_json_string(out, text),
            }
        }
        Kind::Utf8 | Kind::OtherText | Kind::Enum { .. } => {
            let text = std::str::from_utf8(raw)
                .map_err(|_| "text that is not the connection's utf8mb4".to_owned())?;
            push_json_string(out, text);
        }
        Kind::Set { members } => {
            let text = ascii_or_text(raw)?;
            let chosen: Vec<&str> = text.split(',').filter(|m| !m.is_empty()).collect();
            let ordered: Vec<&str> = if members.is_empty() {
                let mut sorted = chosen.clone();
                sorted.sort_unstable();
                sorted.dedup();
                sorted
            } else {
                members
                    .iter()
                    .map(String::as_str)
                    .filter(|m| chosen.contains(m))
                    .collect()
            };
            push_json_string(out, &ordered.join(","));
        }
        Kind::Binary { pad } => {
            let mut bytes = raw.to_vec();
            if bytes.len() < *pad {
                bytes.resize(*pad, 0);
            }
            out.push('"');
            out.push_str(&base64::engine::general_purpose::STANDARD.encode(&bytes));
            out.push('"');
        }
        Kind::Bit { one } => push_bit(out, raw, *one),
        Kind::Json => {
            let text = ascii_or_text(raw)?;
            let document: serde_json::Value =
                serde_json::from_str(text).map_err(|e| format!("a JSON value: {e}"))?;
            let mut compact = String::new();
            push_python_json(&mut compact, &document)?;
            push_json_string(out, &compact);
        }
    }
    Ok(())
}

/// A parsed float that is a number (MySQL stores no infinity or NaN; ``1e999`` in a JSON text
/// would be one).
fn finite(value: Option<f64>, what: &str) -> Result<f64, String> {
    match value {
        Some(value) if value.is_finite() => Ok(value),
        _ => Err(format!("{what} that is not a finite number")),
    }
}

fn ascii_or_text(raw: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(raw).map_err(|_| "text that is not the connection's utf8mb4".to_owned())
}

/// A parsed JSON document as ``json.dumps(json.loads(text), separators=(",", ":"),
/// ensure_ascii=False)`` writes it: numbers with a fraction or an exponent become Python floats.
fn push_python_json(out: &mut String, value: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value as J;
    match value {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Number(n) => {
            // arbitrary_precision (the workspace's serde_json): the number as written
            let text = n.to_string();
            if text.contains(['.', 'e', 'E']) {
                let value = finite(text.parse().ok(), "a JSON number")?;
                push_py_float(out, value);
            } else {
                out.push_str(&text);
            }
        }
        J::String(s) => push_json_string(out, s),
        J::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                push_python_json(out, item)?;
            }
            out.push(']');
        }
        J::Object(entries) => {
            out.push('{');
            for (n, (key, item)) in entries.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                push_json_string(out, key);
                out.push(':');
                push_python_json(out, item)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(kind: Kind) -> Column {
        Column {
            label: "\"c\":".into(),
            kind,
            column_type: mysql_common::constants::ColumnType::MYSQL_TYPE_NULL,
            meta: vec![],
            unsigned: false,
        }
    }

    fn rendered(kind: Kind, raw: &str) -> String {
        rendered_bytes(kind, raw.as_bytes())
    }

    fn rendered_bytes(kind: Kind, raw: &[u8]) -> String {
        let mut out = String::new();
        push_queried(&mut out, &column(kind), raw).expect("a value");
        out
    }

    #[test]
    fn values_render_as_their_binlog_values_do() {
        assert_eq!(rendered(Kind::Year, "0000"), "0");
        assert_eq!(rendered(Kind::Float, "1.1"), "1.1");
        assert_eq!(rendered(Kind::Float, "-3.40282e38"), "-3.40282e+38");
        assert_eq!(rendered(Kind::Double, "1e16"), "1e+16");
        assert_eq!(rendered(Kind::Decimal, "-0.0001"), "\"-0.0001\"");
        assert_eq!(rendered(Kind::Date, "0000-00-00"), "null");
        assert_eq!(
            rendered(Kind::DateTime { fsp: 3 }, "2024-02-29 13:05:00.250"),
            "\"2024-02-29 13:05:00.250\""
        );
        assert_eq!(
            rendered(Kind::Timestamp2 { fsp: 0 }, "0000-00-00 00:00:00"),
            "null"
        );
        assert_eq!(
            rendered(Kind::Timestamp2 { fsp: 3 }, "2038-01-19 03:14:07.999"),
            "\"2038-01-19 03:14:07.999+00:00\""
        );
        assert_eq!(
            rendered(Kind::Time2 { fsp: 6 }, "-00:00:00.000001"),
            "\"-00:00:00.000001\""
        );
        assert_eq!(
            rendered(Kind::Time2 { fsp: 0 }, "838:59:59"),
            "\"838:59:59\""
        );
        let set = Kind::Set {
            members: vec!["a".into(), "b".into(), "c".into()],
        };
        assert_eq!(rendered(set, "c,a"), "\"a,c\"");
        assert_eq!(
            rendered(Kind::Json, r#"{"k": [1, 2.50, "v", null, true, 1e16]}"#),
            r#""{\"k\":[1,2.5,\"v\",null,true,1e+16]}""#
        );
        assert_eq!(rendered_bytes(Kind::Bit { one: false }, &[3, 0xff]), "1023");
        assert_eq!(
            rendered_bytes(Kind::Binary { pad: 4 }, &[1, 2]),
            "\"AQIAAA==\""
        );
    }

    #[test]
    fn a_row_is_its_length_encoded_values() {
        let row = [1u8, b'7', 0xFB, 0xFC, 2, 0, b'h', b'i'];
        let mut at = 0;
        assert_eq!(lenenc(&row, &mut at), Ok(Some(&b"7"[..])));
        assert_eq!(lenenc(&row, &mut at), Ok(None));
        assert_eq!(lenenc(&row, &mut at), Ok(Some(&b"hi"[..])));
        assert!(lenenc(&row, &mut at).is_err());
    }
}
