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
use crate::event::{parse_line, Change, Marker, Record, Skipped};
use crate::problem::{ErrorKind, Problem};
use crate::text::py_repr_str;

type UnitId = usize;

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
    /// The id was released before: a repeat when it completes at or before what was delivered.
    reused: bool,
    order: Option<i64>,
    dropped: bool,
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
            reused: false,
            order: None,
            dropped: false,
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
}

/// Assembles units from the records of Kafka partitions (driver, per query run).
///
/// Parameters (Python): ``first_order``, the order of the next unit released; ``high``, the
/// furthest source position delivered before (Debezium's repeats at or before it are dropped);
/// ``snapshot_delivered``, whether an initial snapshot was delivered before.
#[pyclass(module = "spark_ckpt.sources.debezium._native")]
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
    released_ids: FxHashSet<String>,
    next_order: i64,
    high: Option<String>,
    snapshot_delivered: bool,
    /// The partitions' end offsets each trigger reads up to (:meth:`set_target`), in order.
    targets: Vec<Vec<i64>>,
    repeats: i64,
    tombstones: i64,
    heartbeats: i64,
    schema_changes: i64,
}

type Failure = (Problem, usize, i64);

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

impl KafkaAssembler {
    fn new_unit(&mut self, unit: Unit) -> UnitId {
        self.units.push(unit);
        self.units.len() - 1
    }

    /// Record that ``id`` has a record at ``offset`` of partition ``part``.
    fn own(&mut self, part: usize, offset: i64, id: UnitId) {
        self.parts[part].records.push_back(Rec {
            offset,
            owner: Owner::Unit(id),
        });
        let unit = &mut self.units[id];
        if !unit.parts.contains(&part) {
            unit.parts.push(part);
        }
    }

    fn nobody(&mut self, part: usize, offset: i64, owner: Owner) {
        self.parts[part].records.push_back(Rec { offset, owner });
    }

    fn feed_record(
        &mut self,
        part: usize,
        offset: i64,
        value: Option<&[u8]>,
    ) -> Result<(), Failure> {
        let Some(data) = value else {
            self.tombstones += 1;
            self.nobody(part, offset, Owner::Nobody);
            return Ok(());
        };
        let record = parse_line(data, false).map_err(|p| (p, part, offset))?;
        match record {
            Record::Skip(kind) => {
                match kind {
                    Skipped::Tombstone => self.tombstones += 1,
                    Skipped::Heartbeat => self.heartbeats += 1,
                    Skipped::SchemaChange => self.schema_changes += 1,
                }
                self.nobody(part, offset, Owner::Nobody);
            }
            Record::Marker(marker) => self.marker(part, offset, marker)?,
            Record::Change(change) => match change.txn_id.as_deref() {
                Some(_) => self.txn_change(part, offset, change)?,
                None if change.snapshot.in_initial() => self.snapshot_row(part, offset, change)?,
                None if change.snapshot == SnapshotMark::Incremental => {
                    self.chunk_row(part, offset, change)
                }
                None => {
                    let key = format!("{}:{offset}", self.parts[part].name);
                    let id = self.new_unit(Unit::new(Kind::Single, key, (part, offset)));
                    self.count(id, &change);
                    self.units[id].end = Some(End {
                        event_count: 1,
                        collections: None,
                        ts_ms: None,
                        position: None,
                    });
                    self.units[id].barrier = self.targets.len().checked_sub(1);
                    self.own(part, offset, id);
                    self.singles.push_back(id);
                }
            },
        }
        Ok(())
    }

    fn count(&mut self, id: UnitId, change: &Change<'_>) {
        let unit = &mut self.units[id];
        unit.count += 1;
        match unit
            .tables
            .iter_mut()
            .find(|(name, _)| change.table.is(name))
        {
            Some(entry) => entry.1 += 1,
            None => unit.tables.push((change.table.qualified(), 1)),
        }
        if let Some(ts) = change.ts_ms {
            if unit.max_ts.is_none_or(|m| ts > m) {
                unit.max_ts = Some(ts);
            }
        }
        further(&mut unit.position, change.position.clone());
    }

