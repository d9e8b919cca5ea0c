//! How a fleet report is shown: the JSON document of `status --json` and
//! `/api/status` (one shape for both), and the table of `status`.

use std::fmt::Write;

use serde::Serialize;
use time::OffsetDateTime;

use crate::evaluate::HiveRow;
use crate::fleet::{Fleet, Summary};

/// `{ "hives": [...], "summary": {...}, ... }`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub hives: Vec<HiveRow>,
    pub summary: Summary,
    pub stale_after_secs: u64,
    /// The reader's clock when the rows were evaluated (RFC 3339).
    pub generated_at: String,
    /// The same in milliseconds since the epoch: ages tick from it.
    pub server_time_ms: i64,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

impl Report {
    /// Every row of `fleet` evaluated at `now`, with their summary.
    pub fn of_fleet(fleet: &Fleet, now: OffsetDateTime) -> Report {
        let hives = fleet.peek_rows(now);
        let summary = Summary::of_rows(&hives);
        Report {
            hives,
            summary,
            stale_after_secs: fleet.stale_after().as_secs(),
            generated_at: now
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            server_time_ms: unix_ms(now),
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
                    if r.problems.is_empty() || r.reason.contains("does not decode") {
                        r.reason.clone()
                    } else {
                        format!("{} [{}]", r.reason, r.problems.join("; "))
                    },
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
        out
    }
}
