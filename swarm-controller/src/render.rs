//! How a fleet report is shown: the JSON document of `status --json`,
//! `/api/status` and the dashboard's snapshot (one shape for all three),
//! and the table of `status`.

use std::cell::RefCell;
use std::fmt::Write;

use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;
use time::OffsetDateTime;

use crate::age::unix_ms;
use crate::fleet::{Fleet, Summary, Tally};
use crate::view::{Query, ViewRow};

/// `{ "hives": [...], "summary": {...}, ... }`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The rows the query asked for (every row without one).
    pub hives: Vec<ViewRow>,
    /// The whole fleet, whatever the query.
    pub summary: Summary,
    /// How many rows matched the query's filter, before paging.
    pub matched: usize,
    /// The query's page: the first row's position among the matches, and
    /// the page size (`null`: no limit).
    pub offset: usize,
    pub limit: Option<usize>,
    pub stale_after_secs: u64,
    /// The reader's clock when the rows were evaluated (RFC 3339).
    pub generated_at: String,
    /// The same in milliseconds since the epoch: ages tick from it.
    pub server_time_ms: i64,
    /// The staged rollout in `hyperhive-rollouts`, if one was ever recorded
    /// (`rollout status --json`'s document; its `line` says wave k of n and
    /// a halt's reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<serde_json::Value>,
}

impl Report {
    /// Every row of `fleet` evaluated at `now`, with their summary.
    pub fn of_fleet(fleet: &Fleet, now: OffsetDateTime) -> Report {
        let hives = fleet.peek_rows(now);
        Report {
            summary: Summary::of_rows(&hives),
            matched: hives.len(),
            hives,
            ..Report::header(fleet, now)
        }
    }

    /// The page of rows `query` asks for, chosen by the classes of the rows
    /// last handed out and evaluated at `now`; the summary is the fleet's.
    /// Its cost grows with the page, plus one class test per hive.
    pub fn of_query(fleet: &Fleet, query: &Query, now: OffsetDateTime) -> Report {
        let selection = fleet.select(query);
        let hives = selection
            .names
            .iter()
            .filter_map(|name| fleet.peek_row(name, now))
            .collect();
        Report {
            hives,
            summary: fleet.summary(),
            matched: selection.matched,
            offset: query.offset,
            limit: query.limit,
            ..Report::header(fleet, now)
        }
    }

    fn header(fleet: &Fleet, now: OffsetDateTime) -> Report {
        Report {
            hives: Vec::new(),
            summary: fleet.summary(),
            matched: 0,
            offset: 0,
            limit: None,
            stale_after_secs: fleet.stale_after().as_secs(),
            generated_at: now
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            server_time_ms: unix_ms(now),
            rollout: None,
        }
    }

    /// A table for people, ending with the one-line summary.
    pub fn table(&self) -> String {
        let headers = [
            "HIVE",
            "FRESHNESS",
            "AGE",
            "CONVERGENCE",
            "DECLARED",
            "CONVERGED",
            "REASON",
        ];
        let dash = || "-".to_string();
        let rows: Vec<[String; 7]> = self
            .hives
            .iter()
            .map(|r| {
                [
                    r.name.clone(),
                    r.freshness.to_string(),
                    r.age_secs
                        .map(|a| crate::age::human_age(std::time::Duration::from_secs(a)))
                        .unwrap_or_else(dash),
                    r.convergence.to_string(),
                    r.declared_revision
                        .map(|v| v.to_string())
                        .unwrap_or_else(dash),
                    r.converged_revision
                        .map(|v| v.to_string())
                        .unwrap_or_else(dash),
                    reason_cell(r),
                ]
            })
            .collect();
        let mut widths = headers.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    text.push_str(cell);
                } else {
                    let _ = write!(text, "{cell:<width$}  ", width = widths[i]);
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&headers.map(str::to_string));
        for row in &rows {
            line(row);
        }
        out.push('\n');
        out.push_str(&self.summary.line);
        out.push('\n');
        if let Some(line) = self.rollout.as_ref().and_then(|r| r["line"].as_str()) {
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// `status --json`'s document for every row of `fleet` at `now`, written
/// while the rows are evaluated: the bytes of [`Report::of_fleet`] with
/// `rollout` set, serialized, but neither the rows nor the text are ever
/// held whole (the summary follows the rows in the document, so it is
/// counted on the way, and returned). `pretty`: indented, as `print_json`
/// prints; else one line.
pub fn write_fleet(
    fleet: &Fleet,
    now: OffsetDateTime,
    rollout: Option<&serde_json::Value>,
    pretty: bool,
    out: impl std::io::Write,
) -> serde_json::Result<Summary> {
    let doc = Streamed {
        fleet,
        now,
        rollout,
        tally: RefCell::new(Tally::default()),
    };
    if pretty {
        serde_json::to_writer_pretty(out, &doc)?;
    } else {
        serde_json::to_writer(out, &doc)?;
    }
    Ok(doc.tally.into_inner().summary())
}

struct Streamed<'a> {
    fleet: &'a Fleet,
    now: OffsetDateTime,
    rollout: Option<&'a serde_json::Value>,
    tally: RefCell<Tally>,
}

/// The `hives` array of a [`Streamed`] document, counted into its tally.
struct StreamedRows<'a>(&'a Streamed<'a>);

impl Serialize for StreamedRows<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let doc = self.0;
        s.collect_seq(
            doc.fleet
                .rows(doc.now)
                .inspect(|row| doc.tally.borrow_mut().add(row)),
        )
    }
}

