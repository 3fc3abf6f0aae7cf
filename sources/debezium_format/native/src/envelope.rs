//! Skipping Kafka Connect's schema envelope without parsing it, once a schema was seen.
//!
//! Kafka Connect's ``JsonConverter`` (``schemas.enable=true``, its default) writes every record
//! as ``{"schema":S,"payload":P}``: S first, compact, and byte for byte the same for every record
//! of a table until its columns change (``JsonConverter.convertToJsonWithEnvelope`` in Apache
//! Kafka's ``connect/json``). S is most of a record (about 1.5 of 2 KB for the benchmark's
//! tables), and skipping it with a JSON parser was half of the decoder's time. A record that
//! starts with a schema already parsed and checked once is split with a byte comparison instead;
//! the payload is still parsed in full, so a record that is not valid JSON is never accepted.

/// The envelope schemas seen most recently (most recent first), as their exact text.
#[derive(Default)]
pub struct KnownSchemas {
    texts: Vec<Box<str>>,
}

/// ``{"schema":`` as the converter writes it (no whitespace).
const OPENING: &str = "{\"schema\":";
/// What follows the schema when the payload comes next.
const BETWEEN: &str = ",\"payload\":";
/// At most this many schemas are remembered: a table's topic keeps one until its columns change,
/// and a change log mixing tables cycles through a few.
const LIMIT: usize = 32;

