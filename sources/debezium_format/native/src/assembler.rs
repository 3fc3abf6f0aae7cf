//! Assembling whole transactions from an interleaved change log.
//!
//! Records of different transactions may interleave, a transaction may span files, and change
//! events may arrive before their ``BEGIN`` or after their ``END``. A transaction is complete
//! when its ``END`` has been read and all of its ``event_count`` change events are present; a
//! change outside any transaction is a transaction of its own, complete at once. Complete
//! transactions are emitted in the order their ``END`` was read: a complete transaction waits
//! behind an earlier-ended one that is still incomplete.
//!
//! The driver's planner feeds lines without keeping payloads and gets release groups back; an
//! executor keeps payloads and turns released transactions straight into output rows.

use std::collections::VecDeque;
use std::sync::Arc;

use indexmap::IndexMap;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rayon::prelude::*;
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};

use crate::dialect::SnapshotMark;
use crate::event::{parse_line, schema_change_of, Change, Marker, Payload, Record, Skipped};
use crate::plan::PlannedUnits;
use crate::problem::{ErrorKind, Problem};
use crate::rows::{Emitted, KeyColumns, RowBuilder};
use crate::schemas::{Noted, SchemaWatch, Sighting};
use crate::text::{py_repr_str, Quoted};

/// How many completed ids are remembered, to catch a transaction id reused soon after.
const RECENT_WINDOW: usize = 100_000;

/// The id of the unit that holds Debezium's initial snapshot (its records carry no
/// transaction): from the ``first`` record to the ``last``, delivered whole.
pub const SNAPSHOT_ID: &str = "snapshot";

/// Planning decodes lines in blocks of this many, in parallel when a block has at least
/// ``PARALLEL_LINES``.
const PARALLEL_BLOCK: usize = 8192;
const PARALLEL_LINES: usize = 1024;

/// A line's place: its file and 1-based line number (for messages).
#[derive(Clone)]
struct Where {
    file: Arc<str>,
    line: u64,
}

/// A point between two lines of the log.
#[derive(Clone)]
pub struct Position {
    pub file: Arc<str>,
    pub byte: u64,
    pub line: u64,
}

struct End {
    event_count: i64,
    collections: Option<IndexMap<String, i64, FxBuildHasher>>,
    ts_ms: Option<i64>,
    at: Where,
}

/// A kept change event: what its row needs.
pub struct Event {
    pub total_order: Option<i64>,
    pub table: String,
    pub op: &'static str,
    pub payload: Payload,
}

struct Open {
    txn_id: String,
    first: Position,
    began: Option<Where>,
    end: Option<End>,
    count: i64,
    /// The total_orders read, each with the table and op of its event (to tell a repeat from
    /// a second, different event under the same number).
    orders: FxHashMap<i64, (u32, &'static str)>,
    /// Set when the plan streams this transaction (executors).
    stream: Option<Streamed>,
    /// The furthest source position among its records (None: its records carry none).
    position: Option<String>,
    /// Where its first record was read when its id had been emitted before (a repeat, or an
    /// id reused: decided when it completes).
    reused: Option<Where>,
    /// Change events per table, in first-seen order (few tables per transaction: a list).
    tables: Vec<(String, i64)>,
    events: Vec<Event>,
    max_ts: Option<i64>,
    /// Its tables' schemas where they start or change (planning, records in an envelope).
    schemas: Noted,
}

impl Open {
    /// Whether it holds anything back: a change read, or an END that waits for changes (a
    /// BEGIN alone holds nothing).
    fn holds(&self) -> bool {
        self.count > 0 || self.end.is_some()
    }

    fn complete(&self) -> bool {
        self.end
            .as_ref()
            .is_some_and(|e| self.count == e.event_count)
    }
}

/// A complete transaction, in END order.
pub struct Transaction {
    pub order: i64,
    pub txn_id: String,
    pub size: i64,
    pub first: Position,
    pub commit_ts_ms: Option<i64>,
    /// In transaction order; empty when the assembler keeps no payloads.
    pub events: Vec<Event>,
    /// What recognises repeats right after it (an offset there records it).
    pub after: Delivered,
    /// Its rows were built as its events were read (:class:`Streamed`): none are kept.
    pub streamed: bool,
    /// Where a table's schema differs from its previous released change's (planning only).
    pub schemas: Vec<Sighting>,
}

/// A large transaction of the planned range, as the plan knows it: its rows are built as its
/// events are read instead of after its END, so a task holds no more of it than a chunk's rows
/// (a huge transaction or an initial snapshot of any size runs in bounded memory).
#[derive(Clone, Debug)]
pub struct Streamed {
    pub order: i64,
    pub size: i64,
    pub commit_ts_ms: Option<i64>,
}

/// What was delivered up to a point, as far as recognising Debezium's repeats needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    /// The furthest source position of a delivered transaction: a transaction at or before
    /// it is a repeat.
    pub high: Option<String>,
    /// Whether an initial snapshot was delivered, and whether changes followed it.
    pub snapshot: Option<SnapshotDelivered>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotDelivered {
    pub position: Option<String>,
    pub streamed_after: bool,
}

/// Records read and skipped: changes dropped as Debezium's repeats, and the records that are no
/// change (:class:`crate::event::Skipped`).
#[derive(Clone, Copy, Default)]
pub struct Skips {
    pub repeats: i64,
    pub tombstones: i64,
    pub heartbeats: i64,
    pub schema_changes: i64,
}

/// Feeds log lines in order and emits complete transactions in END order.
///
/// Parameters (Python): ``first_order``, the order of the next transaction emitted;
/// ``keep_events``, keep payloads and build rows (executors) or only count (driver planning).
#[pyclass(module = "spark_ckpt.sources.debezium_format._native")]
pub struct Assembler {
    next_order: i64,
    keep: bool,
    /// Deliver a repeated initial snapshot instead of refusing it (option ``resnapshot``).
    accept_resnapshot: bool,
    delivered: Delivered,
    skips: Skips,
    /// Large planned transactions to stream, by ``(txn_id, file, byte)`` of their first record.
    streams: FxHashMap<(String, String, u64), Streamed>,
    open: IndexMap<String, Open, FxBuildHasher>,
    ended: VecDeque<String>,
    recent: FxHashSet<String>,
    recent_order: VecDeque<String>,
    emitted: Option<Emitted>,
    planned: PlannedUnits,
    /// The id of the run of incremental-snapshot records being read (see
    /// :meth:`Assembler::close_incremental`), tracked for every reader whatever it consumes.
    incremental: Option<String>,
    /// Each table's schema as last read and as last released (planning).
    watch: SchemaWatch,
}

type Failure = (Problem, Where);

/// One line of a chunk: its text, the bytes it takes (newline included), and whether it is an
/// unterminated tail.
type Line<'a> = (&'a [u8], usize, bool);

