//! A table map's columns, and one column value of a row image rendered to its JSON text by the
//! rules of ``sources/mysql/values.py`` (per type: the middle column of ``types.py``'s table).
//!
//! The binary formats are read by ``mysql_common`` (MySQL's own layouts: integers, ``DECIMAL``,
//! ``DATETIME2``, strings, MySQL's binary ``JSON``), except three read here: ``TIME2``, whose
//! fraction ``mysql_common`` 0.38 reads wrongly for a negative ``TIME(1)`` or ``TIME(2)`` (it
//! subtracts 0x100 from an unsigned byte), a signed ``MEDIUMINT``, which it reads without its
//! sign (the fixture's -8388608 came out as 8388608), and ``TIMESTAMP2``, which it hands over
//! as text.

use base64::Engine;
use mysql_common::binlog::decimal::Decimal;
use mysql_common::binlog::jsonb;
use mysql_common::binlog::value::BinlogValue;
use mysql_common::constants::ColumnType;
use mysql_common::io::ParseBuf;
use mysql_common::Value;

use crate::text::{
    float32_value, is_valid_date, push_date, push_datetime, push_fraction, push_json_string,
    push_py_float, push_time, push_timestamp,
};

/// How a column's values are written, from its type and what the Python side described.
#[derive(Debug, Clone)]
pub enum Kind {
    Integer,
    Int24,
    Float,
    Double,
    Decimal,
    Year,
    Date,
    DateTime {
        fsp: u8,
    },
    Timestamp,
    Timestamp2 {
        fsp: u8,
    },
    Time,
    Time2 {
        fsp: u8,
    },
    /// Text in UTF-8 (``utf8``, ``utf8mb3``, ``utf8mb4``, or no character set known).
    Utf8,
    /// Text in another character set: Python's codec decodes it (``values.py``'s rules).
    OtherText,
    /// Bytes, base64; a ``BINARY(n)`` value is padded to ``n`` with the zeros the binlog dropped.
    Binary {
        pad: usize,
    },
    Enum {
        members: Vec<String>,
    },
    Set {
        members: Vec<String>,
    },
    Bit {
        one: bool,
    },
    Json,
}

/// One column of a described table map.
#[derive(Debug, Clone)]
pub struct Column {
    /// ``"name":``, escaped once.
    pub label: String,
    pub kind: Kind,
    pub column_type: ColumnType,
    pub meta: Vec<u8>,
    pub unsigned: bool,
}

/// What the Python side says of a column (``MySqlColumn``'s fields the rendering needs).
pub struct Described {
    pub name: String,
    pub code: u8,
    pub unsigned: bool,
    pub charset: Option<String>,
    pub codec: Option<String>,
    pub bits: Option<u32>,
    pub fsp: u8,
    pub length: Option<usize>,
    pub members: Vec<String>,
}

const BINARY: &str = "binary";

fn is_utf8_codec(codec: &str) -> bool {
    matches!(
        codec.to_ascii_lowercase().as_str(),
        "utf8" | "utf-8" | "utf8mb3" | "utf8mb4" | "utf_8"
    )
}

