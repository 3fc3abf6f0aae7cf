//! What the connectors' native modules (``sources/*/native``) share: handing Arrow arrays to
//! pyarrow, and quoting a text the way the connectors' Python messages do.

use arrow_array::Array;
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Hand ``array`` to pyarrow through the Arrow C data interface: pyarrow takes ownership of the
/// buffers (the exported structs are released and dropped here). Once per array built.
pub fn to_pyarrow<'py>(py: Python<'py>, array: &dyn Array) -> PyResult<Bound<'py, PyAny>> {
    let data = array.to_data();
    let mut ffi_array = FFI_ArrowArray::new(&data);
    let mut ffi_schema = FFI_ArrowSchema::try_from(data.data_type())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    py.import("pyarrow")?.getattr("Array")?.call_method1(
        "_import_from_c",
        (
            std::ptr::addr_of_mut!(ffi_array) as usize,
            std::ptr::addr_of_mut!(ffi_schema) as usize,
        ),
    )
}

/// Python's ``repr`` of a string: single quotes unless the text has one and no double quote.
pub fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::py_repr_str;

    #[test]
    fn texts_are_quoted_as_python_repr_quotes_them() {
        assert_eq!(py_repr_str("tx-1"), "'tx-1'");
        assert_eq!(py_repr_str("it's"), "\"it's\"");
        assert_eq!(py_repr_str("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(py_repr_str("\\\n\t\u{1}\u{7f}é"), "'\\\\\\n\\t\\x01\\x7fé'");
    }
}
