//! The rows of one Kafka offset range, built on an executor from the batch's plan.
//!
//! The driver's :class:`KafkaAssembler` knows which unit each record belongs to; a task gets its
//! range's *segments* (offset runs that are a block unit's changes, transactions' records, or
//! dropped repeats) and the batch's transactions by id, reads the range's records from the
//! broker and turns every change into a row: a transaction's change at index
//! ``total_order - 1``, a block's changes at consecutive indexes from the segment's first.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rustc_hash::FxHashMap;
use serde_json::Value;

use crate::assembler::Event;
use crate::envelope::KnownSchemas;
use crate::event::{parse_record, Record};
use crate::rows::{KeyColumns, RowBuilder};

/// Where a unit stands in the batch: ``(order, size, commit_ts_ms)``.
type Placed = (i64, i64, Option<i64>);

struct Segment {
    from: i64,
    to: i64,
    what: What,
}

enum What {
    Txns,
    Drop,
    /// A block unit's changes: its txn id, place, and the index of the segment's first change.
    Block {
        key: String,
        placed: Placed,
        next: i64,
    },
}

/// Builds the rows of one partition's offset range (executors, once per task).
///
/// Parameters (Python): ``source`` (the ``source`` column when a record names none),
/// ``column_types``, ``key_columns`` (option ``keyColumns``), ``txns`` (the batch's
/// transactions as ``(id, order, size, commit_ts_ms)``), ``blocks`` (the batch's other units as
/// ``(order, key, size, commit_ts_ms)``) and ``segments`` (:meth:`KafkaAssembler.segments` of
/// the range).
#[pyclass(module = "spark_ckpt.sources.debezium_format._native")]
pub struct KafkaRows {
    source: String,
    txns: FxHashMap<String, Placed>,
    segments: Vec<Segment>,
    at: usize,
    rows: RowBuilder,
    /// The envelope schemas of the records fed so far (skipped without parsing).
    known: KnownSchemas,
}

/// A record key as the ``key`` column holds it: Kafka Connect's JSON converter wraps it in
/// ``{"schema": ..., "payload": ...}`` when schemas are on; the payload is the key.
fn key_text(data: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(data).ok()?.trim();
    let key = match serde_json::from_str::<Value>(text).ok()? {
        Value::Object(mut fields) if fields.len() == 2 && fields.contains_key("schema") => {
            fields.remove("payload")?
        }
        other => other,
    };
    (!key.is_null()).then(|| key.to_string())
}

impl KafkaRows {
    fn segment(&mut self, offset: i64) -> Option<&mut Segment> {
        while self.segments.get(self.at).is_some_and(|s| s.to <= offset) {
            self.at += 1;
        }
        self.segments.get_mut(self.at).filter(|s| s.from <= offset)
    }
}

#[pymethods]
impl KafkaRows {
    #[new]
    #[pyo3(signature = (source, column_types, key_columns, txns, blocks, segments))]
    #[allow(clippy::type_complexity)]
    fn new(
        source: String,
        column_types: bool,
        key_columns: Option<KeyColumns>,
        txns: Vec<(String, i64, i64, Option<i64>)>,
        blocks: Vec<(i64, String, i64, Option<i64>)>,
        segments: Vec<(i64, i64, String, i64, i64, i64)>,
    ) -> PyResult<Self> {
        let blocks: FxHashMap<i64, (String, Placed)> = blocks
            .into_iter()
            .map(|(order, key, size, ts)| (order, (key, (order, size, ts))))
            .collect();
        let mut out = Vec::with_capacity(segments.len());
        for (from, to, what, order, first_index, _) in segments {
            let what = match what.as_str() {
                "txns" => What::Txns,
                "drop" => What::Drop,
                "block" => {
                    let (key, placed) = blocks.get(&order).cloned().ok_or_else(|| {
                        PyValueError::new_err(format!("segment of unplanned unit {order}"))
                    })?;
                    What::Block {
                        key,
                        placed,
                        next: first_index,
                    }
                }
                other => return Err(PyValueError::new_err(format!("unknown segment {other}"))),
            };
            out.push(Segment { from, to, what });
        }
        Ok(KafkaRows {
            source,
            txns: txns
                .into_iter()
                .map(|(id, order, size, ts)| (id, (order, size, ts)))
                .collect(),
            segments: out,
            at: 0,
            rows: RowBuilder::new(column_types, key_columns.unwrap_or_default()),
            known: KnownSchemas::default(),
        })
    }

    /// Turn records of the range (in offset order) into rows; ``name`` (``topic/partition``)
    /// names them in errors. Raises the decoder's typed error for a bad record.
    fn feed(
        &mut self,
        py: Python<'_>,
        name: &str,
        offsets: Vec<i64>,
        keys: Vec<Option<Bound<'_, PyBytes>>>,
        values: Vec<Option<Bound<'_, PyBytes>>>,
    ) -> PyResult<()> {
        if offsets.len() != keys.len() || offsets.len() != values.len() {
            return Err(PyValueError::new_err("feed: mismatched lists"));
        }
        for ((offset, key), value) in offsets.into_iter().zip(keys).zip(values) {
            let Some(value) = value else { continue }; // a tombstone
            let record = parse_record(value.as_bytes(), true, Some(&mut self.known))
                .map_err(|p| p.into_py(py, name, offset.unsigned_abs()))?;
            let Record::Change(change) = record else {
                continue; // a transaction marker or a skipped record
            };
            let Some(segment) = self.segment(offset) else {
                continue; // outside the batch's records: not this range's
            };
            let (txn_id, placed, index) = match &mut segment.what {
                What::Drop => continue,
                What::Txns => {
                    let Some(id) = change.txn_id.as_deref() else {
                        continue;
                    };
                    let Some(&placed) = self.txns.get(id) else {
                        continue; // a transaction of no unit of this batch: a repeat
                    };
                    (
                        id.to_owned(),
                        placed,
                        change.total_order.map_or(0, |o| o - 1),
                    )
                }
                What::Block { key, placed, next } => {
                    let index = *next;
                    *next += 1;
                    (key.clone(), *placed, index)
                }
            };
            let (order, size, ts) = placed;
            let mut payload = change.payload.expect("payloads are decoded when kept");
            if payload.key.is_none() {
                payload.key = key.as_ref().and_then(|k| key_text(k.as_bytes()));
            }
            let event = Event {
                total_order: change.total_order,
                table: change.table.qualified(),
                op: change.op,
                payload,
            };
            let ts_us = ts.map(|ms| ms * 1000);
            self.rows
                .push(&event, &txn_id, (order, size, index), ts_us, &self.source);
        }
        Ok(())
    }

    /// The rows built so far as a ``pyarrow.StructArray`` (None when there are none).
    fn take_rows<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if self.rows.len() == 0 {
            return Ok(None);
        }
        self.rows.finish(py).map(Some)
    }
}
