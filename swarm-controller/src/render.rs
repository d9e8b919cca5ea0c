//! How a fleet report is shown: the JSON document of `status --json`,
//! `/api/status` and the dashboard's snapshot (one shape for all three),
//! and the table of `status`.

use std::fmt::Write;

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
    mut out: impl std::io::Write,
) -> serde_json::Result<Summary> {
    write_fleet_to(fleet, now, rollout, pretty, &mut out)
}

/// [`write_fleet`], compiled once, here: the rows are serialized into
/// buffers and `out` is given a run of them at a time. Generic over the
/// writer, the whole of it was compiled anew in each crate that called it,
/// and its speed moved with that crate's code: the status bench's library
/// path wrote the same document in 18.6 to 21.3 ms from one build of the
/// bench and in 31.9 to 35.5 ms from another that differed only in code
/// the write never runs (runs A to F of docs/benchmarks-controller.md,
/// stop 38).
fn write_fleet_to(
    fleet: &Fleet,
    now: OffsetDateTime,
    rollout: Option<&serde_json::Value>,
    pretty: bool,
    out: &mut dyn std::io::Write,
) -> serde_json::Result<Summary> {
    // The document is the header's with the rows written into its empty
    // `hives` array; the summary, counted from the rows, comes after them.
    let header = |summary| header_text(fleet, now, rollout, pretty, summary);
    let opening = header(Tally::default().summary())?;
    out.write_all(&opening[..rows_at(&opening)])
        .map_err(serde_json::Error::io)?;

    // Evaluating and serializing a row is most of the work (at 10,000
    // hives, 39 ms of one thread), and one row needs nothing of another:
    // the rows are dealt in runs to two threads, each of which serializes
    // a run into a buffer, and this one writes the buffers out in order.
    // When this thread serialized every other run itself, it also wrote
    // all of them into the pipe, and the other thread waited on it. What
    // is held is at most five runs' text (one being filled and one
    // waiting for each thread, one being written out).
    let runs = fleet.len().div_ceil(ROWS_PER_RUN);
    let tally = std::thread::scope(|threads| -> serde_json::Result<Tally> {
        let mut lanes = Vec::with_capacity(RENDER_THREADS);
        for lane in 0..RENDER_THREADS.min(runs) {
            let (written, take_written) = std::sync::mpsc::sync_channel::<(Vec<u8>, Tally)>(1);
            let (give_back, returned) = std::sync::mpsc::channel::<Vec<u8>>();
            threads.spawn(move || {
                let mut rows = fleet.rows_dealt(now, ROWS_PER_RUN, lane, RENDER_THREADS);
                for run in (lane..runs).step_by(RENDER_THREADS) {
                    let mut text = returned.try_recv().unwrap_or_default();
                    text.clear();
                    let mut tally = Tally::default();
                    let mine = rows.by_ref().take(ROWS_PER_RUN);
                    // Writing into a Vec cannot fail; serializing a row
                    // has no fallible part.
                    let _ = write_rows(&mut text, mine, run == 0, pretty, &mut tally);
                    // The writer stopped (its output failed): so does this.
                    if written.send((text, tally)).is_err() {
                        return;
                    }
                }
            });
            lanes.push((take_written, give_back));
        }
        let mut tally = Tally::default();
        for run in 0..runs {
            let (take_written, give_back) = &lanes[run % RENDER_THREADS];
            let Ok((text, theirs)) = take_written.recv() else {
                // Only a panic ends a thread early; the scope passes it on.
                break;
            };
            out.write_all(&text).map_err(serde_json::Error::io)?;
            tally.merge(&theirs);
            let _ = give_back.send(text);
        }
        Ok(tally)
    })?;

    let closing = header(tally.summary())?;
    let rest = &closing[rows_at(&closing)..];
    if pretty && runs > 0 {
        out.write_all(b"\n  ").map_err(serde_json::Error::io)?;
    }
    out.write_all(rest).map_err(serde_json::Error::io)?;
    Ok(tally.summary())
}

/// The document without rows, serialized: its `hives` array empty.
fn header_text(
    fleet: &Fleet,
    now: OffsetDateTime,
    rollout: Option<&serde_json::Value>,
    pretty: bool,
    summary: Summary,
) -> serde_json::Result<Vec<u8>> {
    let mut doc = Report::header(fleet, now);
    doc.summary = summary;
    doc.matched = doc.summary.hives;
    doc.rollout = rollout.cloned();
    if pretty {
        serde_json::to_vec_pretty(&doc)
    } else {
        serde_json::to_vec(&doc)
    }
}

/// Rows a thread of [`write_fleet`] takes at a time.
const ROWS_PER_RUN: usize = 256;

/// Threads of [`write_fleet`] that serialize rows.
const RENDER_THREADS: usize = 2;

/// Where the rows go in a serialized header: just inside its empty
/// `hives` array (the first field, so the first `[]`), before its `]`.
fn rows_at(header: &[u8]) -> usize {
    header
        .windows(2)
        .position(|w| w == b"[]")
        .map_or(0, |i| i + 1)
}

