//! The ``postgres`` connector's native half (imported as ``spark_ckpt.sources.postgres._native``):
//! rows read with ``COPY ... TO STDOUT`` rendered to the ``key`` and ``after`` JSON texts of the
//! snapshot's ``op='r'`` rows, and wal2json's row changes decoded to the stream's output columns,
//! both as Arrow arrays and by the same value rules (:mod:`render`).
//!
//! Python rendered about 10 us per row (parse each value, build a dict, ``json.dumps`` twice);
//! the snapshot of a table of millions of rows spent most of its time there, and so did the
//! executors decoding the stream.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::{Array, ArrayRef, StringArray};
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use bridge::{py_repr_str, to_pyarrow};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

mod render;
mod wal2json;

use render::{push_json_string, push_value, unescape_field, Kind};

/// Renders ``COPY`` text rows of one table's columns (in column order) to JSON texts.
///
/// Parameters (Python): ``kinds``, each column's :class:`render::Kind` code; ``names``, the
/// column names; ``key``, the positions of the key's columns in the order the key is written
/// (empty: rows have no key, ``key`` is null).
#[pyclass(module = "spark_ckpt.sources.postgres._native")]
struct RowRenderer {
    kinds: Vec<Kind>,
    /// ``"name":`` of every column, escaped once.
    labels: Vec<String>,
    key: Vec<usize>,
    keys: StringBuilder,
    afters: StringBuilder,
    /// An incomplete last row of the data fed so far.
    pending: Vec<u8>,
    rows: usize,
}

impl RowRenderer {
    fn row(&mut self, line: &[u8], row: &mut String, key: &mut String) -> Result<(), String> {
        let fields: Vec<&[u8]> = line.split(|b| *b == b'\t').collect();
        if fields.len() != self.kinds.len() {
            return Err(format!(
                "a COPY row has {} fields, the table {} columns",
                fields.len(),
                self.kinds.len()
            ));
        }
        row.clear();
        row.push('{');
        let mut texts = Vec::with_capacity(fields.len());
        for (index, raw) in fields.iter().enumerate() {
            let text = unescape_field(raw)?;
            if index > 0 {
                row.push(',');
            }
            row.push_str(&self.labels[index]);
            push_value(row, self.kinds[index], text.as_deref())?;
            texts.push(text);
        }
        row.push('}');
        self.afters.append_value(row.as_str());
        if self.key.is_empty() {
            self.keys.append_null();
        } else {
            key.clear();
            key.push('{');
            for (n, &index) in self.key.iter().enumerate() {
                if n > 0 {
                    key.push(',');
                }
                key.push_str(&self.labels[index]);
                push_value(key, self.kinds[index], texts[index].as_deref())?;
            }
            key.push('}');
            self.keys.append_value(key.as_str());
        }
        self.rows += 1;
        Ok(())
    }
}

#[pymethods]
impl RowRenderer {
    #[new]
    fn new(kinds: Vec<u8>, names: Vec<String>, key: Vec<usize>) -> PyResult<Self> {
        if kinds.len() != names.len() || key.iter().any(|&k| k >= names.len()) {
            return Err(PyValueError::new_err(
                "kinds, names and key do not fit together",
            ));
        }
        let kinds = kinds
            .into_iter()
            .map(|code| {
                Kind::from_code(code).ok_or_else(|| PyValueError::new_err(format!("kind {code}")))
            })
            .collect::<PyResult<Vec<Kind>>>()?;
        let labels = names
            .iter()
            .map(|name| {
                let mut label = String::new();
                push_json_string(&mut label, name);
                label.push(':');
                label
            })
            .collect();
        Ok(RowRenderer {
            kinds,
            labels,
            key,
            keys: StringBuilder::new(),
            afters: StringBuilder::new(),
            pending: Vec::new(),
            rows: 0,
        })
    }