impl Kind {
    /// The kind of a column of type ``code`` (the table map's real type), as described.
    pub fn of(described: &Described) -> Result<Kind, String> {
        use ColumnType::*;
        let code = ColumnType::try_from(described.code)
            .map_err(|_| format!("unknown column type code {}", described.code))?;
        let charset = described.charset.as_deref();
        let is_string = matches!(
            code,
            MYSQL_TYPE_VARCHAR
                | MYSQL_TYPE_VAR_STRING
                | MYSQL_TYPE_STRING
                | MYSQL_TYPE_TINY_BLOB
                | MYSQL_TYPE_MEDIUM_BLOB
                | MYSQL_TYPE_LONG_BLOB
                | MYSQL_TYPE_BLOB
        );
        Ok(match code {
            MYSQL_TYPE_TINY | MYSQL_TYPE_SHORT | MYSQL_TYPE_LONG | MYSQL_TYPE_LONGLONG => {
                Kind::Integer
            }
            MYSQL_TYPE_INT24 => Kind::Int24,
            MYSQL_TYPE_FLOAT => Kind::Float,
            MYSQL_TYPE_DOUBLE => Kind::Double,
            MYSQL_TYPE_NEWDECIMAL => Kind::Decimal,
            MYSQL_TYPE_YEAR => Kind::Year,
            MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => Kind::Date,
            MYSQL_TYPE_DATETIME => Kind::DateTime { fsp: 0 },
            MYSQL_TYPE_DATETIME2 => Kind::DateTime { fsp: described.fsp },
            MYSQL_TYPE_TIMESTAMP => Kind::Timestamp,
            MYSQL_TYPE_TIMESTAMP2 => Kind::Timestamp2 { fsp: described.fsp },
            MYSQL_TYPE_TIME => Kind::Time,
            MYSQL_TYPE_TIME2 => Kind::Time2 { fsp: described.fsp },
            MYSQL_TYPE_JSON => Kind::Json,
            // no members: the table map had none (the client decodes its values as null)
            MYSQL_TYPE_ENUM => Kind::Enum {
                members: described.members.clone(),
            },
            MYSQL_TYPE_SET => Kind::Set {
                members: described.members.clone(),
            },
            MYSQL_TYPE_BIT => Kind::Bit {
                one: described.bits.unwrap_or(1) == 1,
            },
            MYSQL_TYPE_GEOMETRY => Kind::Binary { pad: 0 },
            _ if is_string && charset == Some(BINARY) => Kind::Binary {
                pad: if code == MYSQL_TYPE_STRING {
                    described.length.unwrap_or(0)
                } else {
                    0
                },
            },
            _ if is_string => match described.codec.as_deref() {
                None => Kind::Utf8,
                Some(codec) if is_utf8_codec(codec) => Kind::Utf8,
                Some(_) => Kind::OtherText,
            },
            other => return Err(format!("column type {other:?} is not decoded")),
        })
    }
}

/// A value the Python side must finish: text in a character set only Python's codecs know.
pub enum Rendered {
    Done,
    Text(Vec<u8>),
}

/// Appends the JSON text of one non-null value of ``column``, read from ``buf``.
pub fn push_value<'a>(
    out: &mut String,
    column: &'a Column,
    buf: &mut ParseBuf<'a>,
) -> Result<Rendered, String> {
    match &column.kind {
        Kind::Int24 => {
            // mysql_common 0.38 reads a signed MEDIUMINT without its sign (-8388608 arrives
            // as 8388608): three little-endian bytes, sign-extended here
            let raw = take(buf, 3)?;
            let unsigned = u32::from(raw[0]) | u32::from(raw[1]) << 8 | u32::from(raw[2]) << 16;
            let value = if column.unsigned {
                i64::from(unsigned)
            } else {
                i64::from(((unsigned << 8) as i32) >> 8)
            };
            out.push_str(&value.to_string());
            return Ok(Rendered::Done);
        }
        Kind::Time2 { fsp } => {
            push_time2(out, buf, *fsp)?;
            return Ok(Rendered::Done);
        }
        Kind::Time => {
            // the old TIME (before MySQL 5.6.4's TIME2; MariaDB without
            // mysql56_temporal_format): a signed 3-byte HHMMSS, whose hours reach 838
            // (mysql_common 0.38 keeps them in a u8)
            let raw = take(buf, 3)?;
            let packed = ((u32::from(raw[0]) | u32::from(raw[1]) << 8 | u32::from(raw[2]) << 16)
                << 8) as i32
                >> 8;
            let hhmmss = u64::from(packed.unsigned_abs());
            let seconds = hhmmss / 10_000 * 3600 + hhmmss / 100 % 100 * 60 + hhmmss % 100;
            out.push('"');
            push_time(out, packed < 0, seconds * 1_000_000, 0);
            out.push('"');
            return Ok(Rendered::Done);
        }
        Kind::Timestamp2 { fsp } => {
            push_timestamp2(out, buf, *fsp)?;
            return Ok(Rendered::Done);
        }
        _ => {}
    }
    let ctx = (
        column.column_type,
        column.meta.as_slice(),
        column.unsigned,
        false,
    );
    let value: BinlogValue<'_> = buf.parse(ctx).map_err(|e| e.to_string())?;
    match value {
        BinlogValue::Value(value) => push_plain(out, column, value),
        BinlogValue::Jsonb(document) => {
            let mut text = String::new();
            push_jsonb(&mut text, &document)?;
            push_json_string(out, &text);
            Ok(Rendered::Done)
        }
        BinlogValue::JsonDiff(_) => Err(partial_json()),
    }
}

