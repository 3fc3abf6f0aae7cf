//! Parsing one line of a Debezium-format change log.
//!
//! A line is either a change event (``op`` in ``r``, ``c``, ``u``, ``d`` with ``before``,
//! ``after``, ``source``, ``ts_ms`` and an optional ``transaction`` block) or a
//! transaction-metadata event (``status`` ``BEGIN``/``END`` with ``id``, and on ``END``
//! ``event_count`` and ``data_collections``). Lines in Kafka Connect's JSON envelope
//! (``{"schema": ..., "payload": ...}``) are unwrapped. Only the fields the source reads are
//! decoded; the rest of a line is checked to be JSON and skipped.

use std::borrow::Cow;
use std::fmt;

use indexmap::IndexMap;
use rustc_hash::FxBuildHasher;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::dialect::{
    event_position, postgres_position, transaction_key, SnapshotMark, SourcePosition,
};
use crate::envelope::KnownSchemas;
use crate::images::without_unavailable;
use crate::problem::{ErrorKind, Problem};
use crate::text::{
    int_or_none, py_repr, py_repr_raw, py_type_name, string_or_none, truthy_str, value_text,
};

/// What a line that is neither kind of event should have been (the errors' ``Expected``).
pub const CHANGE_SHAPE: &str = "a Debezium change event {\"op\": \"c\", \"before\": ..., \"after\": ..., \
\"source\": {...}, \"transaction\": {\"id\": ..., \"total_order\": ..., \"data_collection_order\": ...}} \
or a transaction event {\"status\": \"BEGIN\"|\"END\", \"id\": ..., \"event_count\": ...}";

/// A transaction-metadata event.
pub struct Marker<'a> {
    pub end: bool,
    /// The transaction it names (:func:`crate::dialect::transaction_key`).
    pub txn_id: Cow<'a, str>,
    pub event_count: i64,
    pub collections: Option<IndexMap<String, i64, FxBuildHasher>>,
    pub ts_ms: Option<i64>,
    /// The transaction's commit position, when the END carries one (PostgreSQL).
    pub position: Option<String>,
}

/// A row change, with its payload as text when the reader keeps it. Strings without escapes
/// are borrowed from the line: planning allocates nothing per line.
pub struct Change<'a> {
    pub txn_id: Option<Cow<'a, str>>,
    pub total_order: Option<i64>,
    pub table: Table<'a>,
    pub op: &'static str,
    pub ts_ms: Option<i64>,
    pub payload: Option<Payload>,
    /// Where the event stands in Debezium's snapshot phase.
    pub snapshot: SnapshotMark,
    /// Its position in the source's log (:func:`crate::dialect::event_position`).
    pub position: Option<String>,
    /// The Kafka Connect schema of a line in the JSON envelope, as written (borrowed from the
    /// line): it changes exactly when the table's columns do, which planning watches.
    pub envelope: Option<&'a str>,
}

/// What a row of the output takes from a change event (executors only).
pub struct Payload {
    pub source_name: Option<String>,
    pub key: Option<String>,
    pub before: Option<String>,
    pub after: Option<String>,
    /// The Kafka Connect schema of a line in the JSON envelope (an object), as text.
    pub schema: Option<String>,
}

pub enum Record<'a> {
    Marker(Marker<'a>),
    Change(Change<'a>),
    /// A record that is no change and no transaction boundary: counted and skipped.
    Skip(Skipped),
}

/// The records Debezium writes besides changes and transaction markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skipped {
    /// A ``null`` value: Kafka's tombstone after a delete (``tombstones.on.delete``), for log
    /// compaction; the delete itself is the change event before it.
    Tombstone,
    /// A heartbeat (``heartbeat.interval.ms``): ``{"ts_ms": ...}``, schema
    /// ``io.debezium.connector.common.Heartbeat``.
    Heartbeat,
    /// A schema change event (MySQL, MariaDB, SQL Server, Oracle, Db2 with
    /// ``include.schema.changes``): ``databaseName``, ``ddl``, ``tableChanges``.
    SchemaChange,
}