/// Where a feed has got to: the position after the last line consumed, the changes released
/// so far, and whether that line was an unterminated tail.
struct Cursor {
    pos: Position,
    released: i64,
    closed_tail: bool,
}

/// A position as Python sees it: ``(file, byte, line)``.
type RawPosition = (String, u64, u64);

/// A streamed transaction as Python gives it (:meth:`Assembler.emit_rows`).
type RawStream = (String, RawPosition, i64, i64, Option<i64>);

/// What was delivered as Python sees it: ``(high, snapshot)``, ``snapshot`` as
/// ``(position, streamed_after)`` or None.
type RawDelivered = (Option<String>, Option<(Option<String>, bool)>);

/// A planned unit as Python sees it (:meth:`Assembler.unit`).
type UnitTuple<'a> = (
    i64,
    &'a str,
    i64,
    RawPosition,
    RawPosition,
    Vec<(&'a str, RawPosition)>,
    RawDelivered,
    Option<i64>,
);

impl Delivered {
    fn raw(&self) -> RawDelivered {
        (
            self.high.clone(),
            self.snapshot
                .as_ref()
                .map(|s| (s.position.clone(), s.streamed_after)),
        )
    }

    fn from_raw(raw: RawDelivered) -> Self {
        Delivered {
            high: raw.0,
            snapshot: raw.1.map(|(position, streamed_after)| SnapshotDelivered {
                position,
                streamed_after,
            }),
        }
    }
}

fn fail(kind: ErrorKind, at: &Where, problem: String, expected: &str) -> Failure {
    (Problem::new(kind, problem, expected.to_owned()), at.clone())
}

impl Assembler {
    fn begin_txn(&mut self, txn_id: &str, pos: &Position, at: &Where) {
        if self.open.contains_key(txn_id) {
            return;
        }
        // A record of an id already emitted: Debezium repeating the transaction after a
        // restart (dropped when it completes at or before the delivered position), or the id
        // reused by another transaction (an error then).
        let reused = (txn_id != SNAPSHOT_ID && self.recent.contains(txn_id)).then(|| at.clone());
        self.open.insert(
            txn_id.to_owned(),
            Open {
                txn_id: txn_id.to_owned(),
                first: pos.clone(),
                began: None,
                end: None,
                count: 0,
                orders: FxHashMap::default(),
                stream: self
                    .streams
                    .get(&(txn_id.to_owned(), pos.file.to_string(), pos.byte))
                    .cloned(),
                position: None,
                reused,
                tables: Vec::new(),
                events: Vec::new(),
                max_ts: None,
                schemas: Noted::new(),
            },
        );
    }

    fn marker(&mut self, marker: Marker<'_>, pos: &Position, at: &Where) -> Result<(), Failure> {
        self.begin_txn(&marker.txn_id, pos, at);
        let quoted = Quoted(&marker.txn_id);
        let txn = self
            .open
            .get_mut(marker.txn_id.as_ref())
            .expect("begun above");
        if !marker.end {
            if let Some(end) = &txn.end {
                return Err(fail(
                    ErrorKind::DuplicateTransaction,
                    at,
                    format!(
                        "a BEGIN of transaction {quoted} after its END at {}:{}",
                        end.at.file, end.at.line
                    ),
                    "one BEGIN and one END per transaction id",
                ));
            }
            // A second BEGIN before the END is Debezium repeating the transaction's start
            // after a restart inside it: its events that follow repeat too (same total_order).
            if txn.began.is_none() {
                txn.began = Some(at.clone());
            }
            return Ok(());
        }
        if let Some(end) = &txn.end {
            return Err(fail(
                ErrorKind::DuplicateTransaction,
                at,
                format!(
                    "a second END of transaction {quoted} (first END at {}:{})",
                    end.at.file, end.at.line
                ),
                "one BEGIN and one END per transaction id",
            ));
        }
        // The END of a transaction at or before the delivered position (Debezium restarts from
        // its last flushed offset, which may lie between a transaction's last event and its END,
        // and writes the END again), or of an id already emitted with no new event read for it
        // (MariaDB's connector writes such an END with event_count 0): a repeat, dropped with
        // what was read of it.
        let behind = matches!(
            (&marker.position, &self.delivered.high),
            (Some(position), Some(high)) if position <= high
        );
        if behind || (txn.reused.is_some() && txn.count == 0) {
            let dropped = self
                .open
                .shift_remove(marker.txn_id.as_ref())
                .expect("begun above");
            self.skips.repeats += dropped.count;
            return Ok(());
        }
        let count = marker.event_count;
        if txn.count > count {
            return Err(fail(
                ErrorKind::EventCountMismatch,
                at,
                format!(
                    "END of transaction {quoted} says event_count={count} but {} of its change \
                     events were already read",
                    txn.count
                ),
                "event_count to equal the number of change events of the transaction",
            ));
        }
        if let Some(order) = txn.orders.keys().copied().filter(|&o| o > count).min() {
            return Err(fail(
                ErrorKind::EventCountMismatch,
                at,
                format!(
                    "END of transaction {quoted} says event_count={count} but an event with \
                     total_order={order} was read"
                ),
                "total_order to run from 1 to event_count",
            ));
        }
        txn.end = Some(End {
            event_count: count,
            collections: marker.collections,
            ts_ms: marker.ts_ms,
            at: at.clone(),
        });
        further(&mut txn.position, marker.position);
        self.ended.push_back(marker.txn_id.into_owned());
        check_collections(txn, at)
    }