pub fn partial_json() -> String {
    "a partial JSON update (binlog_row_value_options=PARTIAL_JSON) holds no whole document; \
     set binlog_row_value_options='' on the server"
        .to_owned()
}

fn push_plain(out: &mut String, column: &Column, value: Value) -> Result<Rendered, String> {
    match (&column.kind, value) {
        (_, Value::NULL) => out.push_str("null"),
        (Kind::Integer, Value::Int(n)) => out.push_str(&n.to_string()),
        (Kind::Integer, Value::UInt(n)) => out.push_str(&n.to_string()),
        (Kind::Float, Value::Float(f)) => push_py_float(out, float32_value(f64::from(f))),
        (Kind::Double, Value::Double(f)) => push_py_float(out, f),
        // every digit kept, as text (Debezium's decimal.handling.mode=string)
        (Kind::Decimal, Value::Bytes(text)) => {
            push_json_string(out, std::str::from_utf8(&text).map_err(|e| e.to_string())?)
        }
        // mysql_common gives 1900 + the stored byte; MySQL stores YEAR 0000 as 0 (1901 to 2155
        // as year - 1900), and a query returns it as 0, so 1900 here is 0
        (Kind::Year, Value::Bytes(text)) => {
            let text = std::str::from_utf8(&text).map_err(|e| e.to_string())?;
            out.push_str(if text == "1900" { "0" } else { text })
        }
        (Kind::Date, Value::Date(y, m, d, ..)) => {
            let (y, m, d) = (u32::from(y), u32::from(m), u32::from(d));
            if y == 0 || m == 0 || d == 0 || !is_valid_date(y, m, d) {
                out.push_str("null");
            } else {
                out.push('"');
                push_date(out, y, m, d);
                out.push('"');
            }
        }
        (Kind::DateTime { fsp }, Value::Date(y, m, d, h, i, s, us)) => {
            let (y, m, d) = (u32::from(y), u32::from(m), u32::from(d));
            if !is_valid_date(y, m, d) || h > 23 || i > 59 || s > 59 {
                out.push_str("null"); // a zero or invalid date: Python's datetime refuses it
            } else {
                out.push('"');
                push_datetime(
                    out,
                    (y, m, d),
                    (u32::from(h), u32::from(i), u32::from(s)),
                    us,
                    *fsp,
                );
                out.push('"');
            }
        }
        (Kind::Timestamp, Value::Int(0)) => out.push_str("null"), // the zero TIMESTAMP
        (Kind::Timestamp, Value::Int(seconds)) => {
            out.push('"');
            push_timestamp(out, seconds, 0, 0);
            out.push('"');
        }
        (Kind::Utf8, Value::Bytes(raw)) => match std::str::from_utf8(&raw) {
            Ok(text) => push_json_string(out, text),
            Err(_) => return Ok(Rendered::Text(raw)),
        },
        (Kind::OtherText, Value::Bytes(raw)) => return Ok(Rendered::Text(raw)),
        (Kind::Binary { pad }, Value::Bytes(mut raw)) => {
            if raw.len() < *pad {
                raw.resize(*pad, 0);
            }
            out.push('"');
            out.push_str(&base64::engine::general_purpose::STANDARD.encode(&raw));
            out.push('"');
        }
        (Kind::Enum { members }, Value::Int(index)) => {
            if members.is_empty() {
                out.push_str("null");
            } else if index == 0 {
                out.push_str("\"\"");
            } else {
                let member = members
                    .get(index as usize - 1)
                    .ok_or_else(|| format!("ENUM index {index} past its members"))?;
                push_json_string(out, member);
            }
        }
        (Kind::Set { members }, Value::Bytes(mask)) => {
            let mut bits: u64 = 0;
            for (n, byte) in mask.iter().enumerate().take(8) {
                bits |= u64::from(*byte) << (8 * n);
            }
            let chosen: Vec<&str> = members
                .iter()
                .enumerate()
                .filter(|(n, _)| *n < 64 && bits & (1 << n) != 0)
                .map(|(_, member)| member.as_str())
                .collect();
            push_json_string(out, &chosen.join(","));
        }
        (Kind::Bit { one }, Value::Bytes(raw)) => push_bit(out, &raw, *one),
        (kind, value) => return Err(format!("a {kind:?} column read as {value:?}")),
    }
    Ok(Rendered::Done)
}