    /// Render the whole rows of ``data`` (``COPY`` text output, rows ending in a newline); an
    /// incomplete last row waits for the rest. Executors (chunks) or the snapshot's reader
    /// thread, per block of rows read.
    fn feed(&mut self, data: &[u8]) -> PyResult<()> {
        let mut buffer = std::mem::take(&mut self.pending);
        let input: &[u8] = if buffer.is_empty() {
            data
        } else {
            buffer.extend_from_slice(data);
            &buffer
        };
        let mut row = String::new();
        let mut key = String::new();
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', input) {
            self.row(&input[start..end], &mut row, &mut key)
                .map_err(PyValueError::new_err)?;
            start = end + 1;
        }
        self.pending = input[start..].to_vec();
        Ok(())
    }

    /// Rows rendered since the last call.
    #[getter]
    fn rows(&self) -> usize {
        self.rows
    }

    /// ``(keys, afters)`` of the rows rendered since the last call, as ``pyarrow.StringArray``
    /// (``keys`` null for a table without a key); the renderer starts over empty.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        if !self.pending.is_empty() {
            return Err(PyValueError::new_err("COPY data ended inside a row"));
        }
        self.rows = 0;
        let keys: ArrayRef = Arc::new(self.keys.finish());
        let afters: ArrayRef = Arc::new(self.afters.finish());
        Ok((
            to_pyarrow(py, keys.as_ref())?,
            to_pyarrow(py, afters.as_ref())?,
        ))
    }
}

/// A ``pyarrow.StringArray`` taken through the Arrow C data interface (no copy).
fn from_pyarrow(array: &Bound<'_, PyAny>) -> PyResult<StringArray> {
    let mut ffi_array = FFI_ArrowArray::empty();
    let mut ffi_schema = FFI_ArrowSchema::empty();
    array.call_method1(
        "_export_to_c",
        (
            std::ptr::addr_of_mut!(ffi_array) as usize,
            std::ptr::addr_of_mut!(ffi_schema) as usize,
        ),
    )?;
    // SAFETY: pyarrow has just filled both structures with a valid exported array.
    let data = unsafe { arrow_array::ffi::from_ffi(ffi_array, &ffi_schema) }
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    if data.data_type() != &arrow_schema::DataType::Utf8 {
        return Err(PyValueError::new_err(format!(
            "wal2json changes must be a string array, not {}",
            data.data_type()
        )));
    }
    Ok(StringArray::from(data))
}

type Columns<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
);

/// wal2json row changes (a ``pyarrow.StringArray``) -> the ``(table, op, key, before, after)``
/// string arrays of the output schema. Executors, once per chunk of changes.
///
/// Raises ``spark_ckpt.errors.ChangeDecodeError`` for the first row that is not a row change,
/// naming it.
#[pyfunction]
fn decode_wal2json<'py>(py: Python<'py>, texts: &Bound<'py, PyAny>) -> PyResult<Columns<'py>> {
    let texts = from_pyarrow(texts)?;
    let decoded = py.detach(|| -> Result<[ArrayRef; 5], (usize, String)> {
        let capacity = texts.len();
        let mut table = StringBuilder::with_capacity(capacity, 16 * capacity);
        let mut op = StringBuilder::with_capacity(capacity, capacity);
        let mut key = StringBuilder::with_capacity(capacity, 16 * capacity);
        let mut before = StringBuilder::with_capacity(capacity, 0);
        let mut after = StringBuilder::with_capacity(capacity, texts.value_data().len());
        for index in 0..texts.len() {
            if texts.is_null(index) {
                return Err((index, "a null change".to_string()));
            }
            let change = wal2json::decode(texts.value(index)).map_err(|e| (index, e))?;
            table.append_value(&change.table);
            op.append_value(change.op);
            key.append_option(change.key);
            before.append_option(change.before);
            after.append_option(change.after);
        }
        Ok([
            Arc::new(table.finish()),
            Arc::new(op.finish()),
            Arc::new(key.finish()),
            Arc::new(before.finish()),
            Arc::new(after.finish()),
        ])
    });
    match decoded {
        Ok([table, op, key, before, after]) => Ok((
            to_pyarrow(py, table.as_ref())?,
            to_pyarrow(py, op.as_ref())?,
            to_pyarrow(py, key.as_ref())?,
            to_pyarrow(py, before.as_ref())?,
            to_pyarrow(py, after.as_ref())?,
        )),
        Err((index, problem)) => {
            let text = if texts.is_null(index) {
                ""
            } else {
                texts.value(index)
            };
            let shown: String = text.chars().take(200).collect();
            let error = py
                .import("spark_ckpt.errors")?
                .getattr("ChangeDecodeError")?
                .call1((format!(
                    "a wal2json row that is not a row change ({problem}): {}",
                    py_repr_str(&shown)
                ),))?;
            Err(PyErr::from_value(error))
        }
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RowRenderer>()?;
    m.add_function(wrap_pyfunction!(decode_wal2json, m)?)?;
    Ok(())
}
