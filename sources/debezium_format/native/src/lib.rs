//! Debezium's format, native: the line decoder, the transaction assembler and the output rows,
//! for ``spark_ckpt.sources.debezium_format`` (imported there as ``_native``), which the
//! ``debezium-json`` and ``kafka`` connectors share.
//!
//! Python keeps the log's files (read through spark-ckpt's storage layer), positions, offsets
//! and planning; every per-line step runs here, once per line, in the driver's planner and in
//! the executors.

use pyo3::prelude::*;

mod assembler;
mod dialect;
mod envelope;
mod event;
mod images;
mod kafka;
mod plan;
mod problem;
mod rows;
mod schemas;
mod text;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<assembler::Assembler>()?;
    m.add_class::<kafka::KafkaAssembler>()?;
    m.add_class::<kafka::KafkaRows>()?;
    Ok(())
}
