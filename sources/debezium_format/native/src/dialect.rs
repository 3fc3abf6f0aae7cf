//! How each Debezium connector names its transactions and places its events in its log.
//!
//! Debezium's transaction metadata is produced by one class, ``TransactionMonitor``
//! (debezium-core, ``io.debezium.pipeline.txmetadata``): a ``BEGIN`` and an ``END`` record per
//! transaction on ``<topic.prefix>.transaction``, and a ``transaction`` block
//! ``{id, total_order, data_collection_order}`` in every change event. The id is the source
//! database's own transaction id, the same string in the markers and the events, for every
//! connector but one:
//!
//! - **PostgreSQL** (``PostgresTransactionMonitor.adjustTxId``, Debezium 2.x and 3.x) writes
//!   ``"<txId>:<lsn>"`` where ``lsn`` is the *last seen* LSN when the record was made: it differs
//!   between the BEGIN, each event and the END of one transaction (``730:22119888``,
//!   ``730:22120032``, ... ``730:22120368`` in a log Debezium 3.6 wrote). The transaction is the
//!   ``txId`` part; the END's LSN is the transaction's commit LSN. Newer releases add
//!   ``commit_lsn`` to the block (``PostgresTransactionStructMaker``), read here when present.
//! - **MySQL** and **MariaDB** (``MySqlTransactionContext``, ``MariaDbTransactionContext``): the
//!   GTID of the transaction (``3E11FA47-71CA-11E1-9E33-C80AA9429562:23``, ``0-1-5``), or the
//!   binlog ``file:pos`` of its start without GTIDs.
//! - **SQL Server** and **Db2**: the commit LSN (``00000025:00000d08:0025``).
//! - **Oracle**: the transaction's XID in hex (``0a001f00e5040000``).
//! - **MongoDB**: the session id and transaction number (``lsid`` and ``txnNumber``).
//!
//! Positions: at least once, Debezium repeats what it wrote after its last flushed offset when
//! it restarts. A repeat is recognised by the event's position in the source's own log, which
//! only grows in commit order (each connector's ``source`` block, documented under "source
//! metadata" in its connector page). Positions are rendered as fixed-width text so that one
//! string comparison orders them; ``None`` where a record carries none (then nothing is dropped
//! as a repeat by position).

use serde_json::value::RawValue;

use crate::text::{int_or_none, string_or_none};

/// Where a change event stands in Debezium's snapshot phase (``source.snapshot``).
///
/// Debezium 2.x and 3.x write ``first``, ``first_in_data_collection``, ``true``,
/// ``last_in_data_collection``, ``last``, ``false`` or ``incremental``; 1.x wrote booleans or
/// ``"true"``/``"last"``/``"false"``.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotMark {
    /// A streamed change (``false``, absent or null).
    Stream,
    /// The first record of an initial snapshot.
    First,
    /// A record inside an initial snapshot (``true``, ``*_in_data_collection``).
    Within,
    /// The last record of an initial snapshot.
    Last,
    /// A chunk record of an incremental (signal-based) snapshot.
    Incremental,
}

impl SnapshotMark {
    pub fn read(raw: Option<&RawValue>) -> Self {
        let Some(raw) = raw else {
            return SnapshotMark::Stream;
        };
        match raw.get() {
            "true" => return SnapshotMark::Within,
            "false" | "null" => return SnapshotMark::Stream,
            _ => {}
        }
        match string_or_none(Some(raw)).as_deref() {
            Some("first") => SnapshotMark::First,
            Some("last") => SnapshotMark::Last,
            Some("true" | "first_in_data_collection" | "last_in_data_collection") => {
                SnapshotMark::Within
            }
            Some("incremental") => SnapshotMark::Incremental,
            _ => SnapshotMark::Stream,
        }
    }

    /// Part of an initial snapshot (delivered as one unit).
    pub fn in_initial(self) -> bool {
        matches!(
            self,
            SnapshotMark::First | SnapshotMark::Within | SnapshotMark::Last
        )
    }
}

/// A transaction id as the log writes it, split into the transaction it names and, for
/// PostgreSQL's ``txId:lsn`` form, the LSN it carries.
pub fn transaction_key(id: &str) -> (&str, Option<u64>) {
    if let Some((txid, lsn)) = id.split_once(':') {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if digits(txid) && digits(lsn) {
            if let Ok(lsn) = lsn.parse::<u64>() {
                return (txid, Some(lsn));
            }
        }
    }
    (id, None)
}