/// A ``BIT(n)`` value (big-endian bytes): a boolean for ``BIT(1)``, else a number.
pub fn push_bit(out: &mut String, raw: &[u8], one: bool) {
    let number = raw
        .iter()
        .fold(0u128, |acc, byte| (acc << 8) | u128::from(*byte));
    if one {
        out.push_str(if number != 0 { "true" } else { "false" });
    } else {
        out.push_str(&number.to_string());
    }
}

const FRACTION_BYTES: [usize; 7] = [0, 1, 1, 2, 2, 3, 3];

fn take<'a>(buf: &mut ParseBuf<'a>, n: usize) -> Result<&'a [u8], String> {
    buf.checked_eat(n)
        .ok_or_else(|| "a row image ends inside a value".to_owned())
}

fn big_endian(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte))
}

/// ``TIME(fsp)`` in MySQL 5.6's packed form (``sources/mysql/time2.py`` has the layout).
fn push_time2(out: &mut String, buf: &mut ParseBuf<'_>, fsp: u8) -> Result<(), String> {
    let fsp = fsp.min(6);
    let size = FRACTION_BYTES[usize::from(fsp)];
    let mut intpart = big_endian(take(buf, 3)?) as i64 - 0x80_0000;
    let mut fraction = big_endian(take(buf, size)?) as i64;
    if size > 0 && intpart < 0 && fraction != 0 {
        intpart += 1; // a negative value's fraction is stored as its complement
        fraction -= 1 << (8 * size);
    }
    let scale = match fsp {
        1 | 2 => 10_000,
        3 | 4 => 100,
        _ => 1,
    };
    let packed = (intpart << 24) + fraction * scale;
    let magnitude = packed.unsigned_abs();
    let (hms, micros) = (magnitude >> 24, magnitude & 0xFF_FFFF);
    let seconds = ((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 0x3F) * 60 + (hms & 0x3F);
    out.push('"');
    push_time(out, packed < 0, seconds * 1_000_000 + micros, fsp);
    out.push('"');
    Ok(())
}

/// ``TIMESTAMP(fsp)``: seconds since the epoch (4 bytes, big-endian), then the fraction.
fn push_timestamp2(out: &mut String, buf: &mut ParseBuf<'_>, fsp: u8) -> Result<(), String> {
    let fsp = fsp.min(6);
    let seconds = big_endian(take(buf, 4)?) as i64;
    let raw = big_endian(take(buf, FRACTION_BYTES[usize::from(fsp)])?) as u32;
    let micros = match fsp {
        1 | 2 => raw * 10_000,
        3 | 4 => raw * 100,
        _ => raw,
    };
    if seconds == 0 && micros == 0 {
        // '0000-00-00 00:00:00' (TIMESTAMP's range starts a second after the epoch): null, as
        // a query returns it
        out.push_str("null");
        return Ok(());
    }
    out.push('"');
    push_timestamp(out, seconds, micros, fsp);
    out.push('"');
    Ok(())
}

/// A MySQL binary ``JSON`` document as ``json.dumps`` writes what a query's text parses to:
/// compact, keys in the stored order, numbers as Python prints them. Opaque scalars (a
/// ``DECIMAL``, date or time cast to JSON) as MySQL prints them in a document's text.
fn push_jsonb(out: &mut String, value: &jsonb::Value<'_>) -> Result<(), String> {
    use jsonb::Value as J;
    match value {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::I16(n) => out.push_str(&n.to_string()),
        J::U16(n) => out.push_str(&n.to_string()),
        J::I32(n) => out.push_str(&n.to_string()),
        J::U32(n) => out.push_str(&n.to_string()),
        J::I64(n) => out.push_str(&n.to_string()),
        J::U64(n) => out.push_str(&n.to_string()),
        J::F64(f) => push_py_float(out, *f),
        J::String(s) => push_json_string(out, &s.str()),
        J::SmallArray(a) => push_array(out, a.iter())?,
        J::LargeArray(a) => push_array(out, a.iter())?,
        J::SmallObject(o) => push_object(out, o.iter())?,
        J::LargeObject(o) => push_object(out, o.iter())?,
        J::Opaque(opaque) => push_opaque(out, opaque.value_type(), opaque.data_raw())?,
    }
    Ok(())
}

fn push_array<'a>(
    out: &mut String,
    items: impl Iterator<Item = std::io::Result<jsonb::Value<'a>>>,
) -> Result<(), String> {
    out.push('[');
    for (n, item) in items.enumerate() {
        if n > 0 {
            out.push(',');
        }
        push_jsonb(out, &item.map_err(|e| e.to_string())?)?;
    }
    out.push(']');
    Ok(())
}