    fn change(
        &mut self,
        txn_id: &str,
        event: Change,
        pos: &Position,
        at: &Where,
    ) -> Result<(), Failure> {
        self.begin_txn(txn_id, pos, at);
        let keep = self.keep;
        let txn = self.open.get_mut(txn_id).expect("begun above");
        let quoted = Quoted(txn_id);
        if let (Some(reused), None) = (&txn.reused, &event.position) {
            // Without a source position nothing tells a repeat from a reused id.
            return Err(fail(
                ErrorKind::DuplicateTransaction,
                reused,
                format!("a record of transaction {quoted}, which was already complete and emitted"),
                "each transaction id to be used by one transaction only",
            ));
        }
        if let Some(order) = event.total_order {
            if let Some(&(table_index, op)) = txn.orders.get(&order) {
                let table = &txn.tables[table_index as usize].0;
                if event.table.is(table) && op == event.op {
                    // Debezium repeating the event after a restart inside the transaction.
                    self.skips.repeats += 1;
                    return Ok(());
                }
                return Err(fail(
                    ErrorKind::EventCountMismatch,
                    at,
                    format!(
                        "a second change event with total_order={order} in transaction \
                         {quoted}, on {} ({}) where the first was on {table} ({op})",
                        event.table.qualified(),
                        event.op
                    ),
                    "each total_order to occur once per transaction",
                ));
            }
        }
        if let Some(end) = &txn.end {
            if txn.count + 1 > end.event_count {
                return Err(fail(
                    ErrorKind::EventCountMismatch,
                    at,
                    format!(
                        "change event {} of transaction {quoted} exceeds the event_count={} of \
                         its END at {}:{}",
                        txn.count + 1,
                        end.event_count,
                        end.at.file,
                        end.at.line
                    ),
                    "event_count to equal the number of change events of the transaction",
                ));
            }
        }
        if let Some(order) = event.total_order {
            if let Some(end) = &txn.end {
                if order > end.event_count {
                    return Err(fail(
                        ErrorKind::EventCountMismatch,
                        at,
                        format!(
                            "total_order={order} exceeds the event_count={} of transaction {quoted}",
                            end.event_count
                        ),
                        "total_order to run from 1 to event_count",
                    ));
                }
            }
        }
        let index = txn.count;
        txn.count += 1;
        further(&mut txn.position, event.position);
        let table_index = match txn.tables.iter().position(|(name, _)| event.table.is(name)) {
            Some(i) => {
                txn.tables[i].1 += 1;
                i
            }
            None => {
                txn.tables.push((event.table.qualified(), 1));
                txn.tables.len() - 1
            }
        };
        if let Some(order) = event.total_order {
            txn.orders.insert(order, (table_index as u32, event.op));
        }
        if let (false, Some(text)) = (keep, event.envelope) {
            // Transaction order, as the rows are numbered (see ``Emitted::add``).
            let at = event.total_order.map_or(index, |o| o - 1);
            let table = &txn.tables[table_index].0;
            self.watch
                .note(&mut txn.schemas, at, table_index as u32, table, text);
        }
        if let Some(ts) = event.ts_ms {
            if txn.max_ts.is_none_or(|m| ts > m) {
                txn.max_ts = Some(ts);
            }
        }
        if keep {
            let payload = event.payload.expect("payloads are decoded when kept");
            let kept = Event {
                total_order: event.total_order,
                table: event.table.qualified(),
                op: event.op,
                payload,
            };
            match (&txn.stream, self.emitted.as_mut()) {
                // Transaction order is total_order (1-based) where the events carry it, else
                // log order (an initial snapshot's records).
                (Some(unit), Some(emitted)) => {
                    let at = kept.total_order.map_or(index, |o| o - 1);
                    emitted.add_streamed(&txn.txn_id, unit, at, &kept);
                }
                _ => txn.events.push(kept),
            }
        }
        check_collections(txn, at)
    }

