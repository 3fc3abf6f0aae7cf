//! JSON text helpers: compacting a value's text, and quoting values in error messages the way
//! Python's ``repr`` does (the messages name values as a Python user reads them).

use std::borrow::Cow;

use serde_json::value::RawValue;
use serde_json::Value;

/// ``raw`` without the whitespace between its tokens: the value's JSON text as written in the
/// log, compact. ``raw`` is valid JSON (serde_json checked it), so bytes inside strings are
/// the only ones to keep as they are; escapes keep the quote that follows them.
pub fn compact(raw: &str) -> String {
    let bytes = raw.as_bytes();
    if !bytes
        .iter()
        .any(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        return raw.to_owned();
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
            out.push(b);
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            out.push(b);
        }
    }
    // Only ASCII whitespace was removed from valid UTF-8.
    String::from_utf8(out).expect("compacting valid JSON keeps it UTF-8")
}

/// The JSON text of a present, non-null value (``None`` for null: it becomes SQL NULL).
pub fn value_text(raw: Option<&RawValue>) -> Option<String> {
    match raw {
        Some(r) if r.get() != "null" => Some(compact(r.get())),
        _ => None,
    }
}

/// Python's ``repr`` of the value a JSON text decodes to (``None``, ``'x'``, ``[1, 2]``).
pub fn py_repr_raw(raw: Option<&RawValue>) -> String {
    match raw {
        None => "None".to_owned(),
        Some(r) => match serde_json::from_str::<Value>(r.get()) {
            Ok(v) => py_repr(&v),
            Err(_) => r.get().to_owned(),
        },
    }
}

/// Python's ``repr`` of a decoded JSON value.
pub fn py_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => py_repr_str(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(py_repr).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", py_repr_str(k), py_repr(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

pub use bridge::py_repr_str;

/// A string shown as Python's ``repr`` shows it, rendered only when a message is formatted.
pub struct Quoted<'a>(pub &'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&py_repr_str(self.0))
    }
}

/// Python's ``type(value).__name__`` for the value a JSON text decodes to.
pub fn py_type_name(raw: &str) -> &'static str {
    match raw.trim_start().as_bytes().first() {
        Some(b'[') => "list",
        Some(b'{') => "dict",
        Some(b'"') => "str",
        Some(b't') | Some(b'f') => "bool",
        Some(b'n') => "NoneType",
        _ if raw.contains(['.', 'e', 'E']) => "float",
        _ => "int",
    }
}

/// Python's truthiness and ``str()`` of a JSON value: None when falsy (``null``, ``false``, 0,
/// ``""``, ``[]``, ``{}``), else the text ``str(value)`` gives.
pub fn truthy_str<'a>(raw: Option<&'a RawValue>) -> Option<Cow<'a, str>> {
    let raw = raw?;
    if raw.get().starts_with('"') {
        return string_or_none(Some(raw)).filter(|s| !s.is_empty());
    }
    let value: Value = serde_json::from_str(raw.get()).ok()?;
    match &value {
        Value::Null | Value::Bool(false) => None,
        Value::Bool(true) => Some("True".into()),
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone().into()),
        Value::Number(n) => {
            let zero = n.as_f64().is_some_and(|f| f == 0.0);
            (!zero).then(|| n.to_string().into())
        }
        Value::Array(a) if a.is_empty() => None,
        Value::Object(o) if o.is_empty() => None,
        other => Some(py_repr(other).into()),
    }
}

/// A JSON integer as Python's ``isinstance(v, int) and not isinstance(v, bool)`` sees it (None
/// for anything else, and for integers beyond 64 bits).
pub fn int_or_none(raw: Option<&RawValue>) -> Option<i64> {
    let text = raw?.get();
    if text.contains(['.', 'e', 'E']) {
        return None;
    }
    text.parse::<i64>().ok()
}

/// A JSON string's value (None for any other JSON value); borrowed when it has no escapes.
pub fn string_or_none<'a>(raw: Option<&'a RawValue>) -> Option<Cow<'a, str>> {
    let text = raw?.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_keeps_strings_and_drops_token_whitespace() {
        assert_eq!(
            compact(r#"{ "a" : "x y\" z" , "b":[1, 2] }"#),
            r#"{"a":"x y\" z","b":[1,2]}"#
        );
        assert_eq!(compact(r#"{"a":"\\"}"#), r#"{"a":"\\"}"#);
        assert_eq!(compact(r#"{"a": "\\", "b": 1}"#), r#"{"a":"\\","b":1}"#);
    }

    #[test]
    fn repr_reads_like_python() {
        let v: Value = serde_json::from_str(r#"{"a": [1, null, true], "b": "it's"}"#).unwrap();
        assert_eq!(py_repr(&v), r#"{'a': [1, None, True], 'b': "it's"}"#);
        assert_eq!(py_type_name("[1]"), "list");
        assert_eq!(py_type_name("1.5"), "float");
    }

    #[test]
    fn ints_are_integers_only() {
        let raw = |t: &str| serde_json::from_str::<Box<RawValue>>(t).unwrap();
        assert_eq!(int_or_none(Some(&raw("7"))), Some(7));
        assert_eq!(int_or_none(Some(&raw("7.0"))), None);
        assert_eq!(int_or_none(Some(&raw("true"))), None);
        assert_eq!(int_or_none(Some(&raw("\"7\""))), None);
    }
}
