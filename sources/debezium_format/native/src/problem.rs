//! Problems with the log, raised in Python as the typed errors of ``spark_ckpt.errors``.

use pyo3::prelude::*;

use crate::event::CHANGE_SHAPE;

/// Which ``spark_ckpt.errors`` class reports a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Malformed,
    UnknownOperation,
    DuplicateTransaction,
    EventCountMismatch,
    RepeatedSnapshot,
    LateRecord,
}

impl ErrorKind {
    fn class_name(self) -> &'static str {
        match self {
            ErrorKind::Malformed => "MalformedEventError",
            ErrorKind::UnknownOperation => "UnknownOperationError",
            ErrorKind::DuplicateTransaction => "DuplicateTransactionError",
            ErrorKind::EventCountMismatch => "EventCountMismatchError",
            ErrorKind::RepeatedSnapshot => "RepeatedSnapshotError",
            ErrorKind::LateRecord => "LateRecordError",
        }
    }
}

/// What is wrong with a line and what was expected there; the line is added by the caller.
#[derive(Debug)]
pub struct Problem {
    pub kind: ErrorKind,
    pub problem: String,
    pub expected: String,
}

impl Problem {
    pub fn new(kind: ErrorKind, problem: String, expected: String) -> Self {
        Problem {
            kind,
            problem,
            expected,
        }
    }

    /// A line that is not a change or transaction event.
    pub fn malformed(problem: String) -> Self {
        Problem::new(ErrorKind::Malformed, problem, CHANGE_SHAPE.to_owned())
    }

    /// The typed Python error for this problem at ``file``:``line`` (1-based).
    pub fn into_py(self, py: Python<'_>, file: &str, line: u64) -> PyErr {
        let made = py.import("spark_ckpt.errors").and_then(|errors| {
            errors.getattr(self.kind.class_name())?.call1((
                file,
                line,
                self.problem.as_str(),
                self.expected.as_str(),
            ))
        });
        match made {
            Ok(error) => PyErr::from_value(error),
            Err(e) => e,
        }
    }
}