/// A PostgreSQL position: ``(last commit LSN, LSN)``, the two halves of ``source.sequence``.
/// Strictly increasing in stream order; a commit LSN ``c`` alone is ``(c, 0)``, after every
/// event of its transaction (whose ``sequence`` starts with the commit before it).
pub fn postgres_position(last_commit: u64, lsn: u64) -> String {
    format!("pg:{last_commit:020}:{lsn:020}")
}

/// The ``source`` fields positions are read from.
#[derive(Default)]
pub struct SourcePosition<'a> {
    pub connector: Option<&'a RawValue>,
    pub lsn: Option<&'a RawValue>,
    pub sequence: Option<&'a RawValue>,
    pub file: Option<&'a RawValue>,
    pub pos: Option<&'a RawValue>,
    pub row: Option<&'a RawValue>,
    pub commit_lsn: Option<&'a RawValue>,
    pub change_lsn: Option<&'a RawValue>,
    pub event_serial_no: Option<&'a RawValue>,
    pub commit_scn: Option<&'a RawValue>,
    pub scn: Option<&'a RawValue>,
    pub sec: Option<&'a RawValue>,
    pub ord: Option<&'a RawValue>,
}

/// An unsigned integer written as a JSON number or a string of digits.
fn unsigned(raw: Option<&RawValue>) -> Option<u64> {
    let raw = raw?;
    if let Some(n) = int_or_none(Some(raw)) {
        return u64::try_from(n).ok();
    }
    string_or_none(Some(raw))?.parse::<u64>().ok()
}

/// A decimal number of any size (Oracle SCNs), as fixed-width text.
fn wide_decimal(raw: Option<&RawValue>) -> Option<String> {
    let raw = raw?;
    let text = match string_or_none(Some(raw)) {
        Some(s) => s.into_owned(),
        None => raw.get().to_owned(),
    };
    (!text.is_empty() && text.len() <= 40 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| format!("{text:0>40}"))
}

/// PostgreSQL's ``source.sequence``: a JSON *string* holding ``["<last commit>", "<lsn>"]``.
fn postgres_sequence(raw: Option<&RawValue>) -> Option<(u64, u64)> {
    let text = string_or_none(raw)?;
    let pair: Vec<Option<String>> = serde_json::from_str(&text).ok()?;
    let [last_commit, lsn] = pair.as_slice() else {
        return None;
    };
    let lsn = lsn.as_deref()?.parse::<u64>().ok()?;
    let last_commit = match last_commit {
        Some(text) => text.parse::<u64>().ok()?,
        None => 0,
    };
    Some((last_commit, lsn))
}

