//! Units from Debezium's Kafka topics: records read partition by partition, released in one
//! order that agrees with every partition's order (``sources/kafka/DESIGN.md``).
//!
//! The driver's planner feeds each partition's records in offset order, partitions in any
//! interleaving; this assembler decodes their metadata (no payloads) and keeps, per partition,
//! which unit each record belongs to, so that a batch that ends at unit ``k`` can end every
//! partition where its records of units ``<= k`` end.
//!
//! Each trigger reads every partition up to a *target*, its end offsets taken before reading
//! (:meth:`KafkaAssembler.set_target`). A unit closes when its closing record is read (a
//! transaction's ``END``, the initial snapshot's ``last`` record, for an incremental-snapshot
//! chunk the ``END`` of the first transaction past its rows' source position, a change without
//! transaction metadata itself) and is released only once every partition has been read up to
//! the target in force then: every record sent before the closing one has been read (records of
//! different partitions become visible in the order they were sent: exactly so with Kafka
//! Connect's exactly-once source support read ``read_committed``; DESIGN.md).
//!
//! Units: Debezium's transactions (in ``END`` order of the one-partition transaction topic,
//! complete when their ``END`` and all their events per ``data_collections`` have been read),
//! the initial snapshot (one unit, before everything), incremental-snapshot chunks (the
//! ``incremental`` rows at one source position, released right before the first transaction
//! that ends past that position) and changes without transaction metadata (each a unit). A
//! unit is released only when no unreleased unit has a record before one of its records in a
//! partition: no key's history is reordered.

use std::collections::VecDeque;

use indexmap::IndexMap;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};

use crate::dialect::SnapshotMark;
use crate::envelope::KnownSchemas;
use crate::event::{parse_record, Change, Marker, Record, Skipped};
use crate::problem::{ErrorKind, Problem};
use crate::schemas::{Noted, SchemaWatch, Sighting};
use crate::text::py_repr_str;

type UnitId = usize;

/// How many transaction ids dropped as repeats are remembered.
const REPEATS_REMEMBERED: usize = 100_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Txn,
    Snapshot,
    Chunk,
    Single,
}

/// Who a record belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// No unit: a tombstone, heartbeat or schema change (skipped).
    Nobody,
    /// A repeat Debezium sent again (dropped).
    Dropped,
    Unit(UnitId),
}

struct Rec {
    offset: i64,
    owner: Owner,
}

struct Part {
    name: String,
    /// The next offset to read.
    next: i64,
    /// Records read since the base, in offset order.
    records: VecDeque<Rec>,
    /// Records before this index are released, dropped or nobody's (a lower bound).
    settled: usize,
}

struct End {
    event_count: i64,
    collections: Option<IndexMap<String, i64, FxBuildHasher>>,
    ts_ms: Option<i64>,
    position: Option<String>,
}

struct Unit {
    kind: Kind,
    key: String,
    count: i64,
    end: Option<End>,
    tables: Vec<(String, i64)>,
    orders: FxHashSet<i64>,
    parts: Vec<usize>,
    first: (usize, i64),
    position: Option<String>,
    max_ts: Option<i64>,
    /// The read target (an index into ``targets``) in force when the unit closed: it is
    /// released once every partition has been read up to it.
    barrier: Option<usize>,
    /// When the record that closed it was sent (its Kafka timestamp, ms): a unit without an
    /// event count waits for a target taken ``settle_ms`` after it.
    closed_ms: Option<i64>,
    order: Option<i64>,
    dropped: bool,
    /// Its tables' schemas where they start or change (records in an envelope).
    schemas: Noted,
}

impl Unit {
    fn new(kind: Kind, key: String, first: (usize, i64)) -> Self {
        Unit {
            kind,
            key,
            count: 0,
            end: None,
            tables: Vec::new(),
            orders: FxHashSet::default(),
            parts: Vec::new(),
            first,
            position: None,
            max_ts: None,
            barrier: None,
            closed_ms: None,
            order: None,
            dropped: false,
            schemas: Noted::new(),
        }
    }

    fn settled(&self) -> bool {
        self.order.is_some() || self.dropped
    }
}

/// A released unit, as a batch plans it.
struct Planned {
    id: UnitId,
    order: i64,
    size: i64,
    /// What was delivered once it is (the furthest source position).
    high: Option<String>,
    /// Where a table's schema differs from its previous released change's.
    schemas: Vec<Sighting>,
}

