//! The ``mysql`` connector's native half (imported as ``spark_ckpt.sources.mysql._native``): the
//! binlog's replication stream, as the server sends it, decoded into what the driver's
//! transaction assembler takes (``sources/mysql/binlog.py``): GTIDs, statements, commits, and
//! each captured row change already rendered to the change store's columns (table, ``op``,
//! ``key``, ``before``, ``after``, ``column_types``, the old key of an update that moved it).
//!
//! Python decoded about 155 us per change (``mysql-replication``'s events and values, then the
//! connector's rendering and ``json.dumps``); the stream's throughput was bound by it.
//!
//! What stays in Python: the connection (registration as a replica, ``COM_BINLOG_DUMP``, the
//! GTID state), the description of each table map's columns (``MySqlColumn``, the schema
//! history), and the few values in a character set other than UTF-8 (Python's codecs).

use std::collections::{HashMap, HashSet, VecDeque};

use mysql_common::binlog::consts::{BinlogChecksumAlg, BinlogVersion};
use mysql_common::binlog::events::{
    Event, QueryEvent, RotateEvent, TableMapEvent, TransactionPayloadEvent,
};
use mysql_common::binlog::EventStreamReader;
use mysql_common::constants::ColumnType;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

mod columns;
mod framing;
mod queried;
mod rows;
mod text;

use columns::{Column, Described, Kind};
use framing::{Frames, Packet};

// Event type codes (MySQL's ``binlog_event.h``; MariaDB's ``log_event.h`` for 160 and up).
const QUERY: u8 = 2;
const FORMAT_DESCRIPTION: u8 = 15;
const ROTATE: u8 = 4;
const XID: u8 = 16;
const TABLE_MAP: u8 = 19;
const WRITE_ROWS_V1: u8 = 23;
const UPDATE_ROWS_V1: u8 = 24;
const DELETE_ROWS_V1: u8 = 25;
const WRITE_ROWS: u8 = 30;
const UPDATE_ROWS: u8 = 31;
const DELETE_ROWS: u8 = 32;
const GTID: u8 = 33;
const PARTIAL_UPDATE_ROWS: u8 = 39;
const TRANSACTION_PAYLOAD: u8 = 40;
const GTID_TAGGED: u8 = 42;
const MARIADB_GTID: u8 = 162;
/// MariaDB's compressed query and rows events (``log_bin_compress``; ``log_event.h``).
const MARIADB_COMPRESSED: std::ops::RangeInclusive<u8> = 165..=171;

/// A table map read: its table, and once the Python side described it, how to render its rows.
struct TableState {
    /// The table map event's body: an identical one later keeps this description.
    body: Vec<u8>,
    name: Py<PyString>,
    captured: bool,
    map: TableMapEvent<'static>,
    rendering: Option<rows::Rendering>,
}

/// Decodes a binlog stream (driver, one per read of the binlog).
///
/// Parameters (Python): ``captured``, the captured tables as ``database.table``;
/// ``decode_text``, called as ``decode_text(table_id, column_index, raw)`` for a text value in
/// a character set other than UTF-8 (or invalid UTF-8), returns its ``str``; ``checksum``,
/// whether the server was asked for events with checksums.
#[pyclass(module = "spark_ckpt.sources.mysql._native")]
struct BinlogDecoder {
    captured: HashSet<String>,
    decode_text: Py<PyAny>,
    /// Whether the server sends checksums (``@master_binlog_checksum``, set by the client).
    checksum: bool,
    /// Whether a format description was read (the reader knows the events' checksum since).
    described_format: bool,
    frames: Frames,
    reader: EventStreamReader,
    /// Events of a transaction payload (MySQL's compressed transactions) still to handle.
    pending: VecDeque<Event>,
    tables: HashMap<u64, TableState>,
    /// A table map handed to Python, whose description must come before anything else.
    awaiting: Option<u64>,
    file: String,
    position: u64,
    stop: Option<(String, u64)>,
    ended: bool,
}

/// A column as Python describes it: ``(name, code, unsigned, charset, codec, bits, fsp, length,
/// members)``.
type DescribedTuple = (
    String,
    u8,
    bool,
    Option<String>,
    Option<String>,
    Option<u32>,
    u8,
    Option<usize>,
    Vec<String>,
);

