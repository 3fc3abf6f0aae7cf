//! A rows event's row images rendered to the change store's columns, by the rules of
//! ``sources/mysql/stored_rows.py``: ``before`` and ``after`` as ``json.dumps`` writes the row's
//! values (every column of the table map, in its order), ``key`` the key columns' values of the
//! after image (the before image for a delete), and an update's old key where it differs.
//!
//! A row image (MySQL's ``log_event.cc``, ``Rows_log_event``) is a null bitmap over the columns
//! the event's column bitmap includes, then each of those columns' non-null value.

use mysql_common::binlog::events::{
    DeleteRowsEvent, DeleteRowsEventV1, Event, UpdateRowsEvent, UpdateRowsEventV1, WriteRowsEvent,
    WriteRowsEventV1,
};
use mysql_common::io::ParseBuf;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use crate::columns::{push_value, Column, Rendered};
use crate::text::push_json_string;

/// The parts of a rows event the rendering needs, whichever its version and kind.
pub struct RowsOf {
    table_id: u64,
    op: &'static str,
    before: Option<Vec<bool>>,
    after: Option<Vec<bool>>,
    data: Vec<u8>,
}

/// A column bitmap (``mysql_common``'s bit slice) as one flag per column.
macro_rules! flags {
    ($bits:expr) => {
        Some($bits.iter().map(|bit| *bit).collect::<Vec<bool>>())
    };
}

/// Reads a rows event of type ``$t``: its table, kind, column bitmaps and row data.
macro_rules! rows_of {
    ($event:expr, $t:ty, $op:expr, $before:ident, $after:ident) => {{
        let rows = crate::read!($event, $t)?;
        RowsOf {
            table_id: rows.table_id(),
            op: $op,
            before: image!(rows, $before, columns_before_image),
            after: image!(rows, $after, columns_after_image),
            data: rows.rows_data().to_vec(),
        }
    }};
}

/// An image's column flags where the event has that image (``yes``), else None.
macro_rules! image {
    ($rows:ident, yes, $bitmap:ident) => {
        flags!($rows.$bitmap())
    };
    ($rows:ident, no, $bitmap:ident) => {
        None
    };
}