    fn txn_unit(&mut self, txn_id: &str, first: (usize, i64)) -> UnitId {
        if let Some(&id) = self.txns.get(txn_id) {
            return id;
        }
        let mut unit = Unit::new(Kind::Txn, txn_id.to_owned(), first);
        unit.reused = self.released_ids.contains(txn_id);
        let id = self.new_unit(unit);
        self.txns.insert(txn_id.to_owned(), id);
        id
    }

    fn marker(&mut self, part: usize, offset: i64, marker: Marker<'_>) -> Result<(), Failure> {
        let id = self.txn_unit(&marker.txn_id, (part, offset));
        self.own(part, offset, id);
        if !marker.end {
            return Ok(());
        }
        let quoted = py_repr_str(&marker.txn_id);
        let unit = &mut self.units[id];
        if unit.end.is_some() {
            return Err(fail(
                ErrorKind::DuplicateTransaction,
                part,
                offset,
                format!("a second END of transaction {quoted}"),
                "one BEGIN and one END per transaction id",
            ));
        }
        if unit.count > marker.event_count {
            return Err(fail(
                ErrorKind::EventCountMismatch,
                part,
                offset,
                format!(
                    "END of transaction {quoted} says event_count={} but {} of its change \
                     events were already read",
                    marker.event_count, unit.count
                ),
                "event_count to equal the number of change events of the transaction",
            ));
        }
        unit.end = Some(End {
            event_count: marker.event_count,
            collections: marker.collections,
            ts_ms: marker.ts_ms,
            position: marker.position.clone(),
        });
        further(&mut unit.position, marker.position);
        unit.barrier = self.targets.len().checked_sub(1);
        self.ended.push_back(id);
        Ok(())
    }

    fn txn_change(&mut self, part: usize, offset: i64, change: Change<'_>) -> Result<(), Failure> {
        let txn_id = change
            .txn_id
            .as_deref()
            .expect("a transaction change")
            .to_owned();
        let id = self.txn_unit(&txn_id, (part, offset));
        if let Some(order) = change.total_order {
            if self.units[id].orders.contains(&order) {
                // Debezium sending the event again after a restart inside the transaction.
                self.repeats += 1;
                self.nobody(part, offset, Owner::Dropped);
                return Ok(());
            }
            self.units[id].orders.insert(order);
        }
        if let Some(end) = &self.units[id].end {
            if self.units[id].count + 1 > end.event_count {
                return Err(fail(
                    ErrorKind::EventCountMismatch,
                    part,
                    offset,
                    format!(
                        "change event {} of transaction {} exceeds the event_count={} of its END",
                        self.units[id].count + 1,
                        py_repr_str(&txn_id),
                        end.event_count
                    ),
                    "event_count to equal the number of change events of the transaction",
                ));
            }
        }
        self.count(id, &change);
        self.own(part, offset, id);
        Ok(())
    }

    /// A record of Debezium's initial snapshot. Its ``first`` mark is in one partition only, so
    /// an attempt is told by its rows' source position (the snapshot's, the same on every row):
    /// rows at a later position are Debezium's new attempt (it starts an unfinished snapshot
    /// over), and what was read of the older one is dropped; rows at an earlier position are
    /// the older attempt's, read late, and dropped.
    fn snapshot_row(
        &mut self,
        part: usize,
        offset: i64,
        change: Change<'_>,
    ) -> Result<(), Failure> {
        if let Some(open) = self.snapshot.filter(|&id| !self.units[id].settled()) {
            let current = self.units[open].position.clone();
            match (&change.position, &current) {
                (Some(row), Some(attempt)) if row > attempt => {
                    self.repeats += self.units[open].count;
                    self.drop_unit(open);
                    self.snapshot = None;
                }
                (Some(row), Some(attempt)) if row < attempt => {
                    self.repeats += 1;
                    self.nobody(part, offset, Owner::Dropped);
                    return Ok(());
                }
                _ => {}
            }
        }
        let id = match self.snapshot {
            Some(id) if !self.units[id].settled() => id,
            _ => {
                if self.snapshot_delivered {
                    return Err(fail(
                        ErrorKind::RepeatedSnapshot,
                        part,
                        offset,
                        "Debezium wrote its initial snapshot again after the first one was \
                         delivered: its offsets were lost or reset. Delivered now, it would bring \
                         back rows deleted or changed since the first snapshot"
                            .to_owned(),
                        "one initial snapshot per topic set: restore Kafka Connect's offsets for \
                         the connector, or start over with a new checkpointLocation (and an \
                         empty table)",
                    ));
                }
                let unit = Unit::new(Kind::Snapshot, "snapshot".to_owned(), (part, offset));
                let id = self.new_unit(unit);
                self.snapshot = Some(id);
                id
            }
        };
        self.count(id, &change);
        self.own(part, offset, id);
        if change.snapshot == SnapshotMark::Last {
            let unit = &mut self.units[id];
            unit.end = Some(End {
                event_count: 0, // grows with the rows read later: the barrier completes it
                collections: None,
                ts_ms: None,
                position: None,
            });
            unit.barrier = self.targets.len().checked_sub(1);
        }
        Ok(())
    }