    fn feed_record(
        &mut self,
        record: Result<Record<'_>, Problem>,
        pos: &Position,
        only: Option<&FxHashSet<String>>,
    ) -> Result<Vec<Transaction>, Failure> {
        let at = Where {
            file: pos.file.clone(),
            line: pos.line + 1,
        };
        let record = record.map_err(|p| (p, at.clone()))?;
        let chunk_row = matches!(
            &record,
            Record::Change(c) if c.txn_id.is_none() && c.snapshot == SnapshotMark::Incremental
        );
        if !chunk_row {
            self.close_incremental(&at);
        }
        match record {
            Record::Skip(kind) => {
                if only.is_none() {
                    let counter = match kind {
                        Skipped::Tombstone => &mut self.skips.tombstones,
                        Skipped::Heartbeat => &mut self.skips.heartbeats,
                        Skipped::SchemaChange => &mut self.skips.schema_changes,
                    };
                    *counter += 1;
                }
                return Ok(Vec::new());
            }
            Record::Marker(marker) => {
                if !marker.end {
                    // MySQL's and MariaDB's connectors write a BEGIN for a DDL statement's
                    // transaction (from its GTID event) and no END: a transaction with a BEGIN
                    // and nothing else is closed by the next BEGIN, since it holds no change and
                    // must not stay open forever. Done for every BEGIN read, also those a resume
                    // skips, so that every reader keeps the same transactions open.
                    let began = marker.txn_id.as_ref();
                    self.open
                        .retain(|id, t| id == began || id == SNAPSHOT_ID || t.holds());
                }
                if only.is_some_and(|o| !o.contains(marker.txn_id.as_ref())) {
                    return Ok(Vec::new());
                }
                self.marker(marker, pos, &at)?;
            }
            Record::Change(mut change) => match change.txn_id.take() {
                None if change.snapshot.in_initial() => {
                    if only.is_some_and(|o| !o.contains(SNAPSHOT_ID)) {
                        return Ok(Vec::new());
                    }
                    self.snapshot_record(change, pos, &at)?;
                }
                None if chunk_row => {
                    let txn_id = self
                        .incremental
                        .get_or_insert_with(|| format!("{}:{}", at.file, at.line))
                        .clone();
                    if only.is_some_and(|o| !o.contains(&txn_id)) {
                        return Ok(Vec::new());
                    }
                    // An incremental snapshot reads rows at no log position of its own: never
                    // compared with the delivered position.
                    change.position = None;
                    self.change(&txn_id, change, pos, &at)?;
                }
                None => {
                    let txn_id = format!("{}:{}", at.file, at.line);
                    if only.is_some_and(|o| !o.contains(&txn_id)) {
                        return Ok(Vec::new());
                    }
                    self.begin_txn(&txn_id, pos, &at);
                    let txn = self.open.get_mut(&txn_id).expect("begun above");
                    txn.end = Some(End {
                        event_count: 1,
                        collections: None,
                        ts_ms: None,
                        at: at.clone(),
                    });
                    self.change(&txn_id, change, pos, &at)?;
                    self.ended.push_back(txn_id);
                }
                Some(txn_id) => {
                    if only.is_some_and(|o| !o.contains(txn_id.as_ref())) {
                        return Ok(Vec::new());
                    }
                    self.change(&txn_id, change, pos, &at)?;
                }
            },
        }
        self.release()
    }

    /// End the run of incremental-snapshot records being read, if any: the record at ``at``
    /// is not one of its rows.
    ///
    /// Debezium's incremental snapshot (DBLog's watermarks, ``AbstractIncrementalSnapshot
    /// ChangeEventSource`` in debezium-core) reads a chunk of rows between a low and a high
    /// watermark, drops from it every key the log changed inside that window, and emits what
    /// is left in one go (``sendWindowEvents``) when the stream reaches the high watermark:
    /// the chunk's rows are consecutive records without a transaction block, and the record
    /// after them is the close watermark's INSERT into the signal table (whose table Debezium
    /// requires in its include list) or, in MySQL's read-only mode, the first event past the
    /// high watermark. Delivered as one unit there, the chunk is never seen in part and stays
    /// at its place in each key's history. Consecutive chunks with nothing between them are
    /// one unit.
    fn close_incremental(&mut self, at: &Where) {
        let Some(run) = self.incremental.take() else {
            return;
        };
        if let Some(txn) = self.open.get_mut(&run) {
            txn.end = Some(End {
                event_count: txn.count,
                collections: None,
                ts_ms: None,
                at: at.clone(),
            });
            self.ended.push_back(run);
        }
    }

    /// A record of Debezium's initial snapshot: all of them, ``first`` to ``last``, make one
    /// unit. A ``first`` while a snapshot is open means Debezium started it over (it restarts
    /// an unfinished snapshot from the beginning): the records read so far are dropped.
    fn snapshot_record(
        &mut self,
        change: Change<'_>,
        pos: &Position,
        at: &Where,
    ) -> Result<(), Failure> {
        let mark = change.snapshot;
        if mark == SnapshotMark::First {
            let restarted = self
                .open
                .get(SNAPSHOT_ID)
                .filter(|s| s.end.is_none())
                .map(|s| s.count);
            if let Some(dropped) = restarted {
                self.open.shift_remove(SNAPSHOT_ID);
                self.skips.repeats += dropped;
            }
        }
        if self.open.get(SNAPSHOT_ID).is_some_and(|s| s.end.is_some()) {
            // Records after a ``last`` that is still waiting to be released: a second
            // snapshot started without a ``first`` mark.
            return Err(fail(
                ErrorKind::RepeatedSnapshot,
                at,
                "a snapshot record after the snapshot's last record, while it is not yet \
                 delivered"
                    .to_owned(),
                "one initial snapshot, from its first record to its last",
            ));
        }
        self.change(SNAPSHOT_ID, change, pos, at)?;
        if mark == SnapshotMark::Last {
            let snapshot = self.open.get_mut(SNAPSHOT_ID).expect("begun above");
            snapshot.end = Some(End {
                event_count: snapshot.count,
                collections: None,
                ts_ms: None,
                at: at.clone(),
            });
            self.ended.push_back(SNAPSHOT_ID.to_owned());
        }
        Ok(())
    }