/// The columns of a table map (their binlog types and metadata from ``map``), or of a query's
/// result (no map: the text protocol needs none), as described.
fn columns_of(
    described: Vec<DescribedTuple>,
    map: Option<&TableMapEvent<'static>>,
) -> PyResult<Vec<Column>> {
    let mut columns = Vec::with_capacity(described.len());
    for (index, d) in described.into_iter().enumerate() {
        let described = Described {
            name: d.0,
            code: d.1,
            unsigned: d.2,
            charset: d.3,
            codec: d.4,
            bits: d.5,
            fsp: d.6,
            length: d.7,
            members: d.8,
        };
        let (column_type, meta) = match map {
            Some(map) => (
                map.get_column_type(index)
                    .map_err(|e| value_error(e.to_string()))?
                    .ok_or_else(|| value_error("a column past the table map's"))?,
                map.get_column_metadata(index).unwrap_or(&[]).to_vec(),
            ),
            None => (ColumnType::MYSQL_TYPE_NULL, Vec::new()),
        };
        let kind = Kind::of(&described)
            .map_err(|e| value_error(format!("column {}: {e}", described.name)))?;
        let mut label = String::new();
        text::push_json_string(&mut label, &described.name);
        label.push(':');
        columns.push(Column {
            label,
            kind,
            column_type,
            meta,
            unsigned: described.unsigned,
        });
    }
    Ok(columns)
}

fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

#[pymethods]
impl BinlogDecoder {
    #[new]
    fn new(captured: Vec<String>, decode_text: Py<PyAny>, checksum: bool) -> Self {
        BinlogDecoder {
            captured: captured.into_iter().collect(),
            decode_text,
            checksum,
            described_format: false,
            frames: Frames::default(),
            reader: EventStreamReader::new(BinlogVersion::Version4),
            pending: VecDeque::new(),
            tables: HashMap::new(),
            awaiting: None,
            file: String::new(),
            position: 0,
            stop: None,
            ended: false,
        }
    }

    /// Bytes read from the replication connection (any split: packets are framed here).
    fn push(&mut self, data: &[u8]) {
        self.frames.push(data);
    }

    /// One packet's payload (the status byte, then the event), as a replayed fixture holds it.
    fn push_payload(&mut self, payload: &[u8]) {
        self.frames.push_payload(payload);
    }

    /// Stop after the event that ends at or past ``file``:``pos`` (``("stop",)``).
    fn set_stop(&mut self, file: String, pos: u64) {
        self.stop = Some((file, pos));
    }

    /// Whether the stream ended (the server's end-of-file, an error, or the stop position).
    #[getter]
    fn ended(&self) -> bool {
        self.ended
    }

    /// The description of the table map last handed over (``("map", ...)``): each column as
    /// ``(name, code, unsigned, charset, codec, bits, fsp, length, members)``,
    /// the ``column_types`` text, and the key's columns by name.
    fn describe(
        &mut self,
        py: Python<'_>,
        table_id: u64,
        described: Vec<DescribedTuple>,
        types: String,
        key: Vec<String>,
    ) -> PyResult<()> {
        if self.awaiting != Some(table_id) {
            return Err(value_error(format!(
                "table map {table_id} is not the one awaiting its description"
            )));
        }
        let state = self
            .tables
            .get_mut(&table_id)
            .ok_or_else(|| value_error(format!("no table map {table_id}")))?;
        let count = state.map.columns_count() as usize;
        if described.len() != count {
            return Err(value_error(format!(
                "table map {table_id} has {count} columns, {} described",
                described.len()
            )));
        }
        let columns = columns_of(described, Some(&state.map))
            .map_err(|e| value_error(format!("{} (table {})", e, state.name.bind(py))))?;
        state.rendering = Some(rows::Rendering::new(
            columns,
            &key,
            PyString::new(py, &types).unbind(),
        ));
        self.awaiting = None;
        Ok(())
    }

