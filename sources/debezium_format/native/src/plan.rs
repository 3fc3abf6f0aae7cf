//! The planner's units: released transactions waiting to be cut into batches (driver only).
//!
//! Planning keeps every released transaction until a batch delivers it, and an offset after
//! any of them needs the transactions still open at that point: those open when its release
//! group (the transactions one line let out) was released, plus the group's later members.
//! Kept here rather than as Python objects: most units never become an offset.

use std::collections::VecDeque;

use crate::assembler::{Delivered, Position, Transaction};
use crate::schemas::Sighting;

struct Unit {
    order: i64,
    txn_id: String,
    size: i64,
    first: Position,
    /// Absolute number of its release group.
    group: usize,
    after: Delivered,
    commit_ts_ms: Option<i64>,
    schemas: Vec<Sighting>,
}

struct Group {
    scan: Position,
    open_after: Vec<(String, Position)>,
    /// Absolute number of the group's last unit plus one.
    end: usize,
    /// Members dropped by :meth:`PlannedUnits::truncate`: still open after the kept ones.
    truncated: Vec<(String, Position)>,
}

/// What an offset right after a unit needs: the unit, where the log was read to, and the
/// transactions still open then (the unit itself not included).
pub struct UnitView<'a> {
    pub order: i64,
    pub txn_id: &'a str,
    pub size: i64,
    pub first: &'a Position,
    pub scan: &'a Position,
    pub open_after: Vec<(&'a str, &'a Position)>,
    pub after: &'a Delivered,
    pub commit_ts_ms: Option<i64>,
    pub schemas: &'a [Sighting],
}

#[derive(Default)]
pub struct PlannedUnits {
    units: VecDeque<Unit>,
    /// Absolute number of ``units[0]``.
    units_base: usize,
    groups: VecDeque<Group>,
    /// Absolute number of ``groups[0]``.
    groups_base: usize,
    changes: i64,
}

impl PlannedUnits {
    /// Add a release group: ``released`` let out at ``scan``, ``open_after`` still open then.
    pub fn add_group(
        &mut self,
        scan: Position,
        released: Vec<Transaction>,
        open_after: Vec<(String, Position)>,
    ) {
        let group = self.groups_base + self.groups.len();
        for txn in released {
            self.changes += txn.size;
            self.units.push_back(Unit {
                order: txn.order,
                txn_id: txn.txn_id,
                size: txn.size,
                first: txn.first,
                group,
                after: txn.after,
                commit_ts_ms: txn.commit_ts_ms,
                schemas: txn.schemas,
            });
        }
        let end = self.units_base + self.units.len();
        self.groups.push_back(Group {
            scan,
            open_after,
            end,
            truncated: Vec::new(),
        });
    }

    /// Merge every unit into one group at ``scan`` (resuming from an offset: everything re-read
    /// before its scan position is released there).
    pub fn regroup(&mut self, scan: Position, open_after: Vec<(String, Position)>) {
        let released: Vec<Transaction> = self
            .units
            .drain(..)
            .map(|u| Transaction {
                order: u.order,
                txn_id: u.txn_id,
                size: u.size,
                first: u.first,
                commit_ts_ms: u.commit_ts_ms,
                events: Vec::new(),
                after: u.after,
                streamed: false,
                schemas: u.schemas,
            })
            .collect();
        self.changes -= released.iter().map(|t| t.size).sum::<i64>();
        self.groups_base += self.groups.len();
        self.groups.clear();
        if !released.is_empty() {
            self.add_group(scan, released, open_after);
        }
    }

    pub fn changes(&self) -> i64 {
        self.changes
    }

    pub fn sizes(&self) -> Vec<i64> {
        self.units.iter().map(|u| u.size).collect()
    }