impl RowsOf {
    pub fn read(event: &Event) -> PyResult<RowsOf> {
        Ok(match event.header().event_type_raw() {
            crate::WRITE_ROWS_V1 => {
                rows_of!(event, WriteRowsEventV1<'_>, "c", no, yes)
            }
            crate::WRITE_ROWS => rows_of!(event, WriteRowsEvent<'_>, "c", no, yes),
            crate::DELETE_ROWS_V1 => {
                rows_of!(event, DeleteRowsEventV1<'_>, "d", yes, no)
            }
            crate::DELETE_ROWS => {
                rows_of!(event, DeleteRowsEvent<'_>, "d", yes, no)
            }
            crate::UPDATE_ROWS_V1 => {
                rows_of!(event, UpdateRowsEventV1<'_>, "u", yes, yes)
            }
            _ => rows_of!(event, UpdateRowsEvent<'_>, "u", yes, yes),
        })
    }

    pub fn table_id(&self) -> u64 {
        self.table_id
    }
}

/// How one described table map's rows are rendered.
pub struct Rendering {
    columns: Vec<Column>,
    /// Each key column's label and its position in the table map (None: not a column of it,
    /// its value is null, as ``image.get(column)`` gives).
    key: Vec<(String, Option<usize>)>,
    types: Py<PyString>,
}

/// One image's rendering: its JSON text, and each column's value text as a range of it.
struct Image {
    text: String,
    values: Vec<Option<(usize, usize)>>,
}

impl Rendering {
    pub fn new(columns: Vec<Column>, key: &[String], types: Py<PyString>) -> Rendering {
        let key = Rendering::key_positions(&columns, key);
        Rendering {
            columns,
            key,
            types,
        }
    }

    /// Each key column's label and its position among ``columns`` (None: not one of them).
    pub fn key_positions(columns: &[Column], key: &[String]) -> Vec<(String, Option<usize>)> {
        key.iter()
            .map(|name| {
                let mut label = String::new();
                push_json_string(&mut label, name);
                label.push(':');
                let position = columns.iter().position(|column| column.label == label);
                (label, position)
            })
            .collect()
    }

    /// The event's rows as the change store's column tuples (driver, per rows event).
    pub fn render<'py>(
        &self,
        py: Python<'py>,
        table: &Py<PyString>,
        rows: &RowsOf,
        decode_text: &dyn Fn(usize, Vec<u8>) -> PyResult<String>,
    ) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let mut buf = ParseBuf(rows.data.as_slice());
        let none = py.None();
        while !buf.is_empty() {
            let before = match &rows.before {
                Some(present) => Some(self.image(present, &mut buf, decode_text)?),
                None => None,
            };
            let after = match &rows.after {
                Some(present) => Some(self.image(present, &mut buf, decode_text)?),
                None => None,
            };
            let keyed = after
                .as_ref()
                .or(before.as_ref())
                .expect("a rows event has an image");
            let key = self.key_text(keyed);
            let old_key = match (&before, &after) {
                (Some(before), Some(_)) => {
                    let old = self.key_text(before);
                    (old != key).then_some(old)
                }
                _ => None,
            };
            let text = |image: &Option<Image>| -> Py<PyAny> {
                match image {
                    Some(image) => PyString::new(py, &image.text).into_any().unbind(),
                    None => none.clone_ref(py),
                }
            };
            let row = PyTuple::new(
                py,
                [
                    table.clone_ref(py).into_any(),
                    PyString::new(py, rows.op).into_any().unbind(),
                    PyString::new(py, &key).into_any().unbind(),
                    text(&before),
                    text(&after),
                    self.types.clone_ref(py).into_any(),
                    match old_key {
                        Some(old) => PyString::new(py, &old).into_any().unbind(),
                        None => none.clone_ref(py),
                    },
                ],
            )?;
            out.append(row)?;
        }
        Ok(out)
    }

    fn key_text(&self, image: &Image) -> String {
        let mut key = String::from("{");
        for (n, (label, position)) in self.key.iter().enumerate() {
            if n > 0 {
                key.push(',');
            }
            key.push_str(label);
            match position.and_then(|p| image.values[p]) {
                Some((from, to)) => key.push_str(&image.text[from..to]),
                None => key.push_str("null"),
            }
        }
        key.push('}');
        key
    }

    fn image<'a>(
        &'a self,
        present: &[bool],
        buf: &mut ParseBuf<'a>,
        decode_text: &dyn Fn(usize, Vec<u8>) -> PyResult<String>,
    ) -> PyResult<Image> {
        let included = present.iter().filter(|p| **p).count();
        let nulls = buf
            .checked_eat(included.div_ceil(8))
            .ok_or_else(|| crate::value_error("a row image ends inside its null bitmap"))?;
        let mut text = String::from("{");
        let mut values = Vec::with_capacity(self.columns.len());
        let mut image_index = 0;
        for (index, column) in self.columns.iter().enumerate() {
            if index > 0 {
                text.push(',');
            }
            text.push_str(&column.label);
            let start = text.len();
            // a column the image leaves out (binlog_row_image=MINIMAL) is null, as in Python
            if present.get(index).copied().unwrap_or(false) {
                let null = nulls[image_index / 8] & (1 << (image_index % 8)) != 0;
                image_index += 1;
                if null {
                    text.push_str("null");
                } else {
                    match push_value(&mut text, column, buf).map_err(crate::value_error)? {
                        Rendered::Done => {}
                        Rendered::Text(raw) => {
                            push_json_string(&mut text, &decode_text(index, raw)?);
                        }
                    }
                }
            } else {
                text.push_str("null");
            }
            values.push(Some((start, text.len())));
        }
        text.push('}');
        Ok(Image { text, values })
    }
}
