//! When units are complete and may be released, in the one order of every partition.

use super::*;

impl KafkaAssembler {
    pub(super) fn drop_unit(&mut self, id: UnitId) {
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
    pub(super) fn clear(&mut self, id: UnitId) -> bool {
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
    pub(super) fn reached(&self, id: UnitId) -> bool {
        let unit = &self.units[id];
        let Some(first) = unit.barrier else {
            return false;
        };
        // A transaction is whole by its END's counts; a unit without a count waits for a
        // target taken settle_ms after its closing record was sent.
        let after = match unit.closed_ms {
            Some(sent) if unit.kind != Kind::Txn && self.settle_ms > 0 => {
                Some(sent + self.settle_ms)
            }
            _ => None,
        };
        let target = match after {
            None => Some(first),
            Some(after) => (first..self.targets.len())
                .find(|&t| self.targets[t].1.is_some_and(|taken| taken >= after)),
        };
        target.is_some_and(|t| {
            self.targets[t]
                .0
                .iter()
                .zip(&self.parts)
                .all(|(&end, part)| part.next >= end)
        })
    }

    pub(super) fn block_complete(&self, id: UnitId) -> bool {
        self.units[id].end.is_some() && self.reached(id)
    }

    /// Whether a transaction's END and all its events have been read.
    pub(super) fn txn_whole(&self, id: UnitId) -> bool {
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

    pub(super) fn txn_complete(&self, id: UnitId) -> bool {
        self.txn_whole(id) && self.reached(id)
    }

    pub(super) fn release(&mut self, id: UnitId) {
        let order = self.next_order;
        self.next_order += 1;
        let unit = &mut self.units[id];
        unit.order = Some(order);
        if unit.kind == Kind::Txn {
            self.txns.remove(&unit.key);
        }
        if unit.kind == Kind::Snapshot {
            // Its position is the snapshot's, not one streamed changes are compared with.
            self.snapshot_delivered = true;
            self.snapshot_position.clone_from(&unit.position);
        } else {
            further(&mut self.high, unit.position.clone());
        }
        let schemas = if unit.schemas.is_empty() {
            Vec::new()
        } else {
            let noted = std::mem::take(&mut unit.schemas);
            self.watch.release(noted, &unit.tables)
        };
        self.planned.push(Planned {
            id,
            order,
            size: unit.count,
            high: self.high.clone(),
            schemas,
        });
    }

    /// Release every unit that can be, in order. Driver, after each fed block.
    pub(super) fn release_all(&mut self) {
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
    pub(super) fn settle_transaction(&mut self, id: UnitId) {
        let unit = &self.units[id];
        let behind = matches!((&unit.position, &self.high), (Some(p), Some(h)) if p <= h);
        if unit.count == 0 || behind {
            self.repeats += unit.count;
            let key = unit.key.clone();
            self.txns.remove(&key);
            self.drop_unit(id);
        } else {
            self.release(id);
        }
    }

    /// The changes of block unit ``id`` in the partitions before ``part`` (its rows there come
    /// first in its event order).
    pub(super) fn block_base(&self, id: UnitId, part: usize) -> i64 {
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
    pub(super) fn close_chunks(&mut self) {
        let ended: Vec<(Option<String>, Option<i64>)> = self
            .ended
            .iter()
            .map(|&id| {
                let unit = &self.units[id];
                (
                    unit.end.as_ref().and_then(|e| e.position.clone()),
                    unit.closed_ms,
                )
            })
            .collect();
        let keys: Vec<(String, UnitId)> =
            self.chunks.iter().map(|(k, &id)| (k.clone(), id)).collect();
        for (key, id) in keys {
            if self.units[id].end.is_some() {
                continue;
            }
            let closing = ended
                .iter()
                .find(|(position, _)| position.as_ref().is_some_and(|p| key < *p));
            if let Some((_, sent)) = closing {
                let count = self.units[id].count;
                let unit = &mut self.units[id];
                unit.end = Some(End {
                    event_count: count,
                    collections: None,
                    ts_ms: None,
                    position: None,
                });
                unit.barrier = self.targets.len().checked_sub(1);
                unit.closed_ms = *sent;
            }
        }
    }

    pub(super) fn planned_index(&self, order: i64) -> PyResult<usize> {
        let first = self.planned.first().map_or(self.next_order, |p| p.order);
        usize::try_from(order - first)
            .ok()
            .filter(|&i| i < self.planned.len())
            .ok_or_else(|| PyValueError::new_err(format!("no planned unit with order {order}")))
    }
}