/// The position of a change event in its source's log, by the connector that wrote it
/// (``source.connector``); None when the connector or its position fields are unknown.
pub fn event_position(source: &SourcePosition<'_>, commit_lsn: Option<u64>) -> Option<String> {
    let connector = string_or_none(source.connector)?;
    match connector.as_ref() {
        "postgresql" => {
            if let Some(commit) = commit_lsn {
                return Some(postgres_position(commit, 0));
            }
            if let Some((last_commit, lsn)) = postgres_sequence(source.sequence) {
                return Some(postgres_position(last_commit, lsn));
            }
            unsigned(source.lsn).map(|lsn| postgres_position(0, lsn))
        }
        // Binlog coordinates: the file names end in a zero-padded sequence number, ``pos`` is
        // the byte offset of the event group, ``row`` the row within its rows event.
        "mysql" | "mariadb" => {
            let file = string_or_none(source.file)?;
            let pos = unsigned(source.pos)?;
            let row = unsigned(source.row).unwrap_or(0);
            Some(format!("binlog:{file}:{pos:020}:{row:010}"))
        }
        // Fixed-width hexadecimal LSNs: text order is LSN order.
        "sqlserver" | "db2" => {
            let commit = string_or_none(source.commit_lsn)?;
            let change = string_or_none(source.change_lsn).unwrap_or_default();
            let serial = unsigned(source.event_serial_no).unwrap_or(0);
            Some(format!("lsn:{commit}:{change}:{serial:010}"))
        }
        "oracle" => {
            let commit = wide_decimal(source.commit_scn)?;
            let scn = wide_decimal(source.scn).unwrap_or_default();
            Some(format!("scn:{commit}:{scn}"))
        }
        "mongodb" => {
            let sec = unsigned(source.sec)?;
            let ord = unsigned(source.ord).unwrap_or(0);
            Some(format!("oplog:{sec:020}:{ord:010}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn postgres_ids_name_the_transaction_before_the_colon() {
        // A BEGIN, an event and the END of one transaction, as Debezium 3.6 wrote them.
        assert_eq!(transaction_key("730:22119888"), ("730", Some(22119888)));
        assert_eq!(transaction_key("730:22120176"), ("730", Some(22120176)));
        assert_eq!(transaction_key("730:22120368"), ("730", Some(22120368)));
    }

    #[test]
    fn other_connectors_ids_are_kept_whole() {
        for id in [
            "3E11FA47-71CA-11E1-9E33-C80AA9429562:23", // MySQL GTID
            "0-1-5",                                   // MariaDB GTID
            "00000025:00000d08:0025",                  // SQL Server / Db2 commit LSN
            "0a001f00e5040000",                        // Oracle XID
            "1462833718356672513",                     // MongoDB (documented example)
            "mysql-bin.000003:154",                    // MySQL without GTIDs
            "12:",
            ":12",
        ] {
            assert_eq!(transaction_key(id), (id, None), "{id}");
        }
    }

    #[test]
    fn snapshot_marks_of_every_release() {
        let mark = |t: &str| SnapshotMark::read(Some(&raw(t)));
        assert_eq!(mark("\"first\""), SnapshotMark::First);
        assert_eq!(mark("\"first_in_data_collection\""), SnapshotMark::Within);
        assert_eq!(mark("\"true\""), SnapshotMark::Within);
        assert_eq!(mark("true"), SnapshotMark::Within);
        assert_eq!(mark("\"last_in_data_collection\""), SnapshotMark::Within);
        assert_eq!(mark("\"last\""), SnapshotMark::Last);
        assert_eq!(mark("\"false\""), SnapshotMark::Stream);
        assert_eq!(mark("false"), SnapshotMark::Stream);
        assert_eq!(mark("null"), SnapshotMark::Stream);
        assert_eq!(mark("\"incremental\""), SnapshotMark::Incremental);
        assert_eq!(SnapshotMark::read(None), SnapshotMark::Stream);
    }

    #[test]
    fn postgres_positions_grow_in_stream_order() {
        let connector = raw("\"postgresql\"");
        let at = |sequence: &str, lsn: &str| {
            let (sequence, lsn) = (raw(sequence), raw(lsn));
            event_position(
                &SourcePosition {
                    connector: Some(&connector),
                    sequence: Some(&sequence),
                    lsn: Some(&lsn),
                    ..Default::default()
                },
                None,
            )
            .unwrap()
        };
        // The snapshot, the first transaction after it, its END (commit LSN 22120368), then
        // the next transaction, whose changes lie at lower LSNs than some of the first's.
        let snapshot = at(r#""[null,\"22119848\"]""#, "22119848");
        let first = at(r#""[null,\"22120176\"]""#, "22120176");
        let end = postgres_position(22120368, 0);
        let next = at(r#""[\"22120368\",\"22120100\"]""#, "22120100");
        assert!(snapshot < first && first < end && end < next);
    }

    #[test]
    fn binlog_and_lsn_positions() {
        let mysql = raw("\"mariadb\"");
        let (file, pos, row) = (raw("\"mysql-bin.000002\""), raw("1234"), raw("1"));
        let binlog = event_position(
            &SourcePosition {
                connector: Some(&mysql),
                file: Some(&file),
                pos: Some(&pos),
                row: Some(&row),
                ..Default::default()
            },
            None,
        );
        assert_eq!(
            binlog.as_deref(),
            Some("binlog:mysql-bin.000002:00000000000000001234:0000000001")
        );
        let unknown = raw("\"cassandra\"");
        let none = SourcePosition {
            connector: Some(&unknown),
            ..Default::default()
        };
        assert_eq!(event_position(&none, None), None);
    }
}