    fn release(&mut self) -> Result<Vec<Transaction>, Failure> {
        let mut out = Vec::new();
        while let Some(head_id) = self.ended.front() {
            if !self.open.get(head_id).is_some_and(Open::complete) {
                break;
            }
            let head_id = self.ended.pop_front().expect("checked above");
            let head = self
                .open
                .shift_remove(&head_id)
                .expect("ended transactions are open");
            if head_id != SNAPSHOT_ID {
                self.remember(head_id);
            }
            if head.count == 0 {
                continue; // an empty transaction changes nothing and is not emitted
            }
            if !self.deliverable(&head)? {
                self.skips.repeats += head.count;
                continue;
            }
            let end = head.end.as_ref().expect("complete");
            let ts = end.ts_ms.or(head.max_ts);
            let schemas = if head.schemas.is_empty() {
                Vec::new()
            } else {
                self.watch.release(head.schemas, &head.tables)
            };
            let mut events = head.events;
            // Transaction order: by total_order, events without one after, each in log order
            // (a stable sort).
            events.sort_by_key(|e| (e.total_order.is_none(), e.total_order.unwrap_or(0)));
            out.push(Transaction {
                order: self.next_order,
                txn_id: head.txn_id,
                size: head.count,
                first: head.first,
                commit_ts_ms: ts,
                streamed: head.stream.is_some(),
                events,
                after: self.delivered.clone(),
                schemas,
            });
            self.next_order += 1;
        }
        Ok(out)
    }

    /// Whether a complete transaction is delivered (true) or dropped as Debezium's repeat of
    /// what was delivered before (false); records what its delivery changes.
    fn deliverable(&mut self, txn: &Open) -> Result<bool, Failure> {
        let at = txn.end.as_ref().map_or_else(
            || Where {
                file: txn.first.file.clone(),
                line: txn.first.line + 1,
            },
            |e| e.at.clone(),
        );
        if txn.txn_id == SNAPSHOT_ID {
            if let Some(done) = &self.delivered.snapshot {
                let same = !done.streamed_after && done.position == txn.position;
                if same {
                    return Ok(false); // the same snapshot again, nothing delivered since
                }
                if !self.accept_resnapshot {
                    return Err(fail(
                        ErrorKind::RepeatedSnapshot,
                        &at,
                        format!(
                            "Debezium wrote its initial snapshot again ({} rows, first record \
                             {}:{}) after the first one was delivered{}: its offsets were lost \
                             or reset. Delivered now, it would bring back rows deleted or \
                             changed since the first snapshot",
                            txn.count,
                            txn.first.file,
                            txn.first.line + 1,
                            if done.streamed_after {
                                " and changes were streamed after it"
                            } else {
                                " at another source position"
                            }
                        ),
                        "one initial snapshot per log: restore Debezium's offsets, or set the \
                         option resnapshot=accept to deliver the new snapshot as it is, or start \
                         over with a new checkpointLocation (and an empty table)",
                    ));
                }
            }
            self.delivered.snapshot = Some(SnapshotDelivered {
                position: txn.position.clone(),
                streamed_after: false,
            });
            return Ok(true);
        }
        if let (Some(position), Some(high)) = (&txn.position, &self.delivered.high) {
            if position <= high {
                return Ok(false);
            }
        }
        if let Some(reused) = &txn.reused {
            return Err(fail(
                ErrorKind::DuplicateTransaction,
                reused,
                format!(
                    "a record of transaction {}, which was already complete and emitted",
                    py_repr_str(&txn.txn_id)
                ),
                "each transaction id to be used by one transaction only",
            ));
        }
        if txn.position.is_some() {
            self.delivered.high.clone_from(&txn.position);
        }
        if let Some(done) = self.delivered.snapshot.as_mut() {
            done.streamed_after = true;
        }
        Ok(true)
    }

    fn remember(&mut self, txn_id: String) {
        self.recent.insert(txn_id.clone());
        self.recent_order.push_back(txn_id);
        if self.recent_order.len() > RECENT_WINDOW {
            if let Some(old) = self.recent_order.pop_front() {
                self.recent.remove(&old);
            }
        }
    }

    /// The open transactions with their first positions, in the order they were first read.
    fn open_positions(&self) -> Vec<(String, Position)> {
        self.open
            .values()
            .map(|t| (t.txn_id.clone(), t.first.clone()))
            .collect()
    }