    /// Decodes the packets pushed so far, in order, into items (a list; empty: push more).
    ///
    /// Items: ``("gtid", gtid, mariadb, standalone)``; ``("query", sql, database, file, pos,
    /// timestamp)``; ``("xid", file, pos, timestamp)``; ``("fde", payload, checksum)``, the
    /// format description's packet; ``("map", table_id, table, payload, checksum)`` for a
    /// captured table's new table map, which ends the list: :meth:`describe` it before the
    /// next call; ``("rows", table_id, table, rows)``, each row the change store's columns;
    /// ``("eof",)``, ``("error", code, message)`` and ``("stop", file, pos)`` end the stream.
    fn next_items<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = PyList::empty(py);
        if let Some(table_id) = self.awaiting {
            return Err(value_error(format!(
                "table map {table_id} awaits its description"
            )));
        }
        while !self.ended {
            // An event of a compressed transaction came without a packet of its own: its
            // payload is built only if Python needs it (a table map, a format description).
            let (event, payload, checksum) = match self.pending.pop_front() {
                Some(event) => (event, None, false),
                None => match self.frames.next_packet() {
                    None => break,
                    Some(Packet::Eof) => {
                        self.ended = true;
                        items.append(PyTuple::new(py, ["eof"])?)?;
                        break;
                    }
                    Some(Packet::Error(code, message)) => {
                        self.ended = true;
                        items.append((
                            "error",
                            code,
                            String::from_utf8_lossy(&message).into_owned(),
                        ))?;
                        break;
                    }
                    Some(Packet::Other | Packet::Row(_)) => continue,
                    Some(Packet::Event(payload)) => {
                        check_size(&payload)?;
                        let event = self
                            .reader
                            .read(&payload[1..])
                            .map_err(|e| value_error(format!("a binlog event: {e}")))?
                            .ok_or_else(|| value_error("an empty binlog event"))?;
                        (event, Some(payload), self.checksummed())
                    }
                },
            };
            let header = event.header();
            let kind = header.event_type_raw();
            if kind == FORMAT_DESCRIPTION {
                self.described_format = true;
            }
            if kind == ROTATE {
                let rotate = read!(event, RotateEvent<'_>)?;
                let mut name = rotate.name_raw();
                // The server's first (artificial) rotate comes before the format description
                // that tells the reader its events end with a checksum: its last 4 bytes are one.
                // Later rotates are read by the format description of their file.
                if self.checksum && !self.described_format && name.len() >= 4 {
                    name = &name[..name.len() - 4];
                }
                self.file = String::from_utf8_lossy(name).into_owned();
                self.position = rotate.position();
            } else if header.log_pos() != 0 {
                self.position = u64::from(header.log_pos());
            }
            let paused = self.handle(py, &event, (payload.as_deref(), checksum), &items)?;
            // A compressed transaction's events all carry its payload's end: the stop comes
            // after the last of them (its commit), never between them.
            let whole = self.pending.is_empty();
            if let (true, Some((file, pos))) = (whole, &self.stop) {
                if at_or_past((&self.file, self.position), (file, *pos)) {
                    self.ended = true;
                    items.append(("stop", self.file.clone(), self.position))?;
                    break;
                }
            }
            if paused {
                break;
            }
        }
        Ok(items)
    }
}

/// Whether ``at`` is at or past ``stop``: binlog files by their number (``mysql-bin.000012``),
/// then the offset; names without a number compare as text.
fn at_or_past(at: (&str, u64), stop: (&str, u64)) -> bool {
    let number = |file: &str| {
        file.rsplit_once('.')
            .and_then(|(_, n)| n.parse::<u64>().ok())
    };
    match (number(at.0), number(stop.0)) {
        (Some(a), Some(b)) => (a, at.1) >= (b, stop.1),
        _ => at >= stop,
    }
}

/// An event packet must hold the whole event its header announces (``mysql_common`` would
/// panic on a shorter one).
fn check_size(payload: &[u8]) -> PyResult<()> {
    let size = payload
        .get(10..14)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
        .ok_or_else(|| value_error("a binlog event packet shorter than its header"))?;
    if payload.len() - 1 < size {
        return Err(value_error(format!(
            "a binlog event of {size} bytes arrived in {}",
            payload.len() - 1
        )));
    }
    Ok(())
}