    pub fn view(&self, index: usize) -> Option<UnitView<'_>> {
        let unit = self.units.get(index)?;
        let group = &self.groups[unit.group - self.groups_base];
        let mut open_after: Vec<(&str, &Position)> = group
            .open_after
            .iter()
            .map(|(id, first)| (id.as_str(), first))
            .collect();
        let later =
            (self.units_base + index + 1)..group.end.min(self.units_base + self.units.len());
        open_after.extend(
            later
                .map(|n| &self.units[n - self.units_base])
                .map(|u| (u.txn_id.as_str(), &u.first)),
        );
        open_after.extend(
            group
                .truncated
                .iter()
                .map(|(id, first)| (id.as_str(), first)),
        );
        Some(UnitView {
            order: unit.order,
            txn_id: &unit.txn_id,
            size: unit.size,
            first: &unit.first,
            scan: &group.scan,
            open_after,
            after: &unit.after,
            commit_ts_ms: unit.commit_ts_ms,
            schemas: &unit.schemas,
        })
    }

    /// The indexes of the units whose schemas start or change.
    pub fn with_schemas(&self) -> Vec<usize> {
        (self.units.iter().enumerate())
            .filter(|(_, u)| !u.schemas.is_empty())
            .map(|(i, _)| i)
            .collect()
    }

    /// Forget the units beyond the first ``keep``. The kept units' offsets do not change: the
    /// dropped members of the last kept unit's group are still open after it.
    pub fn truncate(&mut self, keep: usize) {
        let mut dropped = Vec::new();
        while self.units.len() > keep {
            let unit = self.units.pop_back().expect("longer than keep");
            self.changes -= unit.size;
            dropped.push(unit);
        }
        let last_group = self.units.back().map(|u| u.group);
        while self
            .groups
            .back()
            .is_some_and(|_| Some(self.groups_base + self.groups.len() - 1) != last_group)
        {
            self.groups.pop_back();
        }
        if let (Some(group), Some(number)) = (self.groups.back_mut(), last_group) {
            dropped.reverse();
            group.truncated.extend(
                dropped
                    .into_iter()
                    .filter(|u| u.group == number)
                    .map(|u| (u.txn_id, u.first)),
            );
        }
    }

    /// Drop the first ``count`` units (delivered by a batch).
    pub fn drop_front(&mut self, count: usize) {
        for _ in 0..count.min(self.units.len()) {
            let unit = self.units.pop_front().expect("counted");
            self.changes -= unit.size;
        }
        self.units_base += count;
        while self
            .groups
            .front()
            .is_some_and(|g| g.end <= self.units_base)
        {
            self.groups.pop_front();
            self.groups_base += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(byte: u64) -> Position {
        Position {
            file: "f".into(),
            byte,
            line: byte,
        }
    }

    fn txn(order: i64, id: &str, first: u64) -> Transaction {
        Transaction {
            order,
            txn_id: id.to_owned(),
            size: 2,
            first: at(first),
            commit_ts_ms: None,
            events: Vec::new(),
            after: Delivered::default(),
            streamed: false,
            schemas: Vec::new(),
        }
    }

    fn open_ids(units: &PlannedUnits, index: usize) -> Vec<String> {
        let view = units.view(index).expect("planned");
        view.open_after
            .iter()
            .map(|(id, _)| (*id).to_owned())
            .collect()
    }

    #[test]
    fn a_units_open_set_is_its_groups_plus_the_groups_later_members() {
        let mut units = PlannedUnits::default();
        units.add_group(at(10), vec![txn(0, "a", 0)], vec![("z".into(), at(5))]);
        units.add_group(at(20), vec![txn(1, "b", 11), txn(2, "c", 12)], vec![]);
        assert_eq!(units.sizes(), vec![2, 2, 2]);
        assert_eq!(open_ids(&units, 0), vec!["z"]);
        assert_eq!(open_ids(&units, 1), vec!["c"]);
        assert!(open_ids(&units, 2).is_empty());
        assert_eq!(units.view(1).expect("planned").scan.byte, 20);
    }

    #[test]
    fn truncating_keeps_the_offsets_of_the_units_kept() {
        let mut units = PlannedUnits::default();
        units.add_group(
            at(20),
            vec![txn(0, "b", 11), txn(1, "c", 12), txn(2, "d", 13)],
            vec![],
        );
        units.add_group(at(30), vec![txn(3, "e", 21)], vec![]);
        units.truncate(1);
        assert_eq!(units.sizes(), vec![2]);
        assert_eq!(units.changes(), 2);
        assert_eq!(open_ids(&units, 0), vec!["c", "d"]);
    }

    #[test]
    fn dropping_delivered_units_keeps_a_partly_delivered_group() {
        let mut units = PlannedUnits::default();
        units.add_group(at(20), vec![txn(0, "b", 11), txn(1, "c", 12)], vec![]);
        units.add_group(at(30), vec![txn(2, "e", 21)], vec![("y".into(), at(25))]);
        units.drop_front(1);
        assert_eq!(units.sizes(), vec![2, 2]);
        assert!(open_ids(&units, 0).is_empty());
        assert_eq!(open_ids(&units, 1), vec!["y"]);
        units.drop_front(1);
        assert_eq!(open_ids(&units, 0), vec!["y"]);
        assert_eq!(units.view(0).expect("planned").order, 2);
    }

    #[test]
    fn regrouping_releases_everything_at_one_scan_position() {
        let mut units = PlannedUnits::default();
        units.add_group(at(20), vec![txn(0, "b", 11)], vec![("c".into(), at(12))]);
        units.add_group(at(25), vec![txn(1, "c", 12)], vec![]);
        units.regroup(at(40), vec![("q".into(), at(33))]);
        assert_eq!(units.sizes(), vec![2, 2]);
        assert_eq!(units.view(0).expect("planned").scan.byte, 40);
        assert_eq!(open_ids(&units, 0), vec!["q", "c"]);
        assert_eq!(open_ids(&units, 1), vec!["q"]);
    }
}
