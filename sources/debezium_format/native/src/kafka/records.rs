//! What each record read from a partition is: which unit it belongs to, or none.

use super::*;

impl KafkaAssembler {
    pub(super) fn new_unit(&mut self, unit: Unit) -> UnitId {
        self.units.push(unit);
        self.units.len() - 1
    }

    /// Record that ``id`` has a record at ``offset`` of partition ``part``.
    pub(super) fn own(&mut self, part: usize, offset: i64, id: UnitId) {
        self.parts[part].records.push_back(Rec {
            offset,
            owner: Owner::Unit(id),
        });
        let unit = &mut self.units[id];
        if !unit.parts.contains(&part) {
            unit.parts.push(part);
        }
    }

    pub(super) fn nobody(&mut self, part: usize, offset: i64, owner: Owner) {
        self.parts[part].records.push_back(Rec { offset, owner });
    }

    pub(super) fn feed_record(
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
        let record =
            parse_record(data, false, Some(&mut self.known)).map_err(|p| (p, part, offset))?;
        match record {
            Record::Skip(kind) => {
                match kind {
                    Skipped::Tombstone => self.tombstones += 1,
                    Skipped::Heartbeat => self.heartbeats += 1,
                    Skipped::SchemaChange => self.schema_changes += 1,
                }
                self.nobody(part, offset, Owner::Nobody);
            }
            Record::Marker(_) if !self.transactions => {
                // A transaction topic the subscription matches, read as data: its markers
                // close nothing here.
                self.nobody(part, offset, Owner::Nobody);
            }
            Record::Marker(marker) => self.marker(part, offset, marker)?,
            Record::Change(change) if !self.transactions => {
                if change.snapshot.in_initial() {
                    self.snapshot_row(part, offset, change)?;
                } else {
                    self.single(part, offset, &change);
                }
            }
            Record::Change(change) => match change.txn_id.as_deref() {
                Some(_) => self.txn_change(part, offset, change)?,
                None if change.snapshot.in_initial() => self.snapshot_row(part, offset, change)?,
                None if change.snapshot == SnapshotMark::Incremental => {
                    self.chunk_row(part, offset, change)
                }
                None => self.single(part, offset, &change),
            },
        }
        Ok(())
    }

    /// A change that is a unit of its own: complete once read, released once every partition
    /// has been read up to the target in force and no earlier record of its partition waits.
    pub(super) fn single(&mut self, part: usize, offset: i64, change: &Change<'_>) {
        let key = format!("{}:{offset}", self.parts[part].name);
        let id = self.new_unit(Unit::new(Kind::Single, key, (part, offset)));
        self.count(id, change);
        self.units[id].end = Some(End {
            event_count: 1,
            collections: None,
            ts_ms: None,
            position: None,
        });
        self.units[id].barrier = self.targets.len().checked_sub(1);
        self.units[id].closed_ms = self.fed_ms;
        self.own(part, offset, id);
        self.singles.push_back(id);
    }

    pub(super) fn count(&mut self, id: UnitId, change: &Change<'_>) {
        let unit = &mut self.units[id];
        unit.count += 1;
        let table_index = match unit
            .tables
            .iter_mut()
            .position(|(name, _)| change.table.is(name))
        {
            Some(i) => {
                unit.tables[i].1 += 1;
                i
            }
            None => {
                unit.tables.push((change.table.qualified(), 1));
                unit.tables.len() - 1
            }
        };
        if let Some(text) = change.envelope {
            // A transaction's rows are numbered by total_order; other units' in read order
            // (a schema change inside a snapshot or a chunk is not expected: see
            // envelope_schemas.follow_units).
            let at = change.total_order.map_or(unit.count - 1, |o| o - 1);
            let table = &unit.tables[table_index].0;
            self.watch
                .note(&mut unit.schemas, at, table_index as u32, table, text);
        }
        if let Some(ts) = change.ts_ms {
            if unit.max_ts.is_none_or(|m| ts > m) {
                unit.max_ts = Some(ts);
            }
        }
        further(&mut unit.position, change.position.clone());
    }