    fn chunk_row(&mut self, part: usize, offset: i64, change: Change<'_>) {
        let key = change.position.clone().unwrap_or_default();
        let id = match self.chunks.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.new_unit(Unit::new(Kind::Chunk, key.clone(), (part, offset)));
                self.chunks.insert(key, id);
                id
            }
        };
        self.count(id, &change);
        // Compared with transactions' END positions, never with the delivered position.
        self.units[id].position = None;
        self.own(part, offset, id);
    }

    fn drop_unit(&mut self, id: UnitId) {
        self.units[id].dropped = true;
        for part in self.units[id].parts.clone() {
            for rec in self.parts[part].records.iter_mut() {
                if rec.owner == Owner::Unit(id) {
                    rec.owner = Owner::Dropped;
                }
            }
        }
    }

    /// Whether every record before ``id``'s in each of its partitions is settled.
    fn clear(&mut self, id: UnitId) -> bool {
        let parts = self.units[id].parts.clone();
        for part in parts {
            let p = &mut self.parts[part];
            while let Some(rec) = p.records.get(p.settled) {
                let settled = match rec.owner {
                    Owner::Nobody | Owner::Dropped => true,
                    Owner::Unit(other) => self.units[other].settled(),
                };
                if !settled {
                    break;
                }
                p.settled += 1;
            }
            match p.records.get(p.settled) {
                Some(Rec {
                    owner: Owner::Unit(first),
                    ..
                }) if *first != id => return false,
                _ => {}
            }
        }
        true
    }

    /// Whether every partition has been read up to the target in force when ``id`` closed:
    /// every record sent before its closing record has been read (records of different
    /// partitions become visible in the order they were sent; see DESIGN.md).
    fn reached(&self, id: UnitId) -> bool {
        self.units[id].barrier.is_some_and(|t| {
            self.targets[t]
                .iter()
                .zip(&self.parts)
                .all(|(&end, part)| part.next >= end)
        })
    }

    fn block_complete(&self, id: UnitId) -> bool {
        self.units[id].end.is_some() && self.reached(id)
    }

    /// Whether a transaction's END and all its events have been read.
    fn txn_whole(&self, id: UnitId) -> bool {
        let unit = &self.units[id];
        let Some(end) = &unit.end else { return false };
        if unit.count != end.event_count {
            return false;
        }
        let Some(expected) = &end.collections else {
            return true;
        };
        unit.tables.iter().all(|(table, n)| {
            expected.iter().any(|(name, count)| {
                count == n
                    && (name == table
                        || name
                            .strip_suffix(table.as_str())
                            .is_some_and(|prefix| prefix.ends_with('.')))
            })
        })
    }

    fn txn_complete(&self, id: UnitId) -> bool {
        self.txn_whole(id) && self.reached(id)
    }

    fn release(&mut self, id: UnitId) {
        let order = self.next_order;
        self.next_order += 1;
        let unit = &mut self.units[id];
        unit.order = Some(order);
        if unit.kind == Kind::Txn {
            self.txns.remove(&unit.key);
            self.released_ids.insert(unit.key.clone());
        }
        if unit.kind == Kind::Snapshot {
            // Its position is the snapshot's, not one streamed changes are compared with.
            self.snapshot_delivered = true;
        } else {
            further(&mut self.high, unit.position.clone());
        }
        self.planned.push(Planned {
            id,
            order,
            size: unit.count,
            high: self.high.clone(),
        });
    }

    /// Release every unit that can be, in order. Driver, after each fed block.
    fn release_all(&mut self) {
        loop {
            let mut progressed = false;
            if let Some(id) = self.snapshot.filter(|&id| !self.units[id].settled()) {
                if self.block_complete(id) && self.clear(id) {
                    self.release(id);
                    progressed = true;
                }
            }
            if let Some(&head) = self.ended.front() {
                if self.txn_complete(head) {
                    let end_position = self.units[head]
                        .end
                        .as_ref()
                        .and_then(|e| e.position.clone());
                    // Chunks emitted before this transaction go first.
                    let before: Vec<UnitId> = self
                        .chunks
                        .iter()
                        .filter(|(key, _)| end_position.as_ref().is_none_or(|p| *key < p))
                        .map(|(_, &id)| id)
                        .collect();
                    let chunks_ready = before
                        .iter()
                        .all(|&c| self.units[c].end.is_some() && self.block_complete(c));
                    if chunks_ready && before.iter().all(|&c| self.clear(c)) {
                        for c in before {
                            let key = self.units[c].key.clone();
                            self.chunks.shift_remove(&key);
                            self.release(c);
                        }
                        if self.clear(head) {
                            self.ended.pop_front();
                            self.settle_transaction(head);
                            progressed = true;
                        }
                    }
                }
            }
            while let Some(&single) = self.singles.front() {
                if !self.reached(single) || !self.clear(single) {
                    break;
                }
                self.singles.pop_front();
                self.release(single);
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
    }

    /// Release a complete transaction at the head, or drop it: an empty one changes nothing,
    /// and one at or before the delivered position is Debezium's repeat.
    fn settle_transaction(&mut self, id: UnitId) {
        let unit = &self.units[id];
        let behind = matches!((&unit.position, &self.high), (Some(p), Some(h)) if p <= h);
        if unit.count == 0 || behind {
            self.repeats += unit.count;
            let key = unit.key.clone();
            self.txns.remove(&key);
            self.released_ids.insert(key);
            self.drop_unit(id);
        } else {
            self.release(id);
        }
    }

    /// The changes of block unit ``id`` in the partitions before ``part`` (its rows there come
    /// first in its event order).
    fn block_base(&self, id: UnitId, part: usize) -> i64 {
        self.parts[..part]
            .iter()
            .map(|p| {
                p.records
                    .iter()
                    .filter(|r| r.owner == Owner::Unit(id))
                    .count() as i64
            })
            .sum()
    }

    /// A chunk's end: the END of a transaction past its rows' position was read.
    fn close_chunks(&mut self) {
        let ended: Vec<Option<String>> = self
            .ended
            .iter()
            .map(|&id| self.units[id].end.as_ref().and_then(|e| e.position.clone()))
            .collect();
        let keys: Vec<(String, UnitId)> =
            self.chunks.iter().map(|(k, &id)| (k.clone(), id)).collect();
        for (key, id) in keys {
            if self.units[id].end.is_none()
                && ended.iter().flatten().any(|position| key < *position)
            {
                let count = self.units[id].count;
                self.units[id].end = Some(End {
                    event_count: count,
                    collections: None,
                    ts_ms: None,
                    position: None,
                });
                self.units[id].barrier = self.targets.len().checked_sub(1);
            }
        }
    }

    fn planned_index(&self, order: i64) -> PyResult<usize> {
        let first = self.planned.first().map_or(self.next_order, |p| p.order);
        usize::try_from(order - first)
            .ok()
            .filter(|&i| i < self.planned.len())
            .ok_or_else(|| PyValueError::new_err(format!("no planned unit with order {order}")))
    }
}

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
    #[pyo3(signature = (first_order = 0, high = None, snapshot_delivered = false))]
    fn py_new(first_order: i64, high: Option<String>, snapshot_delivered: bool) -> Self {
        KafkaAssembler {
            parts: Vec::new(),
            units: Vec::new(),
            txns: FxHashMap::default(),
            ended: VecDeque::new(),
            snapshot: None,
            chunks: IndexMap::default(),
            singles: VecDeque::new(),
            planned: Vec::new(),
            released_ids: FxHashSet::default(),
            next_order: first_order,
            high,
            snapshot_delivered,
            targets: Vec::new(),
            repeats: 0,
            tombstones: 0,
            heartbeats: 0,
            schema_changes: 0,
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
    fn feed(
        &mut self,
        py: Python<'_>,
        part: usize,
        offsets: Vec<i64>,
        values: Vec<Option<Bound<'_, PyBytes>>>,
        next: i64,
    ) -> PyResult<()> {
        if part >= self.parts.len() || offsets.len() != values.len() {
            return Err(PyValueError::new_err(
                "feed: unknown partition or mismatched lists",
            ));
        }
        for (offset, value) in offsets.into_iter().zip(values) {
            let data = value.as_ref().map(|b| b.as_bytes());
            if let Err((problem, part, offset)) = self.feed_record(part, offset, data) {
                let name = self.parts[part].name.clone();
                return Err(problem.into_py(py, &name, offset.unsigned_abs()));
            }
        }
        self.parts[part].next = next;
        self.close_chunks();
        self.release_all();
        Ok(())
    }

    /// The partitions' end offsets (registration order) this trigger reads up to, taken before
    /// reading (driver, once per trigger). A unit that closes while it is in force is released
    /// once every partition has been read up to it.
    fn set_target(&mut self, ends: Vec<i64>) -> PyResult<()> {
        if ends.len() != self.parts.len() {
            return Err(PyValueError::new_err(
                "set_target: one end offset per partition",
            ));
        }
        self.targets.push(ends);
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
    /// held back).
    fn holdup(&self) -> Option<String> {
        let holding = |u: &Unit| !u.settled() && (u.count > 0 || u.end.is_some());
        let at = |u: &Unit| {
            let (part, offset) = u.first;
            format!("{} offset {offset}", self.parts[part].name)
        };
        if let Some(unit) = self
            .snapshot
            .map(|id| &self.units[id])
            .filter(|u| holding(u))
        {
            return Some(format!(
                "Debezium's initial snapshot is being read ({} row(s) so far, first record {}): \
                 it is delivered whole once its last record is read and every partition has \
                 been read up to where it ended then",
                unit.count,
                at(unit)
            ));
        }
        if let Some(&head) = self.ended.front() {
            let unit = &self.units[head];
            let end = unit.end.as_ref().expect("ended");
            if !self.txn_complete(head) {
                return Some(format!(
                    "transaction {} (first record {}) has ended but only {} of its {} change \
                     events have been read; {} later-ended transaction(s) wait behind it",
                    py_repr_str(&unit.key),
                    at(unit),
                    unit.count,
                    end.event_count,
                    self.ended.len() - 1
                ));
            }
        }
        if let Some(chunk) = self
            .chunks
            .values()
            .map(|&id| &self.units[id])
            .find(|u| holding(u))
        {
            return Some(format!(
                "a chunk of Debezium's incremental snapshot is being read ({} row(s) so far, \
                 first record {}): it is delivered whole right before the transaction that \
                 closes its window",
                chunk.count,
                at(chunk)
            ));
        }
        let unit = self.units.iter().find(|u| holding(u))?;
        Some(match unit.kind {
            Kind::Txn if unit.end.is_none() => format!(
                "transaction {} (first record {}) has {} change event(s) but its END has not \
                 been read yet",
                py_repr_str(&unit.key),
                at(unit),
                unit.count
            ),
            _ => format!(
                "{} (first record {}) waits behind an earlier unit of its partition",
                py_repr_str(&unit.key),
                at(unit)
            ),
        })
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