impl Serialize for Streamed<'_> {
    /// [`Report`]'s fields in [`Report`]'s order.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let header = Report::header(self.fleet, self.now);
        let mut st = s.serialize_struct("Report", 9)?;
        st.serialize_field("hives", &StreamedRows(self))?;
        let summary = self.tally.borrow().summary();
        st.serialize_field("summary", &summary)?;
        st.serialize_field("matched", &summary.hives)?;
        st.serialize_field("offset", &header.offset)?;
        st.serialize_field("limit", &header.limit)?;
        st.serialize_field("stale_after_secs", &header.stale_after_secs)?;
        st.serialize_field("generated_at", &header.generated_at)?;
        st.serialize_field("server_time_ms", &header.server_time_ms)?;
        match self.rollout {
            Some(r) => st.serialize_field("rollout", r)?,
            None => st.skip_field("rollout")?,
        }
        st.end()
    }
}

/// The REASON cell: the hold first when the hive is in maintenance, then
/// the convergence reason, with any decode problems.
fn reason_cell(r: &crate::evaluate::HiveRow) -> String {
    let reason = if r.problems.is_empty() || r.reason.contains("does not decode") {
        r.reason.clone()
    } else {
        format!("{} [{}]", r.reason, r.problems.join("; "))
    };
    match &r.maintenance {
        Some(m) => format!("in maintenance {}; {reason}", m.line()),
        None => reason,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use async_nats::jetstream::kv::Operation;
    use swarm_queue_client::test_support::HiveStatusBuilder;
    use swarm_queue_client::{encode, AgentName, AgentSpec, Declaration, HiveName, HiveState};

    use super::*;
    use crate::config::RosterEntry;
    use crate::fleet::{Source, Update};

    fn t0() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    /// Rostered hives that converged, progress, never reported, and one
    /// unrostered key with an undecodable status.
    fn fleet() -> Fleet {
        let roster = ["a", "b", "c"]
            .iter()
            .map(|n| (HiveName::new(*n).unwrap(), RosterEntry::default()))
            .collect();
        let mut fleet = Fleet::new(roster, Duration::from_secs(60), t0());
        let spec = AgentSpec {
            image: Some("busybox:1".into()),
            ..Default::default()
        };
        let declaration = encode(&Declaration::new(BTreeMap::from([(
            AgentName::new("bot").unwrap(),
            spec,
        )])))
        .unwrap();
        let a = encode(&HiveStatusBuilder::new("a", HiveState::Ok).build()).unwrap();
        let b = encode(&HiveStatusBuilder::new("b", HiveState::Degraded).build()).unwrap();
        let values: [(Source, &str, &[u8]); 5] = [
            (Source::Wanted, "a", &declaration),
            (Source::Status, "a", &a),
            (Source::Wanted, "b", &declaration),
            (Source::Status, "b", &b),
            (Source::Status, "zz-unrostered", b"{not json"),
        ];
        for (source, key, value) in values {
            fleet.store(Update {
                source,
                key,
                revision: 3,
                created: t0(),
                operation: Operation::Put,
                value,
            });
        }
        fleet
    }

    #[test]
    fn the_streamed_document_is_the_report_byte_for_byte() {
        let fleet = fleet();
        let now = t0() + Duration::from_secs(5);
        let rollout = serde_json::json!({ "line": "wave 1 of 2" });
        for rollout in [None, Some(&rollout)] {
            let mut report = Report::of_fleet(&fleet, now);
            report.rollout = rollout.cloned();
            assert_eq!(report.hives.len(), 4);
            for pretty in [true, false] {
                let mut streamed = Vec::new();
                let summary = write_fleet(&fleet, now, rollout, pretty, &mut streamed).unwrap();
                assert_eq!(summary, report.summary);
                let whole = if pretty {
                    serde_json::to_string_pretty(&report).unwrap()
                } else {
                    serde_json::to_string(&report).unwrap()
                };
                assert_eq!(String::from_utf8(streamed).unwrap(), whole);
            }
        }
    }
}