/// A change's table: ``namespace.name`` (the ``source`` block's ``schema`` or ``db``, and
/// ``table``), or ``name`` alone without a namespace.
pub struct Table<'a> {
    pub namespace: Option<Cow<'a, str>>,
    pub name: Cow<'a, str>,
}

impl Table<'_> {
    /// Whether ``qualified`` spells this table (no allocation).
    pub fn is(&self, qualified: &str) -> bool {
        match &self.namespace {
            None => qualified == self.name,
            Some(ns) => {
                qualified.len() == ns.len() + 1 + self.name.len()
                    && qualified.starts_with(ns.as_ref())
                    && qualified.as_bytes()[ns.len()] == b'.'
                    && qualified.ends_with(self.name.as_ref())
            }
        }
    }

    /// ``namespace.name`` (the ``table`` column).
    pub fn qualified(&self) -> String {
        match &self.namespace {
            None => self.name.clone().into_owned(),
            Some(ns) => format!("{ns}.{}", self.name),
        }
    }
}

/// The top-level fields the source reads; a later duplicate key wins, as in Python's ``json``.
#[derive(Default)]
struct Fields<'a> {
    schema: Option<&'a RawValue>,
    payload: Option<&'a RawValue>,
    status: Option<&'a RawValue>,
    id: Option<&'a RawValue>,
    event_count: Option<&'a RawValue>,
    data_collections: Option<&'a RawValue>,
    ts_ms: Option<&'a RawValue>,
    op: Option<&'a RawValue>,
    before: Option<&'a RawValue>,
    after: Option<&'a RawValue>,
    key: Option<&'a RawValue>,
    // Decoded in the same pass as the line (it is on every change event).
    source: Option<MaybeObject<SourceFields<'a>>>,
    transaction: Option<&'a RawValue>,
    ddl: Option<&'a RawValue>,
    table_changes: Option<&'a RawValue>,
    /// A transaction marker's commit LSN (PostgreSQL, newer Debezium releases).
    commit_lsn: Option<&'a RawValue>,
}

