//! Watching each table's Kafka Connect schema while planning (driver only).
//!
//! Kafka Connect's ``JsonConverter`` writes a record's schema byte for byte the same until the
//! table's columns change (see :mod:`crate::envelope`), so a table's schema changed exactly where
//! the text of its records' schema did. Planning notes, per transaction, the first schema of each
//! table and every point where it differs from the one before, and keeps at each release only
//! the points where it differs from the schema of the table's previous released change: those
//! few texts go to Python, which reads them as table schemas and says what changed
//! (``sources/debezium_format/envelope_schemas.py``). Comparing is a byte comparison per change;
//! nothing is allocated unless a schema changes.
//!
//! MySQL's and MariaDB's connectors also write a schema change event for each DDL statement
//! (``ddl``, ``tableChanges``) before the changes it affects: its statement goes with the next
//! schema of its tables, where it tells a rename from a drop and an add.

use std::sync::Arc;

use rustc_hash::FxHashMap;

/// A table's schema from event ``at`` (0-based, in transaction order) of a released
/// transaction on: ``(at, table, schema text, DDL statements read for it before)``.
pub type Sighting = (i64, String, Arc<str>, Vec<Arc<str>>);

/// What a transaction noted: ``(at, index into its tables, schema text, DDL statements)`` in
/// log order.
pub type Noted = Vec<(i64, u32, Arc<str>, Vec<Arc<str>>)>;

/// At most this many DDL statements wait per table for its next schema.
const PENDING_LIMIT: usize = 64;

#[derive(Default)]
pub struct SchemaWatch {
    /// The schema of each table's most recently read change (shares one text among the
    /// transactions that noted it).
    read: FxHashMap<String, Arc<str>>,
    /// The schema of each table's most recently released change.
    released: FxHashMap<String, Arc<str>>,
    /// DDL statements read for each table since its schema was last noted.
    pending: FxHashMap<String, Vec<Arc<str>>>,
}

impl SchemaWatch {
    /// Note ``text``, the schema of a change of ``table`` (index ``table_index`` in the
    /// transaction's tables) at ``at``, when it is the table's first in ``noted`` or differs
    /// from its previous one there (driver, once per change in an envelope).
    pub fn note(&mut self, noted: &mut Noted, at: i64, table_index: u32, table: &str, text: &str) {
        let previous = noted.iter().rev().find(|(_, t, _, _)| *t == table_index);
        if previous.is_some_and(|(_, _, known, _)| **known == *text) {
            return;
        }
        let shared = match self.read.get(table) {
            Some(known) if **known == *text => known.clone(),
            _ => {
                let fresh: Arc<str> = text.into();
                self.read.insert(table.to_owned(), fresh.clone());
                fresh
            }
        };
        let ddls = if self.pending.is_empty() {
            Vec::new()
        } else {
            self.pending.remove(table).unwrap_or_default()
        };
        noted.push((at, table_index, shared, ddls));
    }

    /// Keep ``ddl``, a schema change event's statement, for the next schema noted of each of
    /// ``tables`` (driver, once per schema change event).
    pub fn ddl(&mut self, tables: &[String], ddl: &str) {
        let shared: Arc<str> = ddl.into();
        for table in tables {
            let kept = self.pending.entry(table.clone()).or_default();
            if kept.len() == PENDING_LIMIT {
                // A table whose changes are never read (not captured) keeps only its latest.
                kept.remove(0);
            }
            kept.push(shared.clone());
        }
    }

    /// The points of a transaction released now where a table's schema differs from its
    /// previous released change's, in transaction order (driver, once per released transaction
    /// that noted any).
    pub fn release(&mut self, mut noted: Noted, tables: &[(String, i64)]) -> Vec<Sighting> {
        noted.sort_by_key(|(at, _, _, _)| *at);
        let mut out = Vec::new();
        for (at, table_index, text, ddls) in noted {
            let table = &tables[table_index as usize].0;
            match self.released.get_mut(table) {
                Some(last) if Arc::ptr_eq(last, &text) || **last == *text => continue,
                Some(last) => *last = text.clone(),
                None => {
                    self.released.insert(table.clone(), text.clone());
                }
            }
            out.push((at, table.clone(), text, ddls));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> Vec<(String, i64)> {
        vec![("public.a".to_owned(), 0), ("public.b".to_owned(), 0)]
    }

    fn points(out: &[Sighting]) -> Vec<(i64, &str, &str)> {
        out.iter()
            .map(|(at, table, text, _)| (*at, table.as_str(), &**text))
            .collect()
    }

    #[test]
    fn a_tables_first_schema_and_each_change_are_kept() {
        let mut watch = SchemaWatch::default();
        let mut noted = Noted::new();
        for (at, table, text) in [(0, 0, "s1"), (1, 1, "t1"), (2, 0, "s1"), (3, 0, "s2")] {
            let name = tables()[table as usize].0.clone();
            watch.note(&mut noted, at, table, &name, text);
        }
        let out = watch.release(noted, &tables());
        assert_eq!(
            points(&out),
            vec![
                (0, "public.a", "s1"),
                (1, "public.b", "t1"),
                (3, "public.a", "s2")
            ]
        );
    }

    #[test]
    fn a_schema_released_before_is_not_repeated() {
        let mut watch = SchemaWatch::default();
        let mut first = Noted::new();
        watch.note(&mut first, 0, 0, "public.a", "s1");
        assert_eq!(watch.release(first, &tables()).len(), 1);
        let mut second = Noted::new();
        watch.note(&mut second, 0, 0, "public.a", "s1");
        assert!(watch.release(second, &tables()).is_empty());
        let mut third = Noted::new();
        watch.note(&mut third, 4, 0, "public.a", "s2");
        assert_eq!(
            points(&watch.release(third, &tables())),
            vec![(4, "public.a", "s2")]
        );
    }

    #[test]
    fn a_ddl_statement_goes_with_its_tables_next_schema() {
        let mut watch = SchemaWatch::default();
        let mut first = Noted::new();
        watch.note(&mut first, 0, 0, "public.a", "s1");
        watch.release(first, &tables());
        watch.ddl(
            &["public.a".to_owned()],
            "alter table a rename column x to y",
        );
        let mut second = Noted::new();
        watch.note(&mut second, 0, 1, "public.b", "t1");
        watch.note(&mut second, 1, 0, "public.a", "s2");
        let out = watch.release(second, &tables());
        let ddls: Vec<Vec<&str>> = out
            .iter()
            .map(|(_, _, _, d)| d.iter().map(|s| &**s).collect())
            .collect();
        assert_eq!(
            ddls,
            vec![vec![], vec!["alter table a rename column x to y"]]
        );
    }

    #[test]
    fn points_are_released_in_transaction_order() {
        let mut watch = SchemaWatch::default();
        let mut noted = Noted::new();
        watch.note(&mut noted, 5, 0, "public.a", "s2");
        watch.note(&mut noted, 1, 0, "public.a", "s1");
        let out = watch.release(noted, &tables());
        assert_eq!(
            points(&out),
            vec![(1, "public.a", "s1"), (5, "public.a", "s2")]
        );
    }
}
