//! Reading confluent-kafka's ``Message`` objects natively: the planner's loop over every record.
//!
//! ``Consumer.consume()`` returns ``Message`` objects whose fields are methods (``error()``,
//! ``topic()``, ``partition()``, ``offset()``, ``value()``, ``timestamp()``; confluent-kafka's
//! ``src/confluent_kafka/src/confluent_kafka.c``). Calling six of them per record from Python
//! bytecode was a sixth of the planner's time; here they are called from Rust, and the records
//! are grouped by partition for :meth:`KafkaAssembler.feed`.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// confluent-kafka's ``TIMESTAMP_NOT_AVAILABLE`` (``timestamp()[0]``).
const TIMESTAMP_NOT_AVAILABLE: i64 = 0;

/// One partition's records of a consumed block, in offset order.
pub(super) struct Group<'py> {
    pub part: usize,
    pub offsets: Vec<i64>,
    pub values: Vec<Option<Bound<'py, PyBytes>>>,
    pub sent_ms: Vec<i64>,
}

/// What a consumed block holds: each partition's records in ``[next, end)`` (partitions in the
/// order first met), and the indexes of the messages that carry an error instead of a record.
pub(super) struct Block<'py> {
    pub groups: Vec<Group<'py>>,
    pub failed: Vec<usize>,
}

/// Sort ``messages`` by partition. ``part_of(name)`` is the index of ``<topic>/<partition>``;
/// ``window(part)`` its ``[next, end)``: records outside it are left out (read before, or past
/// this trigger's target and read again by the next). ``now_ms`` stands in for a missing
/// timestamp.
pub(super) fn sort_block<'py>(
    py: Python<'py>,
    messages: &[Bound<'py, PyAny>],
    part_of: impl Fn(&str) -> Option<usize>,
    window: impl Fn(usize) -> (i64, i64),
    now_ms: i64,
) -> PyResult<Block<'py>> {
    let mut block = Block {
        groups: Vec::new(),
        failed: Vec::new(),
    };
    // Consecutive messages mostly come from one partition: its lookup is reused.
    let mut last: Option<(Bound<'py, PyAny>, i64, usize, usize)> = None;
    for (i, message) in messages.iter().enumerate() {
        if !message.call_method0(intern!(py, "error"))?.is_none() {
            block.failed.push(i);
            continue;
        }
        let topic = message.call_method0(intern!(py, "topic"))?;
        let partition: Option<i64> = message.call_method0(intern!(py, "partition"))?.extract()?;
        let offset: Option<i64> = message.call_method0(intern!(py, "offset"))?.extract()?;
        let (Some(partition), Some(offset)) = (partition, offset) else {
            continue; // not a record (librdkafka's events carry no position)
        };
        if topic.is_none() {
            continue;
        }
        let same = last
            .as_ref()
            .is_some_and(|(t, p, _, _)| *p == partition && t.eq(&topic).unwrap_or(false));
        if !same {
            let name = format!("{}/{partition}", topic.downcast::<PyString>()?.to_str()?);
            let part = part_of(&name).ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "a record of {name}, a partition the planner did not assign"
                ))
            })?;
            let group = match block.groups.iter().position(|g| g.part == part) {
                Some(found) => found,
                None => {
                    block.groups.push(Group {
                        part,
                        offsets: Vec::new(),
                        values: Vec::new(),
                        sent_ms: Vec::new(),
                    });
                    block.groups.len() - 1
                }
            };
            last = Some((topic, partition, part, group));
        }
        let (_, _, part, group) = last.as_ref().expect("set above");
        let (next, end) = window(*part);
        if offset < next || offset >= end {
            continue;
        }
        let value = message.call_method0(intern!(py, "value"))?;
        let value = if value.is_none() {
            None
        } else {
            Some(value.downcast_into::<PyBytes>()?)
        };
        let (kind, stamp): (i64, i64) =
            message.call_method0(intern!(py, "timestamp"))?.extract()?;
        let group = &mut block.groups[*group];
        group.offsets.push(offset);
        group.values.push(value);
        group.sent_ms.push(if kind == TIMESTAMP_NOT_AVAILABLE {
            now_ms
        } else {
            stamp
        });
    }
    Ok(block)
}