    /// Feed one block of lines, decoded ahead (``decoded``, last line first) or here; returns
    /// whether the budget stopped it. Driver and executors, once per block of a chunk.
    fn consume<'a>(
        &mut self,
        block: &[Line<'a>],
        mut decoded: Vec<Result<Record<'a>, Problem>>,
        cursor: &mut Cursor,
        only: Option<&FxHashSet<String>>,
        budget: Option<i64>,
    ) -> Result<bool, Failure> {
        for &(text, consumed, tail) in block {
            let record = decoded.pop().unwrap_or_else(|| parse_line(text, self.keep));
            if !self.keep
                && only.is_none()
                && matches!(record, Ok(Record::Skip(Skipped::SchemaChange)))
            {
                // Its DDL explains the next schema of its tables (a rename, which the
                // records' schemas cannot tell from a drop and an add).
                if let Some((tables, ddl)) = schema_change_of(text) {
                    self.watch.ddl(&tables, &ddl);
                }
            }
            let start = cursor.pos.clone();
            cursor.pos.byte += consumed as u64;
            cursor.pos.line += 1;
            cursor.closed_tail = tail;
            let out = self.feed_record(record, &start, only)?;
            if out.is_empty() {
                continue;
            }
            cursor.released += out.iter().map(|t| t.size).sum::<i64>();
            if let Some(emitted) = self.emitted.as_mut() {
                for txn in &out {
                    emitted.add(txn);
                }
            } else if !self.keep {
                let open_after = self.open_positions();
                self.planned.add_group(cursor.pos.clone(), out, open_after);
            }
            if budget.is_some_and(|b| cursor.released >= b) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn planned(&self) -> PyResult<&PlannedUnits> {
        if self.keep {
            return Err(PyValueError::new_err(
                "only a planning assembler keeps units",
            ));
        }
        Ok(&self.planned)
    }
}

/// Keep the furthest of two source positions.
fn further(current: &mut Option<String>, candidate: Option<String>) {
    if let Some(candidate) = candidate {
        if current.as_ref().is_none_or(|c| candidate > *c) {
            *current = Some(candidate);
        }
    }
}

/// A planning block's lines decoded on every core, last line first (popped in order); empty
/// (decode as fed) for executors and for blocks too small to be worth the threads.
fn decode_ahead<'a>(block: &[Line<'a>], planning: bool) -> Vec<Result<Record<'a>, Problem>> {
    if planning && block.len() >= PARALLEL_LINES {
        block
            .par_iter()
            .map(|(text, _, _)| parse_line(text, false))
            .rev()
            .collect()
    } else {
        Vec::new()
    }
}

fn check_collections(txn: &Open, at: &Where) -> Result<(), Failure> {
    let Some(end) = &txn.end else { return Ok(()) };
    let Some(expected) = &end.collections else {
        return Ok(());
    };
    if !txn.complete() {
        return Ok(());
    }
    let seen: IndexMap<&str, i64, FxBuildHasher> = txn
        .tables
        .iter()
        .filter(|(_, n)| *n != 0)
        .map(|(k, n)| (k.as_str(), *n))
        .collect();
    // A data collection names a table with its connector's qualifiers: ``schema.table``
    // (PostgreSQL), ``db.table`` (MySQL, MariaDB), ``db.schema.table`` (SQL Server, Db2,
    // Oracle), while a change's ``table`` column is ``schema.table`` or ``db.table``.
    let names = |collection: &str, table: &str| {
        collection == table
            || collection
                .strip_suffix(table)
                .is_some_and(|prefix| prefix.ends_with('.'))
    };
    let same = seen.len() == expected.len()
        && seen.iter().all(|(k, n)| {
            expected
                .iter()
                .any(|(name, count)| count == n && names(name, k))
        });
    if same {
        return Ok(());
    }
    let render = |pairs: Vec<(&str, i64)>| {
        let inner: Vec<String> = pairs
            .iter()
            .map(|(k, n)| format!("{}: {n}", py_repr_str(k)))
            .collect();
        format!("{{{}}}", inner.join(", "))
    };
    Err(fail(
        ErrorKind::EventCountMismatch,
        at,
        format!(
            "transaction {} has change events per table {} but its END at {}:{} lists \
             data_collections {}",
            py_repr_str(&txn.txn_id),
            render(seen.into_iter().collect()),
            end.at.file,
            end.at.line,
            render(expected.iter().map(|(k, n)| (k.as_str(), *n)).collect())
        ),
        "data_collections event counts to match the change events per table",
    ))
}

#[pymethods]
impl Assembler {
    #[new]
    #[pyo3(signature = (first_order = 0, *, keep_events = true, delivered = (None, None), accept_resnapshot = false))]
    fn new(
        first_order: i64,
        keep_events: bool,
        delivered: RawDelivered,
        accept_resnapshot: bool,
    ) -> Self {
        Assembler {
            next_order: first_order,
            keep: keep_events,
            accept_resnapshot,
            delivered: Delivered::from_raw(delivered),
            skips: Skips::default(),
            streams: FxHashMap::default(),
            open: IndexMap::default(),
            ended: VecDeque::new(),
            recent: FxHashSet::default(),
            recent_order: VecDeque::new(),
            emitted: None,
            planned: PlannedUnits::default(),
            incremental: None,
            watch: SchemaWatch::default(),
        }
    }

    /// Build rows for the transactions released from now on (executors, once per task).
    ///
    /// Rows of transaction ``order`` are events ``[skip, take)``: ``skip`` is ``start_partial``
    /// for transaction ``start_emitted`` (else 0), ``take`` is ``end_partial`` for transaction
    /// ``end_emitted`` (else its size); nothing from ``(end_emitted, end_partial)`` on.
    ///
    /// ``key_columns``: per table, the columns whose values make the key of a change whose line
    /// carries no ``key`` (option ``keyColumns``). ``streams``: the range's large transactions
    /// as ``(txn_id, (file, byte, line) of the first record, order, size, commit_ts_ms)``, whose
    /// rows are built as their events are read.
    #[pyo3(signature = (start_emitted, start_partial, end_emitted, end_partial, source, column_types, key_columns = None, streams = None))]
    #[allow(clippy::too_many_arguments)]
    fn emit_rows(
        &mut self,
        start_emitted: i64,
        start_partial: i64,
        end_emitted: i64,
        end_partial: i64,
        source: String,
        column_types: bool,
        key_columns: Option<KeyColumns>,
        streams: Option<Vec<RawStream>>,
    ) -> PyResult<()> {
        for (txn_id, (file, byte, _), order, size, commit_ts_ms) in streams.unwrap_or_default() {
            let unit = Streamed {
                order,
                size,
                commit_ts_ms,
            };
            self.streams.insert((txn_id, file, byte), unit);
        }
        if !self.keep {
            return Err(PyValueError::new_err(
                "rows need an assembler that keeps events",
            ));
        }
        self.emitted = Some(Emitted::new(
            (start_emitted, start_partial),
            (end_emitted, end_partial),
            source,
            RowBuilder::new(column_types, key_columns.unwrap_or_default()),
        ));
        Ok(())
    }

