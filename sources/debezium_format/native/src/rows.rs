//! Output rows of released transactions, built column by column as Arrow arrays and handed to
//! pyarrow through the Arrow C data interface (no copy, no Python object per value).

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{Array, ArrayRef, StructArray};
use arrow_schema::{ArrowError, Field, Fields};
use bridge::to_pyarrow;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use rustc_hash::FxHashMap;

use crate::assembler::{Event, Streamed, Transaction};
use crate::images::{key_from_image, key_image};

/// Key columns per table (option ``keyColumns``), for lines without a ``key``.
pub type KeyColumns = FxHashMap<String, Vec<String>>;

/// The rows of one task: which events of which transactions, and the columns built so far.
pub struct Emitted {
    first: (i64, i64),
    last: (i64, i64),
    source: String,
    pub rows: RowBuilder,
}

impl Emitted {
    pub fn new(first: (i64, i64), last: (i64, i64), source: String, rows: RowBuilder) -> Self {
        Emitted {
            first,
            last,
            source,
            rows,
        }
    }

    /// Add the rows ``txn`` contributes to ``(first, last]`` (executors, per transaction).
    /// A streamed transaction's rows were added as its events were read.
    pub fn add(&mut self, txn: &Transaction) {
        if txn.streamed || (txn.order, 0) >= self.last {
            return;
        }
        let skip = if txn.order == self.first.0 {
            self.first.1
        } else {
            0
        };
        let take = if txn.order == self.last.0 {
            self.last.1
        } else {
            txn.size
        };
        let ts_us = txn.commit_ts_ms.map(|ms| ms * 1000);
        for index in skip..take {
            let event = &txn.events[index as usize];
            let at = (txn.order, txn.size, index);
            self.rows.push(event, &txn.txn_id, at, ts_us, &self.source);
        }
    }

    /// Add the row of event ``index`` of a streamed transaction, if ``(first, last]`` holds it
    /// (executors, per event of a transaction the plan said is large).
    pub fn add_streamed(&mut self, txn_id: &str, unit: &Streamed, index: i64, event: &Event) {
        let at = (unit.order, index);
        let skip = if unit.order == self.first.0 {
            self.first.1
        } else {
            0
        };
        let take = if unit.order == self.last.0 {
            self.last.1
        } else {
            unit.size
        };
        if at.0 < self.first.0 || at.0 > self.last.0 || index < skip || index >= take {
            return;
        }
        let ts_us = unit.commit_ts_ms.map(|ms| ms * 1000);
        let row = (unit.order, unit.size, index);
        self.rows.push(event, txn_id, row, ts_us, &self.source);
    }
}

/// Column builders for the output schema (``sources/schema.py``'s ``COLUMNS``).
pub struct RowBuilder {
    source: StringBuilder,
    txn_id: StringBuilder,
    txn_order: Int64Builder,
    txn_size: Int32Builder,
    event_index: Int32Builder,
    commit_ts: TimestampMicrosecondBuilder,
    table: StringBuilder,
    op: StringBuilder,
    key: StringBuilder,
    before: StringBuilder,
    after: StringBuilder,
    schema: Option<StringBuilder>,
    key_columns: KeyColumns,
}

impl RowBuilder {
    pub fn new(column_types: bool, key_columns: KeyColumns) -> Self {
        RowBuilder {
            source: StringBuilder::new(),
            txn_id: StringBuilder::new(),
            txn_order: Int64Builder::new(),
            txn_size: Int32Builder::new(),
            event_index: Int32Builder::new(),
            commit_ts: TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            table: StringBuilder::new(),
            op: StringBuilder::new(),
            key: StringBuilder::new(),
            before: StringBuilder::new(),
            after: StringBuilder::new(),
            schema: column_types.then(StringBuilder::new),
            key_columns,
        }
    }

    pub fn len(&self) -> usize {
        self.txn_order.len()
    }

    /// One row: ``event`` of transaction ``txn_id`` at ``(order, size, index)``.
    pub(crate) fn push(
        &mut self,
        event: &Event,
        txn_id: &str,
        (order, size, index): (i64, i64, i64),
        ts_us: Option<i64>,
        fallback: &str,
    ) {
        let payload = &event.payload;
        self.source
            .append_value(payload.source_name.as_deref().unwrap_or(fallback));
        self.txn_id.append_value(txn_id);
        self.txn_order.append_value(order);
        self.txn_size.append_value(size as i32);
        self.event_index.append_value(index as i32);
        self.commit_ts.append_option(ts_us);
        self.table.append_value(&event.table);
        self.op.append_value(event.op);
        match (&payload.key, self.key_columns.get(&event.table)) {
            (None, Some(columns)) => {
                let image = key_image(
                    event.op,
                    payload.before.as_deref(),
                    payload.after.as_deref(),
                );
                let key = image.and_then(|i| key_from_image(&i, columns));
                self.key.append_option(key);
            }
            (key, _) => self.key.append_option(key.as_deref()),
        }
        self.before.append_option(payload.before.as_deref());
        self.after.append_option(payload.after.as_deref());
        if let Some(schema) = self.schema.as_mut() {
            schema.append_option(payload.schema.as_deref());
        }
    }

    /// The rows as a ``pyarrow.StructArray``; the builders start over empty.
    pub fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut columns: Vec<(&str, ArrayRef)> = vec![
            ("source", Arc::new(self.source.finish())),
            ("txn_id", Arc::new(self.txn_id.finish())),
            ("txn_order", Arc::new(self.txn_order.finish())),
            ("txn_size", Arc::new(self.txn_size.finish())),
            ("event_index", Arc::new(self.event_index.finish())),
            ("commit_ts", Arc::new(self.commit_ts.finish())),
            ("table", Arc::new(self.table.finish())),
            ("op", Arc::new(self.op.finish())),
            ("key", Arc::new(self.key.finish())),
            ("before", Arc::new(self.before.finish())),
            ("after", Arc::new(self.after.finish())),
        ];
        if let Some(schema) = self.schema.as_mut() {
            columns.push(("schema", Arc::new(schema.finish())));
        }
        let fields: Fields = columns
            .iter()
            .map(|(name, array)| Field::new(*name, array.data_type().clone(), true))
            .collect();
        let arrays: Vec<ArrayRef> = columns.into_iter().map(|(_, a)| a).collect();
        let rows = StructArray::try_new(fields, arrays, None).map_err(arrow_error)?;
        to_pyarrow(py, &rows)
    }
}

fn arrow_error(e: ArrowError) -> PyErr {
    PyValueError::new_err(e.to_string())
}
