//! wal2json ``format-version 2`` row changes (``I``, ``U``, ``D``, ``T``) to the output's
//! ``table``, ``op``, ``key``, ``before`` and ``after`` texts.
//!
//! The rules are ``wal2json.py``'s (``decode_change``: ``json.loads`` keeping number spellings,
//! ``normalize_value`` per column type, then ``json.dumps(..., ensure_ascii=False)``), which the
//! Python reference still implements for the tests to compare against, row for row:
//!
//! - ``numeric``/``decimal`` types: the value as a JSON string, every digit as printed;
//! - a number with a fraction or exponent (or ``-0``), and any number in a ``real``/``double
//!   precision`` column: a float in Python's ``repr`` (the infinities a float cannot hold keep
//!   their text, as a string);
//! - other numbers: copied; strings: re-escaped as Python's ``json.dumps`` escapes them
//!   (``bytea``'s bare hex gets PostgreSQL's ``\x``); booleans and null: copied;
//! - ``key``: the ``pk`` columns' values from the new image (the old one for a delete), in the
//!   order ``pk`` lists them, null for a column the image lacks.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::render::{push_json_string, push_py_float};

#[derive(Deserialize)]
struct Row<'a> {
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(borrow, default)]
    schema: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    table: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    columns: Option<Vec<Item<'a>>>,
    #[serde(borrow, default)]
    identity: Option<Vec<Item<'a>>>,
    #[serde(borrow, default)]
    pk: Option<Vec<Named<'a>>>,
    /// A schema change (action ``S``, written by the connector, not wal2json): the old and new
    /// schemas as JSON text.
    #[serde(borrow, default)]
    before: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    after: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, rename = "type", default)]
    type_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
}

/// Above this many columns an image finds repeated names through a hash instead of a scan.
const WIDE: usize = 16;