impl KnownSchemas {
    /// ``(schema, payload)`` of ``line`` when it is ``{"schema":S,"payload":P}`` with ``S`` a
    /// known schema; ``P`` is unchecked text (the caller parses it as one JSON value). The
    /// schema found moves to the front.
    pub fn split<'a>(&mut self, line: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = line.strip_prefix(OPENING)?;
        let found = self.texts.iter().position(|known| {
            rest.as_bytes().starts_with(known.as_bytes())
                && rest.as_bytes()[known.len()..].starts_with(BETWEEN.as_bytes())
        })?;
        // A known schema ends with '}' (ASCII): the cut is on a character boundary.
        let length = self.texts[found].len();
        let payload = rest[length + BETWEEN.len()..].strip_suffix('}')?;
        if found > 0 {
            let schema = self.texts.remove(found);
            self.texts.insert(0, schema);
        }
        // The line's own copy: it lives as long as the line, which the record borrows.
        Some((&rest[..length], payload))
    }

    /// Remember ``schema``, the text of an envelope schema that parsed as a JSON object, when
    /// ``line`` starts with it exactly as the converter writes it.
    pub fn learn(&mut self, line: &str, schema: &str) {
        let written = line
            .strip_prefix(OPENING)
            .is_some_and(|rest| rest.starts_with(schema) && schema.ends_with('}'));
        if !written || self.texts.iter().any(|known| **known == *schema) {
            return;
        }
        self.texts.truncate(LIMIT - 1);
        self.texts.insert(0, schema.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{parse_line, parse_record, Record};

    const SCHEMA: &str = r#"{"type":"struct","name":"t.Envelope"}"#;

    fn line(schema: &str, payload: &str) -> String {
        format!(r#"{{"schema":{schema},"payload":{payload}}}"#)
    }

    #[test]
    fn a_learnt_schema_splits_later_records() {
        let mut known = KnownSchemas::default();
        let first = line(SCHEMA, r#"{"op":"c"}"#);
        assert!(
            known.split(&first).is_none(),
            "nothing is known before learning"
        );
        known.learn(&first, SCHEMA);
        let second = line(SCHEMA, r#"{"op":"u","after":{"id":1}}"#);
        assert_eq!(
            known.split(&second),
            Some((SCHEMA, r#"{"op":"u","after":{"id":1}}"#))
        );
    }

    #[test]
    fn other_schemas_spacing_and_key_orders_are_not_split() {
        let mut known = KnownSchemas::default();
        known.learn(&line(SCHEMA, "{}"), SCHEMA);
        let longer = r#"{"type":"struct","name":"t.Envelope","optional":true}"#;
        assert!(known.split(&line(longer, "{}")).is_none());
        assert!(known
            .split(&format!(r#"{{"schema": {SCHEMA},"payload":{{}}}}"#))
            .is_none());
        assert!(known
            .split(&format!(r#"{{"payload":{{}},"schema":{SCHEMA}}}"#))
            .is_none());
        assert!(known
            .split(&format!(r#"{{"schema":{SCHEMA},"other":1}}"#))
            .is_none());
    }

    #[test]
    fn schemas_not_written_as_the_line_starts_are_not_learnt() {
        let mut known = KnownSchemas::default();
        // Parsed from a line with whitespace: its text is not what the line starts with.
        known.learn(
            &format!(r#"{{ "schema": {SCHEMA}, "payload": {{}}}}"#),
            SCHEMA,
        );
        assert!(known.split(&line(SCHEMA, "{}")).is_none());
    }

    #[test]
    fn the_most_recent_schema_is_tried_first_and_old_ones_are_forgotten() {
        let mut known = KnownSchemas::default();
        let schemas: Vec<String> = (0..LIMIT + 1)
            .map(|i| format!(r#"{{"type":"struct","name":"t{i}"}}"#))
            .collect();
        for schema in &schemas {
            known.learn(&line(schema, "{}"), schema);
        }
        assert_eq!(known.texts.len(), LIMIT);
        assert!(
            known.split(&line(&schemas[0], "{}")).is_none(),
            "the oldest is forgotten"
        );
        assert!(known.split(&line(&schemas[1], "{}")).is_some());
        assert_eq!(&*known.texts[0], schemas[1]);
    }

    /// What a parse says, as text: every field a reader uses, or the error.
    fn said(line: &str, known: Option<&mut KnownSchemas>) -> String {
        match parse_record(line.as_bytes(), true, known) {
            Err(p) => format!("error {:?}: {} / {}", p.kind, p.problem, p.expected),
            Ok(Record::Skip(kind)) => format!("skip {kind:?}"),
            Ok(Record::Marker(m)) => format!(
                "marker end={} {} {} {:?} {:?} {:?}",
                m.end, m.txn_id, m.event_count, m.collections, m.ts_ms, m.position
            ),
            Ok(Record::Change(c)) => {
                let p = c.payload.expect("kept");
                format!(
                    "change {:?} {:?} {} {} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                    c.txn_id,
                    c.total_order,
                    c.table.qualified(),
                    c.op,
                    c.ts_ms,
                    c.snapshot,
                    c.position,
                    p.source_name,
                    p.key,
                    p.before,
                    p.after,
                    p.schema
                )
            }
        }
    }

    #[test]
    fn a_known_schema_parses_every_record_as_the_full_parse_does() {
        const ENVELOPE: &str =
            r#"{"type":"struct","fields":[],"optional":false,"name":"dbz.public.t.Envelope"}"#;
        let source =
            r#"{"name":"dbz","schema":"public","table":"t","ts_ms":5,"lsn":40,"snapshot":"false"}"#;
        let payloads = [
            format!(r#"{{"op":"c","before":null,"after":{{"id":1}},"source":{source},"transaction":{{"id":"7:40","total_order":1}},"ts_ms":6}}"#),
            format!(r#"{{"op":"u","before":{{"id":1}},"after":{{"id":2,"note":"é\u00e9"}},"source":{source},"ts_ms":6}}"#),
            r#"{"status":"BEGIN","id":"7:40","ts_ms":3}"#.to_owned(),
            r#"{"status":"END","id":"7:40","event_count":1,"data_collections":[{"data_collection":"public.t","event_count":1}]}"#.to_owned(),
            r#"{"status":"END","id":"7:40"}"#.to_owned(),
            format!(r#"{{"op":"x","source":{source}}}"#),
            r#"{"op":"c","after":{"id":1}}"#.to_owned(),
            r#"{"ts_ms":9}"#.to_owned(),
            "null".to_owned(),
            "[1,2]".to_owned(),
            r#"{"op":"c","after":{"id":1}"#.to_owned(),
            format!(r#"{{"op":"c","after":{{"id":1}},"source":{source}}} trailing"#),
        ];
        let mut known = KnownSchemas::default();
        let first = line(ENVELOPE, &payloads[0]);
        assert!(parse_line(first.as_bytes(), true).is_ok());
        said(&first, Some(&mut known)); // learns the schema
        assert!(
            !known.texts.is_empty(),
            "the envelope's schema was not learnt"
        );
        for payload in &payloads {
            let record = line(ENVELOPE, payload);
            assert_eq!(
                said(&record, Some(&mut known)),
                said(&record, None),
                "{record}"
            );
        }
    }
}
