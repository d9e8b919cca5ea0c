//! How a fleet report is shown: the JSON document of `status --json`,
//! `/api/status` and the dashboard's snapshot (one shape for all three),
//! and the table of `status`.

use std::fmt::Write;

use serde::Serialize;
use time::OffsetDateTime;

use crate::fleet::{Fleet, Summary};
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

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
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
                        .map(|a| crate::evaluate::human_age(std::time::Duration::from_secs(a)))
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