/// Assembles units from the records of Kafka partitions (driver, per query run).
///
/// Parameters (Python): ``first_order``, the order of the next unit released; ``high``, the
/// furthest source position delivered before (Debezium's repeats at or before it are dropped);
/// ``snapshot_delivered``, whether an initial snapshot was delivered before; ``settle_ms`` (see
/// the field); ``transactions``, False to read without Debezium's transaction metadata
/// (``transactionTopic=none``): every streamed change is then its own unit, its record's
/// ``transaction`` block ignored.
#[pyclass(module = "spark_ckpt.sources.debezium_format._native")]
pub struct KafkaAssembler {
    parts: Vec<Part>,
    units: Vec<Unit>,
    /// Open transactions by id (their unit).
    txns: FxHashMap<String, UnitId>,
    /// Transactions whose ``END`` was read, in that order, not yet released.
    ended: VecDeque<UnitId>,
    snapshot: Option<UnitId>,
    /// Open chunks by their rows' source position, in the order first read.
    chunks: IndexMap<String, UnitId, FxBuildHasher>,
    /// Changes without transaction metadata, not yet released, in read order.
    singles: VecDeque<UnitId>,
    planned: Vec<Planned>,
    /// Transactions dropped as Debezium's repeats (their events read later are dropped too).
    repeated: FxHashSet<String>,
    repeated_order: VecDeque<String>,
    next_order: i64,
    high: Option<String>,
    snapshot_delivered: bool,
    /// The partitions' end offsets each trigger reads up to (:meth:`set_target`), in order,
    /// with when they were taken (ms).
    targets: Vec<(Vec<i64>, Option<i64>)>,
    /// How long after its closing record was sent a unit without an event count waits for the
    /// partitions' ends (records sent before it may become visible after it in another
    /// partition: the producer sends one batch per partition per request).
    settle_ms: i64,
    /// The delivered snapshot's source position (to tell its late records from a new one).
    snapshot_position: Option<String>,
    /// The timestamp of the record being fed (ms).
    fed_ms: Option<i64>,
    repeats: i64,
    tombstones: i64,
    heartbeats: i64,
    schema_changes: i64,
    /// The envelope schemas of the records fed so far (skipped without parsing).
    known: KnownSchemas,
    /// Each table's schema as last read and as last released.
    watch: SchemaWatch,
    /// Whether units follow Debezium's transaction metadata. False (``transactionTopic=none``):
    /// no ``END`` is ever read, so a change's ``transaction`` block is ignored (the change is a
    /// unit of its own), transaction markers are skipped, and incremental-snapshot rows, whose
    /// chunk only a transaction's ``END`` closes, are each a unit too. The initial snapshot
    /// stays one unit (its ``last`` record closes it).
    transactions: bool,
}

type Failure = (Problem, usize, i64);

/// :meth:`KafkaAssembler.feed_messages`' answer: records fed, indexes of the messages with an
/// error, and each fed partition's next offset.
type FedBlock = (usize, Vec<usize>, Vec<(usize, i64)>);

fn fail(kind: ErrorKind, part: usize, offset: i64, problem: String, expected: &str) -> Failure {
    (
        Problem::new(kind, problem, expected.to_owned()),
        part,
        offset,
    )
}

fn further(current: &mut Option<String>, candidate: Option<String>) {
    if let Some(candidate) = candidate {
        if current.as_ref().is_none_or(|c| candidate > *c) {
            *current = Some(candidate);
        }
    }
}

mod messages;
mod records;
mod release;
mod rows;

pub use rows::KafkaRows;