/// The packet an event came in, or one built for it (an event of a compressed transaction).
fn packet_of<'a>(event: &Event, payload: Option<&'a [u8]>) -> std::borrow::Cow<'a, [u8]> {
    match payload {
        Some(payload) => std::borrow::Cow::Borrowed(payload),
        None => std::borrow::Cow::Owned(unframed_payload(event)),
    }
}

/// A packet's payload for an event that came without one (inside a compressed transaction):
/// the status byte, the event's 19-byte header, its data, no checksum.
fn unframed_payload(event: &Event) -> Vec<u8> {
    let header = event.header();
    let data = event.data();
    let mut payload = Vec::with_capacity(20 + data.len());
    payload.push(0);
    payload.extend_from_slice(&header.timestamp().to_le_bytes());
    payload.push(header.event_type_raw());
    payload.extend_from_slice(&header.server_id().to_le_bytes());
    payload.extend_from_slice(&((19 + data.len()) as u32).to_le_bytes());
    payload.extend_from_slice(&header.log_pos().to_le_bytes());
    payload.extend_from_slice(&header.flags_raw().to_le_bytes());
    payload.extend_from_slice(data);
    payload
}

/// ``event.read_event::<T>()``, its error as a ``ValueError`` (``mysql_common``'s event trait
/// is private, so this is a macro rather than a generic function).
macro_rules! read {
    ($event:expr, $t:ty) => {
        $event
            .read_event::<$t>()
            .map_err(|e| crate::value_error(format!("a binlog event: {e}")))
    };
}
pub(crate) use read;