/// One decoded change: ``(table, op, key, before, after)``.
pub struct Change {
    pub table: String,
    pub op: &'static str,
    pub key: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// A column image: each column's name and rendered value, in first-seen order (a repeated
/// name keeps its first place and takes the last value, as a Python dict does).
struct Image<'a> {
    pairs: Vec<(Cow<'a, str>, String)>,
}

impl<'a> Image<'a> {
    fn render(items: &[Item<'a>]) -> Result<Image<'a>, String> {
        let mut pairs: Vec<(Cow<'a, str>, String)> = Vec::with_capacity(items.len());
        // PostgreSQL's column names are unique; a hash of them only pays for wide tables.
        let mut places: Option<HashMap<&str, usize>> =
            (items.len() > WIDE).then(|| HashMap::with_capacity(items.len()));
        for item in items {
            let mut value = String::new();
            push_normalized(
                &mut value,
                item.type_name.as_deref().unwrap_or(""),
                item.value,
            )?;
            let name = item.name.as_ref();
            let seen = match places.as_mut() {
                Some(places) => places.get(name).copied(),
                None => pairs.iter().position(|(n, _)| n == name),
            };
            match seen {
                Some(at) => pairs[at].1 = value,
                None => {
                    if let Some(places) = places.as_mut() {
                        places.insert(name, pairs.len());
                    }
                    pairs.push((item.name.clone(), value));
                }
            }
        }
        Ok(Image { pairs })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        let mut out = String::with_capacity(16 * self.pairs.len() + 2);
        out.push('{');
        for (index, (name, value)) in self.pairs.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            push_json_string(&mut out, name);
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        out
    }
}

fn is_numeric_type(type_name: &str) -> bool {
    type_name.starts_with("numeric") || type_name.starts_with("decimal")
}

fn is_float_type(type_name: &str) -> bool {
    type_name == "real" || type_name == "double precision"
}

/// A JSON number Python's ``json.loads`` (with the connector's hooks) keeps as text: a fraction
/// or an exponent, or ``-0`` (whose sign an int would lose).
fn is_number_text(number: &str) -> bool {
    number == "-0" || number.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
}

fn push_float_of(out: &mut String, number: &str) -> Result<(), String> {
    let value: f64 = number
        .parse()
        .map_err(|_| format!("a number wal2json printed, {number:?}, is not one"))?;
    if value.is_finite() {
        push_py_float(out, value);
    } else {
        push_json_string(out, number); // beyond a double: Python keeps the text
    }
    Ok(())
}

/// ``normalize_value(type_name, value)`` followed by ``json.dumps``, appended to ``out``.
fn push_normalized(
    out: &mut String,
    type_name: &str,
    value: Option<&RawValue>,
) -> Result<(), String> {
    let Some(raw) = value else {
        out.push_str("null");
        return Ok(());
    };
    let text = raw.get();
    match text.as_bytes().first() {
        None | Some(b'n') => out.push_str("null"),
        Some(b'"') => {
            let string: Cow<'_, str> =
                serde_json::from_str(text).map_err(|e| format!("a value is not a string: {e}"))?;
            if type_name == "bytea"
                && string
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            {
                let mut prefixed = String::with_capacity(string.len() + 2);
                prefixed.push_str("\\x");
                prefixed.push_str(&string);
                push_json_string(out, &prefixed);
            } else {
                push_json_string(out, &string);
            }
        }
        Some(b't' | b'f') => {
            let truth = text == "true";
            if is_numeric_type(type_name) {
                out.push_str(if truth { "\"True\"" } else { "\"False\"" }); // str(bool)
            } else {
                out.push_str(if truth { "true" } else { "false" });
            }
        }
        Some(b'{' | b'[') => {
            if is_numeric_type(type_name) {
                return Err(format!(
                    "a {type_name} column holds the JSON {text}, not a number"
                ));
            }
            let parsed: Value =
                serde_json::from_str(text).map_err(|e| format!("a value is not JSON: {e}"))?;
            push_loaded(out, &parsed);
        }
        Some(_) => {
            if is_numeric_type(type_name) {
                push_json_string(out, text);
            } else if is_number_text(text) || is_float_type(type_name) {
                push_float_of(out, text)?;
            } else {
                out.push_str(text);
            }
        }
    }
    Ok(())
}

/// A nested JSON value as ``json.dumps(json.loads(text, parse_float=NumberText, ...))`` prints
/// it: numbers kept as text (a fraction, an exponent, ``-0``) come out as JSON strings.
fn push_loaded(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let text = n.to_string();
            if is_number_text(&text) {
                push_json_string(out, &text);
            } else {
                out.push_str(&text);
            }
        }
        Value::String(s) => push_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_loaded(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (index, (key, item)) in map.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_json_string(out, key);
                out.push(':');
                push_loaded(out, item);
            }
            out.push('}');
        }
    }
}

/// Decode one row change (executors, per change).
pub fn decode(text: &str) -> Result<Change, String> {
    let row: Row<'_> = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let (Some(schema), Some(table)) = (&row.schema, &row.table) else {
        return Err("no schema or table".to_string());
    };
    let table = format!("{schema}.{table}");
    let op = match row.action.as_ref() {
        "I" => "c",
        "U" => "u",
        "D" => "d",
        "T" => {
            return Ok(Change {
                table,
                op: "t",
                key: None,
                before: None,
                after: None,
            })
        }
        "S" => {
            return Ok(Change {
                table,
                op: "s",
                key: None,
                before: row.before.map(Cow::into_owned),
                after: row.after.map(Cow::into_owned),
            })
        }
        other => return Err(format!("action {other:?} is not a row change")),
    };
    let after = match (&row.columns, op) {
        (Some(items), "c" | "u") => Some(Image::render(items)?),
        _ => None,
    };
    let before = match (&row.identity, op) {
        (Some(items), "u" | "d") => Some(Image::render(items)?),
        _ => None,
    };
    let names: Vec<&str> = row
        .pk
        .iter()
        .flatten()
        .map(|named| named.name.as_ref())
        .collect();
    let key = match after.as_ref().or(before.as_ref()) {
        Some(image) if !names.is_empty() => {
            let mut out = String::from("{");
            for (index, name) in names.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                push_json_string(&mut out, name);
                out.push(':');
                out.push_str(image.get(name).unwrap_or("null"));
            }
            out.push('}');
            Some(out)
        }
        _ => None,
    };
    Ok(Change {
        table,
        op,
        key,
        before: before.map(|image| image.text()),
        after: after.map(|image| image.text()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_insert_renders_its_image_and_key() {
        let change = decode(
            r#"{"action":"I","xid":1,"schema":"public","table":"t","columns":[{"name":"id","type":"integer","value":7},{"name":"n","type":"numeric(5,2)","value":1.50},{"name":"f","type":"double precision","value":3},{"name":"b","type":"bytea","value":"00ff"},{"name":"s","type":"text","value":"a\u00e9\/"}],"pk":[{"name":"id","type":"integer"}]}"#,
        )
        .unwrap();
        assert_eq!(change.table, "public.t");
        assert_eq!(change.op, "c");
        assert_eq!(change.key.as_deref(), Some(r#"{"id":7}"#));
        assert_eq!(change.before, None);
        assert_eq!(
            change.after.as_deref(),
            Some(r#"{"id":7,"n":"1.50","f":3.0,"b":"\\x00ff","s":"aé/"}"#)
        );
    }

    #[test]
    fn a_delete_keys_on_its_identity_and_a_truncate_has_no_images() {
        let change = decode(
            r#"{"action":"D","schema":"s","table":"t","identity":[{"name":"id","type":"bigint","value":-0}],"pk":[{"name":"id","type":"bigint"},{"name":"gone","type":"int"}]}"#,
        )
        .unwrap();
        assert_eq!(change.key.as_deref(), Some(r#"{"id":-0.0,"gone":null}"#));
        assert_eq!(change.before.as_deref(), Some(r#"{"id":-0.0}"#));
        assert_eq!(change.after, None);
        let truncate = decode(r#"{"action":"T","schema":"s","table":"t"}"#).unwrap();
        assert_eq!((truncate.op, truncate.key), ("t", None));
    }

    #[test]
    fn a_schema_change_row_keeps_its_texts() {
        let change = decode(
            r#"{"action":"S","schema":"s","table":"t","before":"{\"columns\":[]}","after":"{\"key\":[]}"}"#,
        )
        .unwrap();
        assert_eq!((change.table.as_str(), change.op), ("s.t", "s"));
        assert_eq!(change.before.as_deref(), Some(r#"{"columns":[]}"#));
        assert_eq!(change.after.as_deref(), Some(r#"{"key":[]}"#));
        assert_eq!(change.key, None);
    }

    #[test]
    fn rows_that_are_no_change_are_refused() {
        assert!(decode(r#"{"action":"I","schema":"#).is_err());
        assert!(decode(r#"{"action":"B","schema":"s","table":"t"}"#).is_err());
        assert!(decode(r#"{"action":"I"}"#).is_err());
    }
}
