//! What a row image needs before it becomes output: values Debezium could not capture taken
//! out, and a key made from the image when the line carries none.
//!
//! **Unavailable values.** PostgreSQL does not log a TOASTed column that an UPDATE left
//! unchanged (with ``REPLICA IDENTITY DEFAULT``); Debezium writes the placeholder
//! ``__debezium_unavailable_value`` in its place (``unavailable.value.placeholder``,
//! ``UnchangedToastedPlaceholder`` in Debezium's PostgreSQL connector), in the column's form
//! (seen in logs Debezium 3.6.1 wrote): the text (text, json, enums, ``bytea`` in hex mode), its
//! bytes in base64 (``bytea`` in bytes mode), an array holding it (text arrays), an array of its
//! bytes as numbers (integer and date arrays), ``[nameUUIDFromBytes(placeholder)]`` (uuid
//! arrays), or ``{placeholder: placeholder}`` (hstore). It is no data: the column is left out of
//! the image, so it reads as "not given" (a mirror keeps the value it has).
//!
//! **Keys.** An object-store sink keeps record values only, so a real log's lines have no
//! ``key``. With the option ``keyColumns`` the key is the image's values of the named columns,
//! in the order named: the ``after`` image, or ``before`` for a delete.

use std::borrow::Cow;

use base64::Engine;
use memchr::memmem;
use serde_json::{Map, Value};

/// Debezium's default ``unavailable.value.placeholder``.
pub const PLACEHOLDER: &str = "__debezium_unavailable_value";

/// Java's ``UUID.nameUUIDFromBytes`` of the placeholder: what a uuid array column holds.
const PLACEHOLDER_UUID: &str = "b68a35a7-17ad-35b3-af2a-ae46edb4545a";

fn is_placeholder(value: &Value) -> bool {
    match value {
        Value::String(s) => {
            s == PLACEHOLDER
                || s == PLACEHOLDER_UUID
                || base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .is_ok_and(|b| b == PLACEHOLDER.as_bytes())
                || hex_is_placeholder(s)
        }
        Value::Array(items) => {
            (items.len() == 1 && is_placeholder(&items[0]))
                || (items.len() == PLACEHOLDER.len()
                    && items
                        .iter()
                        .zip(PLACEHOLDER.bytes())
                        .all(|(item, byte)| item.as_u64() == Some(u64::from(byte))))
        }
        Value::Object(fields) => {
            fields.len() == 1
                && fields
                    .get(PLACEHOLDER)
                    .is_some_and(|v| v.as_str() == Some(PLACEHOLDER))
        }
        _ => false,
    }
}

fn hex_is_placeholder(s: &str) -> bool {
    s.len() == PLACEHOLDER.len() * 2
        && s.as_bytes()
            .chunks(2)
            .zip(PLACEHOLDER.bytes())
            .all(|(pair, byte)| {
                std::str::from_utf8(pair)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    == Some(byte)
            })
}

/// The image without its unavailable values (the text unchanged when it has none).
pub fn without_unavailable(image: String) -> String {
    // The placeholder's text, its base64 ("X19kZWJl...") or its hex ("5f5f6465..."): a cheap
    // look for any of them before anything is parsed.
    let bytes = image.as_bytes();
    let maybe = memmem::find(bytes, PLACEHOLDER.as_bytes()).is_some()
        || memmem::find(bytes, b"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ").is_some()
        || memmem::find(bytes, b"5f5f646562657a69756d5f").is_some()
        || memmem::find(bytes, b"[95,95,100,101,98,101,122,105,117,109,95").is_some()
        || memmem::find(bytes, PLACEHOLDER_UUID.as_bytes()).is_some();
    if !maybe {
        return image;
    }
    let Ok(mut fields) = serde_json::from_str::<Map<String, Value>>(&image) else {
        return image;
    };
    let before = fields.len();
    fields.retain(|_, value| !is_placeholder(value));
    if fields.len() == before {
        return image;
    }
    serde_json::to_string(&Value::Object(fields)).unwrap_or(image)
}

/// The key of a change from its image: ``{"col": value, ...}`` of ``columns``, or None when the
/// image lacks one of them (or is no object).
pub fn key_from_image(image: &str, columns: &[String]) -> Option<String> {
    let fields: Map<String, Value> = serde_json::from_str(image).ok()?;
    let mut key = Map::new();
    for column in columns {
        let value = fields.get(column)?;
        if value.is_null() {
            return None;
        }
        key.insert(column.clone(), value.clone());
    }
    serde_json::to_string(&Value::Object(key)).ok()
}

/// The image a key is read from: ``before`` for a delete, else ``after`` (then ``before``).
pub fn key_image<'a>(
    op: &str,
    before: Option<&'a str>,
    after: Option<&'a str>,
) -> Option<Cow<'a, str>> {
    let image = if op == "d" { before } else { after.or(before) };
    image.map(Cow::Borrowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_values_are_left_out_in_every_form() {
        let image = r#"{"id":1,"doc":"__debezium_unavailable_value","raw":"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==","tags":["__debezium_unavailable_value"],"hexed":"5f5f646562657a69756d5f756e617661696c61626c655f76616c7565","n":2.50}"#;
        assert_eq!(
            without_unavailable(image.to_owned()),
            r#"{"id":1,"n":2.50}"#
        );
        let numbers: Vec<String> = PLACEHOLDER.bytes().map(|b| b.to_string()).collect();
        let arrays = format!(
            r#"{{"id":2,"ints":[{}],"ids":["{PLACEHOLDER_UUID}"],"kv":{{"{PLACEHOLDER}":"{PLACEHOLDER}"}},"ok":[95]}}"#,
            numbers.join(",")
        );
        assert_eq!(without_unavailable(arrays), r#"{"id":2,"ok":[95]}"#);
    }

    #[test]
    fn images_without_the_placeholder_are_kept_as_written() {
        let image = r#"{"id":1,"note":"__debezium_unavailable","n":2.50}"#.to_owned();
        assert_eq!(without_unavailable(image.clone()), image);
    }

    #[test]
    fn keys_follow_the_named_columns_in_order() {
        let image = r#"{"line":3,"order_id":12345678901234567890,"sku":"a"}"#;
        let columns = ["order_id".to_owned(), "line".to_owned()];
        assert_eq!(
            key_from_image(image, &columns).as_deref(),
            Some(r#"{"order_id":12345678901234567890,"line":3}"#)
        );
        assert_eq!(key_from_image(r#"{"line":3}"#, &columns), None);
        assert_eq!(
            key_from_image(r#"{"order_id":null,"line":3}"#, &columns),
            None
        );
    }
}