/// Each of `rows` as an element of the document's `hives` array, after a
/// first one when `first` is false, counted into `tally`.
fn write_rows(
    out: &mut Vec<u8>,
    rows: impl Iterator<Item = ViewRow>,
    mut first: bool,
    pretty: bool,
    tally: &mut Tally,
) -> serde_json::Result<()> {
    for row in rows {
        tally.add(&row);
        let gap: &[u8] = match (pretty, first) {
            (true, true) => b"\n    ",
            (true, false) => b",\n    ",
            (false, true) => b"",
            (false, false) => b",",
        };
        out.extend_from_slice(gap);
        if pretty {
            row.serialize(&mut serde_json::Serializer::with_formatter(
                &mut *out,
                PrettyAt::new(2),
            ))?;
        } else {
            row.serialize(&mut serde_json::Serializer::new(&mut *out))?;
        }
        first = false;
    }
    Ok(())
}

/// serde_json's pretty formatter (two spaces an indent), starting `level`
/// indents deep: a row written alone reads byte for byte as it would
/// inside the whole document.
struct PrettyAt {
    level: usize,
    has_value: bool,
}

impl PrettyAt {
    fn new(level: usize) -> Self {
        PrettyAt {
            level,
            has_value: false,
        }
    }

    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.level += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.level -= 1;
        if self.has_value {
            w.write_all(b"\n")?;
            self.indent(w)?;
        }
        w.write_all(bracket)
    }

    fn next<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        w.write_all(if first { b"\n" } else { b",\n" })?;
        self.indent(w)
    }

    fn indent<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        for _ in 0..self.level {
            w.write_all(b"  ")?;
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for PrettyAt {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.next(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.next(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
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

    /// [`fleet`] with `extra` more hives that never reported: rows enough
    /// for several runs of [`ROWS_PER_RUN`], dealt to both threads.
    fn fleet_of(extra: usize) -> Fleet {
        let mut fleet = fleet();
        let (a, declaration) = {
            let d = encode(&Declaration::new(BTreeMap::new())).unwrap();
            (
                encode(&HiveStatusBuilder::new("a", HiveState::Ok).build()).unwrap(),
                d,
            )
        };
        for i in 0..extra {
            let key = format!("m{i:05}");
            // Every third with a declaration, every fifth claiming another
            // hive's name: rows of several classes in every run.
            let values: Vec<(Source, &[u8])> = match (i % 3, i % 5) {
                (0, 0) => vec![(Source::Wanted, &declaration), (Source::Status, &a)],
                (0, _) => vec![(Source::Wanted, &declaration)],
                (_, 0) => vec![(Source::Status, &a)],
                _ => vec![(Source::Status, b"{not json")],
            };
            for (source, value) in values {
                fleet.store(Update {
                    source,
                    key: &key,
                    revision: 4,
                    created: t0(),
                    operation: Operation::Put,
                    value,
                });
            }
        }
        fleet
    }

    #[test]
    fn the_streamed_document_is_the_report_byte_for_byte() {
        let now = t0() + Duration::from_secs(5);
        let rollout = serde_json::json!({ "line": "wave 1 of 2" });
        let empty = Fleet::new(Default::default(), Duration::from_secs(60), t0());
        // No rows; one run; one row past two whole runs (the last run is
        // the first thread's, with one row); three whole runs (the last is
        // the second thread's).
        let fleets = [
            (empty, 0),
            (fleet(), 4),
            (fleet_of(2 * ROWS_PER_RUN - 3), 2 * ROWS_PER_RUN + 1),
            (fleet_of(3 * ROWS_PER_RUN - 4), 3 * ROWS_PER_RUN),
        ];
        for ((fleet, rows), rollout) in fleets.iter().flat_map(|f| [(f, None), (f, Some(&rollout))])
        {
            let mut report = Report::of_fleet(fleet, now);
            report.rollout = rollout.cloned();
            assert_eq!(report.hives.len(), *rows);
            for pretty in [true, false] {
                let mut streamed = Vec::new();
                let summary = write_fleet(fleet, now, rollout, pretty, &mut streamed).unwrap();
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

    /// A reader that goes away (`status --json | head`): the write fails
    /// at once, wherever the output stops, and the threads evaluating the
    /// runs end too (the test would hang on them otherwise).
    #[test]
    fn a_failed_write_ends_the_document_and_the_threads() {
        struct Closes(usize);
        impl std::io::Write for Closes {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if buf.len() > self.0 {
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                }
                self.0 -= buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let fleet = fleet_of(6 * ROWS_PER_RUN);
        let now = t0();
        let mut whole = Vec::new();
        write_fleet(&fleet, now, None, true, &mut whole).unwrap();
        // In the opening, in the first thread's first run, in the
        // second's first run, in the last run, in the closing.
        let run = whole.len() / 7;
        for after in [
            5,
            run / 2,
            run + run / 2,
            6 * run + run / 2,
            whole.len() - 5,
        ] {
            let evaluated = fleet.rows_evaluated();
            let err = write_fleet(&fleet, now, None, true, Closes(after)).unwrap_err();
            assert!(err.is_io(), "{err}");
            assert!(
                fleet.rows_evaluated() - evaluated <= fleet.len() as u64,
                "no row evaluated twice"
            );
        }
    }
}