fn push_object<'a>(
    out: &mut String,
    entries: impl Iterator<Item = std::io::Result<(jsonb::ObjectKey<'a>, jsonb::Value<'a>)>>,
) -> Result<(), String> {
    out.push('{');
    for (n, entry) in entries.enumerate() {
        let (key, value) = entry.map_err(|e| e.to_string())?;
        if n > 0 {
            out.push(',');
        }
        push_json_string(out, &key.value());
        out.push(':');
        push_jsonb(out, &value)?;
    }
    out.push('}');
    Ok(())
}

fn push_opaque(out: &mut String, kind: ColumnType, data: &[u8]) -> Result<(), String> {
    use ColumnType::*;
    match kind {
        MYSQL_TYPE_NEWDECIMAL if data.len() >= 2 => {
            // precision, scale, then the packed decimal; a query's text parses to a float
            let decimal = Decimal::read_bin(
                &data[2..],
                usize::from(data[0]),
                usize::from(data[1]),
                false,
            )
            .map_err(|e| e.to_string())?;
            let number: f64 = decimal.to_string().parse().map_err(|_| "a JSON decimal")?;
            push_py_float(out, number);
        }
        MYSQL_TYPE_DATE | MYSQL_TYPE_DATETIME | MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_TIME
            if data.len() >= 8 =>
        {
            let packed = i64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
            let mut text = String::new();
            if kind == MYSQL_TYPE_TIME {
                let magnitude = packed.unsigned_abs();
                let hms = magnitude >> 24;
                let seconds =
                    ((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 0x3F) * 60 + (hms & 0x3F);
                push_time(
                    &mut text,
                    packed < 0,
                    seconds * 1_000_000 + (magnitude & 0xFF_FFFF),
                    6,
                );
            } else {
                let ymdhms = packed.unsigned_abs() >> 24;
                let ymd = ymdhms >> 17;
                let (ym, day) = (ymd >> 5, (ymd & 31) as u32);
                let (year, month) = ((ym / 13) as u32, (ym % 13) as u32);
                if kind == MYSQL_TYPE_DATE {
                    push_date(&mut text, year, month, day);
                } else {
                    let hms = ymdhms % (1 << 17);
                    push_date(&mut text, year, month, day);
                    let clock = format!(
                        " {:02}:{:02}:{:02}",
                        hms >> 12,
                        (hms >> 6) & 0x3F,
                        hms & 0x3F
                    );
                    text.push_str(&clock);
                    push_fraction(&mut text, (packed.unsigned_abs() & 0xFF_FFFF) as u32, 6);
                }
            }
            push_json_string(out, &text);
        }
        other => {
            // MySQL prints any other opaque value as base64 with its type code
            let text = format!(
                "base64:type{}:{}",
                other as u8,
                base64::engine::general_purpose::STANDARD.encode(data)
            );
            push_json_string(out, &text);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time2(raw: &str, fsp: u8) -> String {
        let bytes: Vec<u8> = (0..raw.len())
            .step_by(2)
            .map(|n| u8::from_str_radix(&raw[n..n + 2], 16).expect("hex"))
            .collect();
        let mut out = String::new();
        push_time2(&mut out, &mut ParseBuf(&bytes), fsp).expect("a TIME2 value");
        out
    }

    #[test]
    fn time2_decodes_signs_and_fractions_as_mysql_packs_them() {
        // MySQL's my_time_packed_from_binary (mysys/my_time.cc): a negative value with a
        // fraction keeps the fraction as its complement
        assert_eq!(time2("800000", 0), "\"00:00:00\"");
        assert_eq!(time2("7fffff", 0), "\"-00:00:01\"");
        assert_eq!(time2("b46efb", 0), "\"838:59:59\"");
        assert_eq!(time2("4b9105", 0), "\"-838:59:59\"");
        assert_eq!(time2("7fffffffffff", 6), "\"-00:00:00.000001\"");
        assert_eq!(time2("7fffffce", 1), "\"-00:00:00.5\"");
        assert_eq!(time2("7fffffff9c", 4), "\"-00:00:00.0100\"");
        assert_eq!(time2("80000132", 2), "\"00:00:01.50\"");
    }

    #[test]
    fn the_zero_year_and_the_zero_timestamp_are_what_a_query_returns() {
        let mut out = String::new();
        push_timestamp2(&mut out, &mut ParseBuf(&[0, 0, 0, 0]), 0).expect("a TIMESTAMP");
        assert_eq!(out, "null");
        out.clear();
        push_timestamp2(&mut out, &mut ParseBuf(&[0, 0, 0, 1]), 0).expect("a TIMESTAMP");
        assert_eq!(out, "\"1970-01-01 00:00:01+00:00\"");
        let year = Column {
            label: "\"y\":".into(),
            kind: Kind::Year,
            column_type: ColumnType::MYSQL_TYPE_YEAR,
            meta: vec![],
            unsigned: true,
        };
        for (raw, expected) in [(0u8, "0"), (1, "1901"), (255, "2155")] {
            out.clear();
            push_value(&mut out, &year, &mut ParseBuf(&[raw])).expect("a YEAR");
            assert_eq!(out, expected);
        }
    }

    #[test]
    fn the_old_time_keeps_hours_past_255_and_its_sign() {
        let column = Column {
            label: "\"t\":".into(),
            kind: Kind::Time,
            column_type: ColumnType::MYSQL_TYPE_TIME,
            meta: vec![],
            unsigned: false,
        };
        for (value, expected) in [
            (8_385_959i32, "\"838:59:59\""),
            (-3_000_000, "\"-300:00:00\""),
        ] {
            let raw = value.to_le_bytes();
            let mut out = String::new();
            push_value(&mut out, &column, &mut ParseBuf(&raw[..3])).expect("a TIME");
            assert_eq!(out, expected);
        }
    }

    #[test]
    fn a_signed_mediumint_keeps_its_sign() {
        let column = Column {
            label: "\"m\":".into(),
            kind: Kind::Int24,
            column_type: ColumnType::MYSQL_TYPE_INT24,
            meta: vec![],
            unsigned: false,
        };
        for (raw, expected) in [([0, 0, 0x80], "-8388608"), ([0xff, 0xff, 0x7f], "8388607")] {
            let mut out = String::new();
            push_value(&mut out, &column, &mut ParseBuf(&raw)).expect("a MEDIUMINT");
            assert_eq!(out, expected);
        }
    }
}