    /// Consume the whole lines of ``data``, which starts at ``byte`` (``line`` lines already
    /// consumed) of ``file``; ``tail_is_line``: an unterminated last line counts (a later file
    /// exists). Runs in the driver's planner and in every executor task, once per chunk read.
    ///
    /// ``only``: consume only records of these transaction ids (resuming from an offset).
    /// ``budget``: stop after the line whose releases bring the changes released by this call
    /// to at least this many.
    ///
    /// Returns ``(byte, line, closed_tail)``: the position after the last line consumed and
    /// whether that line was an unterminated tail. Released transactions become rows
    /// (:meth:`emit_rows`) or planned units (without events).
    ///
    /// Raises the typed ``spark_ckpt.errors`` error of the first bad line.
    #[pyo3(signature = (data, file, byte, line, tail_is_line = false, only = None, budget = None))]
    #[allow(clippy::too_many_arguments)]
    fn feed<'a>(
        &mut self,
        py: Python<'_>,
        data: &'a [u8],
        file: &str,
        byte: u64,
        line: u64,
        tail_is_line: bool,
        only: Option<FxHashSet<String>>,
        budget: Option<i64>,
    ) -> PyResult<(u64, u64, bool)> {
        let pos = Position {
            file: Arc::from(file),
            byte,
            line,
        };
        // The lines, each with the bytes it takes (its newline included) and whether it is an
        // unterminated tail.
        let mut lines: Vec<Line<'a>> = Vec::new();
        let mut rest = data;
        loop {
            match memchr::memchr(b'\n', rest) {
                Some(i) => {
                    lines.push((&rest[..i], i + 1, false));
                    rest = &rest[i + 1..];
                }
                None if tail_is_line && !rest.is_empty() => {
                    lines.push((rest, rest.len(), true));
                    break;
                }
                None => break,
            }
        }
        // Planning decodes a block of lines on every core (Spark's tasks wait for the plan),
        // the next block while this thread assembles the current one; executors decode in
        // their task's thread, as they go. Blocks bound what a budget leaves decoded but unused
        // (a small maxChangesPerTrigger reads on from there next time).
        let planning = !self.keep;
        let decode = |block: &[Line<'a>]| decode_ahead(block, planning);
        let blocks: Vec<&[Line<'a>]> = lines.chunks(PARALLEL_BLOCK).collect();
        let mut cursor = Cursor {
            pos,
            released: 0,
            closed_tail: false,
        };
        // Without the GIL: the planner reads its next chunk meanwhile (``read_ahead``).
        let only = only.as_ref();
        let failed = py.detach(|| -> Option<Failure> {
            let mut decoded = blocks.first().map(|b| decode(b)).unwrap_or_default();
            for (index, block) in blocks.iter().enumerate() {
                let current = std::mem::take(&mut decoded);
                let next = blocks.get(index + 1);
                let (outcome, ahead) = if planning && next.is_some() {
                    rayon::join(
                        || self.consume(block, current, &mut cursor, only, budget),
                        || next.map(|b| decode(b)).unwrap_or_default(),
                    )
                } else {
                    let outcome = self.consume(block, current, &mut cursor, only, budget);
                    (outcome, Vec::new())
                };
                decoded = ahead;
                match outcome {
                    Err(failure) => return Some(failure),
                    Ok(true) => break,
                    Ok(false) => {}
                }
            }
            None
        });
        if let Some((problem, at)) = failed {
            return Err(problem.into_py(py, &at.file, at.line));
        }
        let Cursor {
            pos, closed_tail, ..
        } = cursor;
        Ok((pos.byte, pos.line, closed_tail))
    }

    /// The rows built so far, as a ``pyarrow.StructArray`` of the output columns (and
    /// ``schema``, the envelope's schema text, when asked for column types); None when there
    /// are none. Executors, once per chunk.
    fn take_rows<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.emitted.as_mut() {
            Some(emitted) if emitted.rows.len() > 0 => emitted.rows.finish(py).map(Some),
            _ => Ok(None),
        }
    }

    /// Sizes of the planned units (transactions released, not yet delivered), in order.
    fn unit_sizes(&self) -> PyResult<Vec<i64>> {
        Ok(self.planned()?.sizes())
    }

    /// The sum of :meth:`unit_sizes`.
    #[getter]
    fn unit_changes(&self) -> PyResult<i64> {
        Ok(self.planned()?.changes())
    }

    /// Planned unit ``index`` as ``(order, txn_id, size, first, scan, open_after)``: positions
    /// as ``(file, byte, line)``, ``scan`` where its release group was let out, ``open_after``
    /// the transactions still open right after it as ``(txn_id, first)`` (itself not included).
    #[allow(clippy::type_complexity)]
    fn unit(&self, index: usize) -> PyResult<UnitTuple<'_>> {
        let view = self
            .planned()?
            .view(index)
            .ok_or_else(|| PyValueError::new_err(format!("no planned unit {index}")))?;
        let raw = |p: &Position| (p.file.to_string(), p.byte, p.line);
        Ok((
            view.order,
            view.txn_id,
            view.size,
            raw(view.first),
            raw(view.scan),
            view.open_after
                .iter()
                .map(|(id, first)| (*id, raw(first)))
                .collect(),
            view.after.raw(),
            view.commit_ts_ms,
        ))
    }

    /// The schemas planned unit ``index`` starts or changes, as ``(at, table, schema text,
    /// DDL statements read for the table since its previous schema)`` in transaction order:
    /// where a table's schema differs from its previous released change's, and each table's
    /// first in this assembler (Python compares those with the offset's).
    #[allow(clippy::type_complexity)]
    fn unit_schemas(&self, index: usize) -> PyResult<Vec<(i64, &str, &str, Vec<&str>)>> {
        let view = self
            .planned()?
            .view(index)
            .ok_or_else(|| PyValueError::new_err(format!("no planned unit {index}")))?;
        Ok(view
            .schemas
            .iter()
            .map(|(at, table, text, ddls)| {
                let ddls = ddls.iter().map(|d| &**d).collect();
                (*at, table.as_str(), &**text, ddls)
            })
            .collect())
    }

    /// The indexes of the planned units with :meth:`unit_schemas`, in order.
    fn schema_units(&self) -> PyResult<Vec<usize>> {
        Ok(self.planned()?.with_schemas())
    }

    /// Forget the planned units beyond the first ``keep`` (re-planning a logged batch).
    fn truncate_units(&mut self, keep: usize) -> PyResult<()> {
        self.planned()?;
        self.planned.truncate(keep);
        Ok(())
    }

    /// Drop the first ``count`` planned units (a batch delivered them).
    fn drop_units(&mut self, count: usize) -> PyResult<()> {
        self.planned()?;
        self.planned.drop_front(count);
        Ok(())
    }

    /// Make every unit released so far one release group at ``(file, byte, line)``: resuming
    /// from an offset, what was re-read before its scan position is released there.
    fn regroup(&mut self, file: &str, byte: u64, line: u64) -> PyResult<()> {
        self.planned()?;
        let scan = Position {
            file: Arc::from(file),
            byte,
            line,
        };
        let open_after = self.open_positions();
        self.planned.regroup(scan, open_after);
        Ok(())
    }

    /// ``order`` of the next transaction emitted.
    #[getter]
    fn next_order(&self) -> i64 {
        self.next_order
    }

    /// Change events read but not emitted.
    #[getter]
    fn held_events(&self) -> i64 {
        self.open.values().map(|t| t.count).sum()
    }

    /// Transactions (and an initial snapshot) holding changes back, not emitted.
    #[getter]
    fn held_transactions(&self) -> usize {
        self.open.values().filter(|t| t.holds()).count()
    }

    /// The oldest transaction holding changes back as ``(txn_id, (file, byte, line))`` of its
    /// first record; None when none is.
    fn oldest_open(&self) -> Option<(&str, RawPosition)> {
        let oldest = self.open.values().find(|t| t.holds())?;
        let p = &oldest.first;
        Some((&oldest.txn_id, (p.file.to_string(), p.byte, p.line)))
    }

    /// What was delivered so far (``(high, snapshot)``, see :meth:`unit`).
    #[getter]
    fn delivered(&self) -> RawDelivered {
        self.delivered.raw()
    }

    /// Records skipped so far, as ``(name, count)``: ``repeats`` (changes dropped as
    /// Debezium's repeats), ``tombstones``, ``heartbeats``, ``schemaChanges``.
    fn skipped(&self) -> Vec<(&'static str, i64)> {
        let s = self.skips;
        vec![
            ("repeats", s.repeats),
            ("tombstones", s.tombstones),
            ("heartbeats", s.heartbeats),
            ("schemaChanges", s.schema_changes),
        ]
    }

    /// Why nothing more can be emitted now, in words (None when nothing is held back).
    fn holdup(&self) -> Option<String> {
        if self.open.is_empty() {
            return None;
        }
        if let Some(head_id) = self.ended.front() {
            let head = &self.open[head_id];
            let end = head.end.as_ref().expect("ended");
            return Some(format!(
                "transaction {} (first record {}:{}) has ended but only {} of its {} change \
                 events have been read; {} later-ended transaction(s) wait behind it",
                py_repr_str(&head.txn_id),
                head.first.file,
                head.first.line + 1,
                head.count,
                end.event_count,
                self.ended.len() - 1
            ));
        }
        let oldest = self.open.values().find(|t| t.holds())?;
        if oldest.txn_id == SNAPSHOT_ID {
            return Some(format!(
                "Debezium's initial snapshot is being read ({} row(s) so far, first record \
                 {}:{}): it is delivered whole once its last record (source.snapshot=last) is \
                 read",
                oldest.count,
                oldest.first.file,
                oldest.first.line + 1
            ));
        }
        if self.incremental.as_deref() == Some(oldest.txn_id.as_str()) {
            return Some(format!(
                "a chunk of Debezium's incremental snapshot is being read ({} row(s) so far, \
                 first record {}:{}): it is delivered whole once the record after its last row \
                 (the signal table's close watermark) is read",
                oldest.count,
                oldest.first.file,
                oldest.first.line + 1
            ));
        }
        Some(format!(
            "transaction {} (first record {}:{}) has {} change event(s) but its END has not been \
             read yet",
            py_repr_str(&oldest.txn_id),
            oldest.first.file,
            oldest.first.line + 1,
            oldest.count
        ))
    }
}