    pub(super) fn txn_unit(&mut self, txn_id: &str, first: (usize, i64)) -> UnitId {
        if let Some(&id) = self.txns.get(txn_id) {
            return id;
        }
        let unit = Unit::new(Kind::Txn, txn_id.to_owned(), first);
        let id = self.new_unit(unit);
        self.txns.insert(txn_id.to_owned(), id);
        id
    }

    /// A BEGIN or END of the transaction topic.
    ///
    /// Debezium repeats a transaction whole after a restart (BEGIN, events, END again). An END
    /// at or before what was released is such a repeat: dropped with what was read of it, and
    /// its id remembered so that its events read later (another partition) are dropped too. A
    /// second END of a transaction still open, with the same ``event_count``, is the repeat of
    /// one not yet released: dropped alone.
    pub(super) fn marker(
        &mut self,
        part: usize,
        offset: i64,
        marker: Marker<'_>,
    ) -> Result<(), Failure> {
        if marker.end && self.repeated.contains(marker.txn_id.as_ref()) {
            self.nobody(part, offset, Owner::Dropped);
            return Ok(());
        }
        let id = self.txn_unit(&marker.txn_id, (part, offset));
        if !marker.end {
            self.own(part, offset, id);
            return Ok(());
        }
        let quoted = py_repr_str(&marker.txn_id);
        if let Some(end) = &self.units[id].end {
            if end.event_count == marker.event_count {
                self.nobody(part, offset, Owner::Dropped);
                return Ok(());
            }
            return Err(fail(
                ErrorKind::DuplicateTransaction,
                part,
                offset,
                format!(
                    "a second END of transaction {quoted}, with event_count={} where the first \
                     said {}",
                    marker.event_count, end.event_count
                ),
                "one BEGIN and one END per transaction id (the same END again after a restart)",
            ));
        }
        let behind = matches!(
            (&marker.position, &self.high),
            (Some(position), Some(high)) if position <= high
        );
        if behind {
            self.repeats += self.units[id].count;
            self.txns.remove(marker.txn_id.as_ref());
            self.remember_repeat(marker.txn_id.into_owned());
            self.drop_unit(id);
            self.nobody(part, offset, Owner::Dropped);
            return Ok(());
        }
        self.own(part, offset, id);
        let unit = &mut self.units[id];
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
        unit.closed_ms = self.fed_ms;
        self.ended.push_back(id);
        Ok(())
    }

    /// Remember a transaction id dropped as a repeat (a bounded window of the latest ones).
    pub(super) fn remember_repeat(&mut self, txn_id: String) {
        if self.repeated.insert(txn_id.clone()) {
            self.repeated_order.push_back(txn_id);
            if self.repeated_order.len() > REPEATS_REMEMBERED {
                if let Some(old) = self.repeated_order.pop_front() {
                    self.repeated.remove(&old);
                }
            }
        }
    }

    pub(super) fn txn_change(
        &mut self,
        part: usize,
        offset: i64,
        change: Change<'_>,
    ) -> Result<(), Failure> {
        let txn_id = change
            .txn_id
            .as_deref()
            .expect("a transaction change")
            .to_owned();
        if self.repeated.contains(&txn_id) {
            // An event of a transaction whose repeated END was read first (another partition).
            self.repeats += 1;
            self.nobody(part, offset, Owner::Dropped);
            return Ok(());
        }
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
    pub(super) fn snapshot_row(
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
                if self.snapshot_delivered
                    && change.position.is_some()
                    && change.position == self.snapshot_position
                {
                    return Err(fail(
                        ErrorKind::LateRecord,
                        part,
                        offset,
                        "a record of Debezium's initial snapshot became visible after the \
                         snapshot was delivered: Kafka made it visible later than records sent \
                         after it to other partitions, by more than the connector waits \
                         (snapshotSettle). Delivered now, it would be a part of the snapshot \
                         apart from the rest"
                            .to_owned(),
                        "records of one snapshot visible within snapshotSettle of its last one: \
                         raise snapshotSettle, or use Kafka Connect's exactly-once source support \
                         (its records become visible together), and start over with a new \
                         checkpointLocation (and an empty table)",
                    ));
                }
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
            unit.closed_ms = self.fed_ms;
        }
        Ok(())
    }

    pub(super) fn chunk_row(&mut self, part: usize, offset: i64, change: Change<'_>) {
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
}