/// A planned unit as Python sees it: ``(order, kind, key, size, commit_ts_ms, high)``.
type UnitTuple = (i64, &'static str, String, i64, Option<i64>, Option<String>);

/// A segment of a partition's offsets as an executor reads it: ``(from, to, what, order,
/// first_index, size)``: ``what`` is ``"txns"`` (each change's transaction by id, its index
/// its ``total_order - 1``), ``"block"`` (the changes of unit ``order`` from ``first_index``
/// on) or ``"drop"``.
type Segment = (i64, i64, &'static str, i64, i64, i64);

#[pymethods]
impl KafkaAssembler {
    #[new]
    #[pyo3(signature = (
        first_order = 0, high = None, snapshot_delivered = false, settle_ms = 0, transactions = true
    ))]
    fn py_new(
        first_order: i64,
        high: Option<String>,
        snapshot_delivered: bool,
        settle_ms: i64,
        transactions: bool,
    ) -> Self {
        KafkaAssembler {
            parts: Vec::new(),
            units: Vec::new(),
            txns: FxHashMap::default(),
            ended: VecDeque::new(),
            snapshot: None,
            chunks: IndexMap::default(),
            singles: VecDeque::new(),
            planned: Vec::new(),
            repeated: FxHashSet::default(),
            repeated_order: VecDeque::new(),
            next_order: first_order,
            high,
            snapshot_delivered,
            targets: Vec::new(),
            settle_ms,
            snapshot_position: None,
            fed_ms: None,
            repeats: 0,
            tombstones: 0,
            heartbeats: 0,
            schema_changes: 0,
            known: KnownSchemas::default(),
            watch: SchemaWatch::default(),
            transactions,
        }
    }

    /// Register a partition read from offset ``start``; returns its index (driver, once per
    /// partition per run).
    fn add_partition(&mut self, name: String, start: i64) -> usize {
        self.parts.push(Part {
            name,
            next: start,
            records: VecDeque::new(),
            settled: 0,
        });
        self.parts.len() - 1
    }

    /// Feed records of partition ``part`` in offset order: ``offsets[i]`` holds ``values[i]``
    /// (None: a tombstone); ``next`` is the offset to read after them (past any control
    /// records). Driver, once per block of records consumed.
    ///
    /// Raises the typed ``spark_ckpt.errors`` error of the first bad record, naming
    /// ``<topic>/<partition>`` and the offset.
    #[pyo3(signature = (part, offsets, values, next, timestamps = None))]
    fn feed(
        &mut self,
        py: Python<'_>,
        part: usize,
        offsets: Vec<i64>,
        values: Vec<Option<Bound<'_, PyBytes>>>,
        next: i64,
        timestamps: Option<Vec<i64>>,
    ) -> PyResult<()> {
        if part >= self.parts.len()
            || offsets.len() != values.len()
            || timestamps
                .as_ref()
                .is_some_and(|t| t.len() != offsets.len())
        {
            return Err(PyValueError::new_err(
                "feed: unknown partition or mismatched lists",
            ));
        }
        for (i, (offset, value)) in offsets.into_iter().zip(values).enumerate() {
            self.fed_ms = timestamps.as_ref().map(|t| t[i]);
            let data = value.as_ref().map(|b| b.as_bytes());
            if let Err((problem, part, offset)) = self.feed_record(part, offset, data) {
                let name = self.parts[part].name.clone();
                return Err(problem.into_py(py, &name, offset.unsigned_abs()));
            }
        }
        self.fed_ms = None;
        self.parts[part].next = next;
        self.close_chunks();
        self.release_all();
        Ok(())
    }

    /// Feed what ``Consumer.consume()`` returned (confluent-kafka ``Message`` objects), each
    /// partition's records in ``[next, ends[i])`` (driver, once per block consumed). Returns
    /// how many records were fed, the indexes of the messages that carry an error (for the
    /// caller to handle; nothing of theirs is fed), and each fed partition's next offset.
    ///
    /// Raises as :meth:`feed` does.
    fn feed_messages(
        &mut self,
        py: Python<'_>,
        messages: Vec<Bound<'_, PyAny>>,
        ends: Vec<i64>,
        now_ms: i64,
    ) -> PyResult<FedBlock> {
        if ends.len() != self.parts.len() {
            return Err(PyValueError::new_err(
                "feed_messages: one end per partition",
            ));
        }
        let parts = &self.parts;
        let block = messages::sort_block(
            py,
            &messages,
            |name| parts.iter().position(|p| p.name == name),
            |part| (parts[part].next, ends[part]),
            now_ms,
        )?;
        let mut fed = 0;
        let mut nexts = Vec::with_capacity(block.groups.len());
        for group in block.groups {
            let Some(&last) = group.offsets.last() else {
                continue;
            };
            fed += group.offsets.len();
            self.feed(
                py,
                group.part,
                group.offsets,
                group.values,
                last + 1,
                Some(group.sent_ms),
            )?;
            nexts.push((group.part, last + 1));
        }
        Ok((fed, block.failed, nexts))
    }

    /// The partitions' end offsets (registration order) this trigger reads up to, taken before
    /// reading (driver, once per trigger). A unit that closes while it is in force is released
    /// once every partition has been read up to it.
    #[pyo3(signature = (ends, taken_ms = None))]
    fn set_target(&mut self, ends: Vec<i64>, taken_ms: Option<i64>) -> PyResult<()> {
        if ends.len() != self.parts.len() {
            return Err(PyValueError::new_err(
                "set_target: one end offset per partition",
            ));
        }
        self.targets.push((ends, taken_ms));
        self.release_all();
        Ok(())
    }

    /// Sizes of the planned units (released, not yet delivered), in order.
    fn unit_sizes(&self) -> Vec<i64> {
        self.planned.iter().map(|p| p.size).collect()
    }

    /// Planned unit ``index`` (see :data:`UnitTuple`).
    fn unit(&self, index: usize) -> PyResult<UnitTuple> {
        let p = self
            .planned
            .get(index)
            .ok_or_else(|| PyValueError::new_err(format!("no planned unit {index}")))?;
        let unit = &self.units[p.id];
        let kind = match unit.kind {
            Kind::Txn => "transaction",
            Kind::Snapshot => "snapshot",
            Kind::Chunk => "chunk",
            Kind::Single => "change",
        };
        let ts = unit.end.as_ref().and_then(|e| e.ts_ms).or(unit.max_ts);
        Ok((p.order, kind, unit.key.clone(), p.size, ts, p.high.clone()))
    }

    /// The schemas planned unit ``index`` starts or changes, as ``(at, table, schema text,
    /// DDL statements)`` in unit order (``at``: a transaction's ``total_order - 1``): where a
    /// table's schema differs from its previous released change's, and each table's first in
    /// this assembler. No DDL statements: the schema change topic is not ordered with the
    /// tables' topics.
    #[allow(clippy::type_complexity)]
    fn unit_schemas(&self, index: usize) -> PyResult<Vec<(i64, &str, &str, Vec<&str>)>> {
        let p = self
            .planned
            .get(index)
            .ok_or_else(|| PyValueError::new_err(format!("no planned unit {index}")))?;
        Ok(p.schemas
            .iter()
            .map(|(at, table, text, _)| (*at, table.as_str(), &**text, Vec::new()))
            .collect())
    }

    /// The indexes of the planned units with :meth:`unit_schemas`, in order.
    fn schema_units(&self) -> Vec<usize> {
        (self.planned.iter().enumerate())
            .filter(|(_, p)| !p.schemas.is_empty())
            .map(|(i, _)| i)
            .collect()
    }

    /// Where each partition ends for a batch ending with unit ``order``: per partition (in
    /// registration order) the offset after its longest prefix of records of units up to
    /// ``order``, repeats and skipped records.
    fn cut(&mut self, order: i64) -> PyResult<Vec<i64>> {
        self.planned_index(order)?;
        let mut out = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            let mut end = part.next;
            for rec in &part.records {
                let inside = match rec.owner {
                    Owner::Nobody | Owner::Dropped => true,
                    Owner::Unit(id) => self.units[id].order.is_some_and(|o| o <= order),
                };
                if !inside {
                    end = rec.offset;
                    break;
                }
            }
            out.push(end);
        }
        Ok(out)
    }

    /// The segments of ``[start, end)`` of partition ``part`` for a batch of units up to
    /// ``order`` (see :data:`Segment`). Driver, once per Spark partition of a batch.
    fn segments(&self, part: usize, start: i64, end: i64) -> PyResult<Vec<Segment>> {
        let p = self
            .parts
            .get(part)
            .ok_or_else(|| PyValueError::new_err(format!("no partition {part}")))?;
        let mut out: Vec<Segment> = Vec::new();
        // Per block unit, the index of its next change here (its changes in earlier partitions
        // and before ``start`` come first).
        let mut seen: FxHashMap<UnitId, i64> = FxHashMap::default();
        for rec in &p.records {
            if rec.offset >= end {
                break;
            }
            let (what, order, size, unit_id) = match rec.owner {
                Owner::Nobody => ("txns", -1, 0, None),
                Owner::Dropped => ("drop", -1, 0, None),
                Owner::Unit(id) => {
                    let unit = &self.units[id];
                    let order = unit.order.unwrap_or(-1);
                    if unit.kind == Kind::Txn {
                        ("txns", -1, 0, None)
                    } else {
                        ("block", order, unit.count, Some(id))
                    }
                }
            };
            let index = unit_id.map_or(0, |id| {
                let n = seen.entry(id).or_insert_with(|| self.block_base(id, part));
                *n += 1;
                *n - 1
            });
            if rec.offset < start {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.2 == what && last.3 == order && last.1 == rec.offset => {
                    last.1 = rec.offset + 1;
                }
                _ => out.push((rec.offset, rec.offset + 1, what, order, index, size)),
            }
        }
        Ok(out)
    }

    /// Drop the first ``count`` planned units (a batch delivered them), and the records of
    /// every partition up to ``ends`` (the batch's end offsets).
    fn advance(&mut self, count: usize, ends: Vec<i64>) -> PyResult<()> {
        if count > self.planned.len() || ends.len() != self.parts.len() {
            return Err(PyValueError::new_err(
                "advance: bad unit count or end offsets",
            ));
        }
        self.planned.drain(..count);
        for (part, end) in self.parts.iter_mut().zip(ends) {
            while part.records.front().is_some_and(|r| r.offset < end) {
                part.records.pop_front();
                part.settled = part.settled.saturating_sub(1);
            }
        }
        Ok(())
    }

    /// Whether units follow Debezium's transaction metadata (False: ``transactionTopic=none``).
    #[getter]
    fn transactions(&self) -> bool {
        self.transactions
    }

    /// ``order`` of the next unit released.
    #[getter]
    fn next_order(&self) -> i64 {
        self.next_order
    }

    /// The furthest source position delivered once every planned unit is.
    #[getter]
    fn high(&self) -> Option<String> {
        self.high.clone()
    }

    /// Changes read and not released (held back).
    #[getter]
    fn held_events(&self) -> i64 {
        self.units
            .iter()
            .filter(|u| !u.settled())
            .map(|u| u.count)
            .sum()
    }

    /// Unreleased units holding changes.
    #[getter]
    fn held_units(&self) -> usize {
        self.units
            .iter()
            .filter(|u| !u.settled() && (u.count > 0 || u.end.is_some()))
            .count()
    }

    /// Why units are held back, in words: the unit the others wait for (None when nothing is
    /// held back). Driver, once per trigger.
    fn holdup(&self) -> Option<String> {
        let id = self.held_unit()?;
        let unit = &self.units[id];
        let at = self.first_record(unit);
        let key = py_repr_str(&unit.key);
        Some(match (unit.kind, &unit.end) {
            (Kind::Snapshot, _) => format!(
                "Debezium's initial snapshot is being read ({} row(s) so far, first record {at}): \
                 it is delivered whole once its last record is read and every partition has \
                 been read up to where it ended then",
                unit.count
            ),
            (Kind::Txn, Some(end)) if !self.txn_whole(id) => format!(
                "transaction {key} (first record {at}) has ended but only {} of its {} change \
                 events have been read; {} later-ended transaction(s) wait behind it",
                unit.count,
                end.event_count,
                self.ended.len().saturating_sub(1)
            ),
            (Kind::Txn, None) => format!(
                "transaction {key} (first record {at}) has {} change event(s) but its END has not \
                 been read yet",
                unit.count
            ),
            (Kind::Chunk, _) => format!(
                "a chunk of Debezium's incremental snapshot is being read ({} row(s) so far, \
                 first record {at}): it is delivered whole right before the transaction that \
                 closes its window",
                unit.count
            ),
            _ => format!(
                "{key} (first record {at}) waits until every partition is read up to this \
                 trigger's end, or behind an earlier unit of its partition"
            ),
        })
    }

    /// The unit :meth:`holdup` names, for people and to tell when it changes: the same text on
    /// every trigger while it is the one held (None when nothing is held back).
    fn oldest_held(&self) -> Option<String> {
        let unit = &self.units[self.held_unit()?];
        let kind = match unit.kind {
            Kind::Txn => "transaction",
            Kind::Snapshot => "initial snapshot",
            Kind::Chunk => "incremental snapshot chunk",
            Kind::Single => "change",
        };
        Some(format!(
            "{kind} {} (first record {})",
            py_repr_str(&unit.key),
            self.first_record(unit)
        ))
    }

    /// Records skipped so far, as ``(name, count)``.
    fn skipped(&self) -> Vec<(&'static str, i64)> {
        vec![
            ("repeats", self.repeats),
            ("tombstones", self.tombstones),
            ("heartbeats", self.heartbeats),
            ("schemaChanges", self.schema_changes),
        ]
    }
}

impl KafkaAssembler {
    /// The unit the held-back ones wait for: the snapshot being read, the oldest transaction
    /// that ended incomplete, a chunk being read, or the oldest unit holding changes.
    fn held_unit(&self) -> Option<UnitId> {
        let holding = |id: &UnitId| {
            let u = &self.units[*id];
            !u.settled() && (u.count > 0 || u.end.is_some())
        };
        self.snapshot
            .filter(holding)
            .or_else(|| self.ended.front().copied().filter(|&h| !self.txn_whole(h)))
            .or_else(|| self.chunks.values().copied().find(holding))
            .or_else(|| (0..self.units.len()).find(holding))
    }

    fn first_record(&self, unit: &Unit) -> String {
        let (part, offset) = unit.first;
        format!("{} offset {offset}", self.parts[part].name)
    }
}