/// Python's ``bytes.decode("utf-8", "backslashreplace")`` (how the client reads a statement).
fn backslash_replaced(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for chunk in raw.utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

impl BinlogDecoder {
    /// One event's items; true when a table map awaits its description.
    fn handle(
        &mut self,
        py: Python<'_>,
        event: &Event,
        (payload, checksum): (Option<&[u8]>, bool),
        items: &Bound<'_, PyList>,
    ) -> PyResult<bool> {
        let header = event.header();
        match header.event_type_raw() {
            FORMAT_DESCRIPTION => {
                let payload = packet_of(event, payload);
                items.append(("fde", PyBytes::new(py, &payload), checksum))?;
            }
            MARIADB_GTID => {
                // MariaDB's log_event.h: seq_no (8 bytes), domain_id (4), flags2 (1), LE.
                let data = event.data();
                if data.len() < 13 {
                    return Err(value_error("a MariaDB GTID event shorter than 13 bytes"));
                }
                let seq = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
                let domain = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
                let gtid = format!("{domain}-{}-{seq}", header.server_id());
                items.append(("gtid", gtid, true, data[12] & 0x01 != 0))?;
            }
            GTID => {
                let gtid = read!(event, mysql_common::binlog::events::GtidEvent)?;
                let sid = gtid
                    .sid()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>();
                let text = format!(
                    "{}-{}-{}-{}-{}:{}",
                    &sid[..8],
                    &sid[8..12],
                    &sid[12..16],
                    &sid[16..20],
                    &sid[20..],
                    gtid.gno()
                );
                items.append(("gtid", text, false, false))?;
            }
            XID => {
                items.append(("xid", self.file.clone(), self.position, header.timestamp()))?;
            }
            QUERY => {
                let query = read!(event, QueryEvent<'_>)?;
                let sql = backslash_replaced(query.query_raw());
                let database = String::from_utf8_lossy(query.schema_raw()).into_owned();
                items.append((
                    "query",
                    sql,
                    database,
                    self.file.clone(),
                    self.position,
                    header.timestamp(),
                ))?;
            }
            TABLE_MAP => return self.table_map(py, event, (payload, checksum), items),
            WRITE_ROWS_V1 | UPDATE_ROWS_V1 | DELETE_ROWS_V1 | WRITE_ROWS | UPDATE_ROWS
            | DELETE_ROWS => self.rows(py, event, items)?,
            PARTIAL_UPDATE_ROWS => {
                let partial = read!(
                    event,
                    mysql_common::binlog::events::PartialUpdateRowsEvent<'_>
                )?;
                if self
                    .tables
                    .get(&partial.table_id())
                    .is_some_and(|table| table.captured)
                {
                    return Err(value_error(columns::partial_json()));
                }
            }
            GTID_TAGGED => {
                return Err(value_error(
                    "a tagged GTID (MySQL 8.4's GTID_TAGGED_LOG_EVENT) is not read by the mysql \
                     connector: its transactions would have no GTID; use untagged GTIDs",
                ));
            }
            kind if MARIADB_COMPRESSED.contains(&kind) => {
                return Err(value_error(format!(
                    "MariaDB's compressed binlog events (log_bin_compress=ON; event type {kind}) \
                     are not read by the mysql connector: set log_bin_compress=OFF"
                )));
            }
            TRANSACTION_PAYLOAD => {
                let payload = read!(event, TransactionPayloadEvent<'_>)?;
                let mut inner = payload
                    .decompressed()
                    .map_err(|e| value_error(format!("a compressed transaction: {e}")))?;
                while let Some(event) = self
                    .reader
                    .read_decompressed(&mut inner)
                    .map_err(|e| value_error(format!("a compressed transaction: {e}")))?
                {
                    self.pending.push_back(event);
                }
            }
            _ => {}
        }
        Ok(false)
    }

    /// Whether the stream's events end with a checksum (the format description says).
    fn checksummed(&self) -> bool {
        matches!(
            self.reader.get_fde().footer().get_checksum_alg(),
            Ok(Some(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32))
        )
    }

    fn table_map(
        &mut self,
        py: Python<'_>,
        event: &Event,
        (payload, checksum): (Option<&[u8]>, bool),
        items: &Bound<'_, PyList>,
    ) -> PyResult<bool> {
        let map = read!(event, TableMapEvent<'_>)?;
        let table_id = map.table_id();
        if let Some(known) = self.tables.get(&table_id) {
            if known.body == event.data() && (known.rendering.is_some() || !known.captured) {
                return Ok(false);
            }
        }
        let name = format!("{}.{}", map.database_name(), map.table_name());
        let captured = self.captured.contains(&name);
        let py_name = PyString::new(py, &name).unbind();
        self.tables.insert(
            table_id,
            TableState {
                body: event.data().to_vec(),
                name: py_name.clone_ref(py),
                captured,
                map: map.into_owned(),
                rendering: None,
            },
        );
        if !captured {
            return Ok(false);
        }
        self.awaiting = Some(table_id);
        items.append((
            "map",
            table_id,
            py_name,
            PyBytes::new(
                py,
                &payload.map_or_else(|| unframed_payload(event), <[u8]>::to_vec),
            ),
            checksum,
        ))?;
        Ok(true)
    }

    fn rows(&mut self, py: Python<'_>, event: &Event, items: &Bound<'_, PyList>) -> PyResult<()> {
        let parsed = rows::RowsOf::read(event)?;
        let Some(state) = self.tables.get(&parsed.table_id()) else {
            return Ok(()); // a table filtered out before its map (never captured)
        };
        if !state.captured {
            return Ok(());
        }
        let rendering = state.rendering.as_ref().ok_or_else(|| {
            value_error(format!(
                "rows of table map {} before its description",
                parsed.table_id()
            ))
        })?;
        let decode_text = |column: usize, raw: Vec<u8>| -> PyResult<String> {
            self.decode_text
                .bind(py)
                .call1((parsed.table_id(), column, PyBytes::new(py, &raw)))?
                .extract::<String>()
        };
        let rendered = rendering
            .render(py, &state.name, &parsed, &decode_text)
            .map_err(|e| {
                value_error(format!(
                    "a rows event of {} at {}:{}: {e}",
                    state.name.bind(py),
                    self.file,
                    self.position
                ))
            })?;
        items.append((
            "rows",
            parsed.table_id(),
            state.name.clone_ref(py),
            rendered,
        ))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::at_or_past;

    #[test]
    fn positions_compare_by_the_files_number_then_the_offset() {
        assert!(at_or_past(("bin.000002", 4), ("bin.000001", 900)));
        assert!(at_or_past(("bin.000001", 900), ("bin.000001", 900)));
        assert!(!at_or_past(("bin.000001", 899), ("bin.000001", 900)));
        assert!(at_or_past(("bin.1000000", 4), ("bin.999999", 900)));
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BinlogDecoder>()?;
    m.add_class::<queried::QueriedRows>()?;
    Ok(())
}