/// A value read as ``T``'s fields when it is a JSON object, else None (and skipped).
struct MaybeObject<T>(Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MaybeObject<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = MaybeObject<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let fields = T::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(MaybeObject(Some(fields)))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MaybeObject(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(MaybeObject(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(MaybeObject(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(MaybeObject(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(MaybeObject(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(MaybeObject(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(MaybeObject(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The fields read from the ``source`` block.
#[derive(Default)]
struct SourceFields<'a> {
    name: Option<&'a RawValue>,
    table: Option<&'a RawValue>,
    schema: Option<&'a RawValue>,
    db: Option<&'a RawValue>,
    ts_ms: Option<&'a RawValue>,
    snapshot: Option<&'a RawValue>,
    connector: Option<&'a RawValue>,
    lsn: Option<&'a RawValue>,
    sequence: Option<&'a RawValue>,
    file: Option<&'a RawValue>,
    pos: Option<&'a RawValue>,
    row: Option<&'a RawValue>,
    commit_lsn: Option<&'a RawValue>,
    change_lsn: Option<&'a RawValue>,
    event_serial_no: Option<&'a RawValue>,
    commit_scn: Option<&'a RawValue>,
    scn: Option<&'a RawValue>,
    sec: Option<&'a RawValue>,
    ord: Option<&'a RawValue>,
}

impl<'a> SourceFields<'a> {
    fn position_fields(&self) -> SourcePosition<'a> {
        SourcePosition {
            connector: self.connector,
            lsn: self.lsn,
            sequence: self.sequence,
            file: self.file,
            pos: self.pos,
            row: self.row,
            commit_lsn: self.commit_lsn,
            change_lsn: self.change_lsn,
            event_serial_no: self.event_serial_no,
            commit_scn: self.commit_scn,
            scn: self.scn,
            sec: self.sec,
            ord: self.ord,
        }
    }
}

/// The fields read from the ``transaction`` block.
#[derive(Default)]
struct TxnFields<'a> {
    id: Option<&'a RawValue>,
    total_order: Option<&'a RawValue>,
    commit_lsn: Option<&'a RawValue>,
}

/// Field names that need no allocation to match (escaped names are decoded first).
struct Name(u8);

macro_rules! names {
    ($($text:literal => $code:literal),* $(,)?) => {
        impl<'de> Deserialize<'de> for Name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = Name;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a field name")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<Name, E> {
                        Ok(Name(match v { $($text => $code,)* _ => 0 }))
                    }
                }
                d.deserialize_str(V)
            }
        }
    };
}

names! {
    "schema" => 1, "payload" => 2, "status" => 3, "id" => 4, "event_count" => 5,
    "data_collections" => 6, "ts_ms" => 7, "op" => 8, "before" => 9, "after" => 10, "key" => 11,
    "source" => 12, "transaction" => 13, "name" => 14, "table" => 15, "db" => 16,
    "total_order" => 17, "ddl" => 18, "tableChanges" => 19, "snapshot" => 20,
    "connector" => 21, "lsn" => 22, "sequence" => 23, "file" => 24, "pos" => 25, "row" => 26,
    "commit_lsn" => 27, "change_lsn" => 28, "event_serial_no" => 29, "commit_scn" => 30,
    "scn" => 31, "sec" => 32, "ord" => 33,
}

macro_rules! object_visitor {
    ($ty:ident { $($code:literal => $field:ident),* $(,)? }) => {
        impl<'de> Deserialize<'de> for $ty<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $ty<'de>;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a JSON object")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                        let mut out = $ty::default();
                        while let Some(Name(code)) = map.next_key()? {
                            match code {
                                $($code => out.$field = Some(map.next_value()?),)*
                                _ => {
                                    map.next_value::<IgnoredAny>()?;
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}

object_visitor!(Fields {
    1 => schema, 2 => payload, 3 => status, 4 => id, 5 => event_count, 6 => data_collections,
    7 => ts_ms, 8 => op, 9 => before, 10 => after, 11 => key, 12 => source, 13 => transaction,
    18 => ddl, 19 => table_changes, 27 => commit_lsn,
});
object_visitor!(SourceFields {
    14 => name, 15 => table, 1 => schema, 16 => db, 7 => ts_ms, 20 => snapshot,
    21 => connector, 22 => lsn, 23 => sequence, 24 => file, 25 => pos, 26 => row,
    27 => commit_lsn, 28 => change_lsn, 29 => event_serial_no, 30 => commit_scn, 31 => scn,
    32 => sec, 33 => ord,
});
object_visitor!(TxnFields { 4 => id, 17 => total_order, 27 => commit_lsn });

/// The schema name Debezium gives heartbeat records.
const HEARTBEAT_SCHEMA: &str = "io.debezium.connector.common.Heartbeat";

/// The ``name`` of a Kafka Connect schema (the envelope's ``schema``), if it has one.
fn schema_name(schema: &RawValue) -> Option<String> {
    let value: Value = serde_json::from_str(schema.get()).ok()?;
    value.get("name")?.as_str().map(str::to_owned)
}

fn is_object(raw: &RawValue) -> bool {
    raw.get().starts_with('{')
}

/// Parse and check one line. ``keep`` decodes the payload a row needs (executors).
pub fn parse_line(data: &[u8], keep: bool) -> Result<Record<'_>, Problem> {
    parse_record(data, keep, None)
}

/// :func:`parse_line`, skipping envelope schemas ``known`` holds without parsing them (and
/// learning the ones it parses): for a reader of many records with the same few schemas.
pub fn parse_record<'a>(
    data: &'a [u8],
    keep: bool,
    mut known: Option<&mut KnownSchemas>,
) -> Result<Record<'a>, Problem> {
    let text = std::str::from_utf8(data)
        .map_err(|e| Problem::malformed(format!("not valid JSON (not UTF-8 text: {e})")))?;
    if let Some(known) = known.as_deref_mut() {
        if let Some(record) = known_envelope(text, keep, known) {
            return Ok(record);
        }
    }
    let trimmed = text.trim_matches([' ', '\t', '\r', '\n']);
    if trimmed == "null" {
        return Ok(Record::Skip(Skipped::Tombstone));
    }
    if !trimmed.starts_with('{') {
        // Not an object: either not JSON at all or the wrong kind of JSON.
        serde_json::from_str::<IgnoredAny>(text)
            .map_err(|e| Problem::malformed(format!("not valid JSON ({e})")))?;
        return Err(Problem::malformed(format!(
            "a JSON {} is not an event object",
            py_type_name(trimmed)
        )));
    }
    let mut fields: Fields = serde_json::from_str(text)
        .map_err(|e| Problem::malformed(format!("not valid JSON ({e})")))?;
    let mut schema = None;
    let mut envelope = None;
    let mut envelope_text = None;
    if let (Some(payload), Some(envelope_schema)) = (fields.payload, fields.schema) {
        if payload.get() == "null" {
            // Kafka Connect's JSON converter writes a null value with schemas as
            // {"schema": null, "payload": null}: a tombstone.
            return Ok(Record::Skip(Skipped::Tombstone));
        }
        envelope = Some(envelope_schema);
        if is_object(envelope_schema) {
            if let Some(known) = known {
                known.learn(text, envelope_schema.get());
            }
            envelope_text = Some(envelope_schema.get());
            // Only rows keep it (``columnTypes``): planning copies nothing.
            schema = keep.then(|| envelope_schema.get().to_owned());
        }
        if !is_object(payload) {
            return Err(Problem::malformed(format!(
                "a JSON {} is not an event object",
                py_type_name(payload.get())
            )));
        }
        fields = serde_json::from_str(payload.get())
            .map_err(|e| Problem::malformed(format!("not valid JSON ({e})")))?;
    }
    match string_or_none(fields.status).as_deref() {
        Some("BEGIN") => return marker(&fields, false).map(Record::Marker),
        Some("END") => return marker(&fields, true).map(Record::Marker),
        _ => {}
    }
    if fields.op.is_none() {
        if fields.ddl.is_some() || fields.table_changes.is_some() {
            return Ok(Record::Skip(Skipped::SchemaChange));
        }
        let only_ts = fields.ts_ms.is_some()
            && fields.before.is_none()
            && fields.after.is_none()
            && fields.source.is_none()
            && fields.id.is_none();
        // Read only here: a schema is parsed once per line that is no change or marker.
        let heartbeat_schema =
            || envelope.and_then(schema_name).as_deref() == Some(HEARTBEAT_SCHEMA);
        if only_ts || heartbeat_schema() {
            return Ok(Record::Skip(Skipped::Heartbeat));
        }
    }
    change(&fields, keep, schema, envelope_text).map(Record::Change)
}

/// The tables and the DDL statement of a schema change event (MySQL, MariaDB: ``ddl``, and
/// ``tableChanges[].id`` as ``"db"."table"``), read again from its line: there are few.
/// None when the line is not one.
pub fn schema_change_of(data: &[u8]) -> Option<(Vec<String>, String)> {
    let value: Value = serde_json::from_slice(data).ok()?;
    let payload = match value.get("payload") {
        Some(p) if value.get("schema").is_some() => p,
        _ => &value,
    };
    let ddl = payload.get("ddl")?.as_str()?.to_owned();
    let tables = payload
        .get("tableChanges")
        .and_then(Value::as_array)
        .map(|changes| {
            changes
                .iter()
                .filter_map(|c| c.get("id").and_then(Value::as_str))
                .map(|id| id.replace('"', ""))
                .collect()
        })
        .unwrap_or_default();
    Some((tables, ddl))
}

/// A line in the envelope of a schema ``known`` holds, decoded from its payload alone; None
/// when it is not one, or is anything but a marker or a change (the full parse decides then,
/// with the errors it gives).
fn known_envelope<'a>(text: &'a str, keep: bool, known: &mut KnownSchemas) -> Option<Record<'a>> {
    let (schema, payload) = known.split(text)?;
    // Parsing the payload as one whole value checks the rest of the line: with the known
    // schema before it, the line is the JSON the full parse would have accepted.
    let fields: Fields = serde_json::from_str(payload).ok()?;
    match string_or_none(fields.status).as_deref() {
        Some("BEGIN") => return marker(&fields, false).ok().map(Record::Marker),
        Some("END") => return marker(&fields, true).ok().map(Record::Marker),
        _ => {}
    }
    fields.op?;
    let owned = keep.then(|| schema.to_owned());
    change(&fields, keep, owned, Some(schema))
        .ok()
        .map(Record::Change)
}

fn marker<'a>(fields: &Fields<'a>, end: bool) -> Result<Marker<'a>, Problem> {
    let status = if end { "END" } else { "BEGIN" };
    let written = match string_or_none(fields.id) {
        Some(id) if !id.is_empty() => id,
        _ => {
            return Err(Problem::malformed(format!(
                "{status} event without a transaction id (field 'id')"
            )))
        }
    };
    let (txn_id, lsn) = key_of(written);
    let ts_ms = int_or_none(fields.ts_ms);
    if !end {
        return Ok(Marker {
            end,
            txn_id,
            event_count: 0,
            collections: None,
            ts_ms,
            position: None,
        });
    }
    // PostgreSQL's END names the transaction's commit LSN (``txId:lsn``).
    let commit = int_or_none(fields.commit_lsn).and_then(|n| u64::try_from(n).ok());
    let position = commit.or(lsn).map(|c| postgres_position(c, 0));
    let event_count = match int_or_none(fields.event_count) {
        Some(n) if n >= 0 => n,
        _ => {
            return Err(Problem::malformed(format!(
                "END of transaction {} has no valid event_count (got {})",
                crate::text::py_repr_str(&txn_id),
                py_repr_raw(fields.event_count)
            )))
        }
    };
    let collections = match fields.data_collections {
        None => None,
        Some(raw) if raw.get() == "null" => None,
        Some(raw) => Some(collections(raw, &txn_id)?),
    };
    Ok(Marker {
        end,
        txn_id,
        event_count,
        collections,
        ts_ms,
        position,
    })
}

/// The transaction a written id names, and the LSN of PostgreSQL's ``txId:lsn`` form.
fn key_of(written: Cow<'_, str>) -> (Cow<'_, str>, Option<u64>) {
    match written {
        Cow::Borrowed(id) => {
            let (key, lsn) = transaction_key(id);
            (Cow::Borrowed(key), lsn)
        }
        Cow::Owned(id) => {
            let (key, lsn) = transaction_key(&id);
            (Cow::Owned(key.to_owned()), lsn)
        }
    }
}

fn collections(
    raw: &RawValue,
    txn_id: &str,
) -> Result<IndexMap<String, i64, FxBuildHasher>, Problem> {
    let quoted = crate::text::py_repr_str(txn_id);
    let entries: Vec<Value> = match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::Array(entries)) => entries,
        _ => {
            return Err(Problem::malformed(format!(
                "END of transaction {quoted}: data_collections is not a list"
            )))
        }
    };
    let mut out = IndexMap::default();
    for entry in &entries {
        let name = entry.get("data_collection").and_then(Value::as_str);
        let count = entry
            .get("event_count")
            .filter(|v| v.is_i64())
            .and_then(Value::as_i64);
        match (entry.is_object(), name, count) {
            (true, Some(name), Some(count)) => *out.entry(name.to_owned()).or_insert(0) += count,
            _ => {
                return Err(Problem::malformed(format!(
                    "END of transaction {quoted}: data_collections entry {} needs \
                     'data_collection' and 'event_count'",
                    py_repr(entry)
                )))
            }
        }
    }
    Ok(out)
}

fn change<'a>(
    fields: &Fields<'a>,
    keep: bool,
    schema: Option<String>,
    envelope: Option<&'a str>,
) -> Result<Change<'a>, Problem> {
    let Some(op_raw) = fields.op else {
        return Err(Problem::malformed(
            "the object has neither 'op' (change event) nor 'status'".to_owned(),
        ));
    };
    let op = match string_or_none(Some(op_raw)).as_deref() {
        Some("r") => "r",
        Some("c") => "c",
        Some("u") => "u",
        Some("d") => "d",
        _ => {
            return Err(Problem::new(
                ErrorKind::UnknownOperation,
                format!("unknown op {}", py_repr_raw(Some(op_raw))),
                "op to be one of 'r', 'c', 'u', 'd'".to_owned(),
            ))
        }
    };
    let mut txn_id = None;
    let mut total_order = None;
    let mut commit_lsn = None;
    if let Some(raw) = fields.transaction.filter(|r| r.get() != "null") {
        let block: Option<TxnFields> = if is_object(raw) {
            serde_json::from_str(raw.get()).ok()
        } else {
            None
        };
        let id = block
            .as_ref()
            .and_then(|b| string_or_none(b.id))
            .filter(|id| !id.is_empty());
        let (Some(block), Some(id)) = (block, id) else {
            return Err(Problem::malformed(format!(
                "the 'transaction' block {} has no string 'id'",
                py_repr_raw(Some(raw))
            )));
        };
        total_order = int_or_none(block.total_order);
        commit_lsn = int_or_none(block.commit_lsn).and_then(|n| u64::try_from(n).ok());
        if let Some(given) = block.total_order {
            if total_order.is_none_or(|n| n < 1) {
                return Err(Problem::malformed(format!(
                    "transaction.total_order must be an integer >= 1, got {}",
                    py_repr_raw(Some(given))
                )));
            }
        }
        txn_id = Some(key_of(id).0);
    }
    let source: Option<&SourceFields<'a>> = fields.source.as_ref().and_then(|s| s.0.as_ref());
    let Some(table) = source.and_then(table_of) else {
        // Every row change names its table; without one it could not be routed (partitionBy
        // table, mirror tables) and would land nowhere a reader looks.
        return Err(Problem::malformed(
            "the change event names no table (field 'source.table' is missing or empty)".to_owned(),
        ));
    };
    let ts_ms = source
        .and_then(|s| int_or_none(s.ts_ms))
        .or_else(|| int_or_none(fields.ts_ms));
    let payload = keep.then(|| Payload {
        source_name: source
            .and_then(|s| string_or_none(s.name))
            .map(Cow::into_owned),
        key: value_text(fields.key),
        before: value_text(fields.before).map(without_unavailable),
        after: value_text(fields.after).map(without_unavailable),
        schema,
    });
    let snapshot = SnapshotMark::read(source.and_then(|s| s.snapshot));
    let position = source.and_then(|s| event_position(&s.position_fields(), commit_lsn));
    Ok(Change {
        txn_id,
        total_order,
        table,
        op,
        ts_ms,
        payload,
        snapshot,
        position,
        envelope,
    })
}

/// ``schema.table`` (or ``db.table``) from the ``source`` block, read with Python's truthiness
/// as before the decoder was native (an empty or missing ``table``: None).
fn table_of<'a>(source: &SourceFields<'a>) -> Option<Table<'a>> {
    let name = truthy_str(source.table)?;
    let namespace = truthy_str(source.schema).or_else(|| truthy_str(source.db));
    Some(Table { namespace, name })
}
