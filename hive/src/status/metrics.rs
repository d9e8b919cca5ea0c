//! The Prometheus text exposition of a [`Snapshot`], for `/metrics`. It is
//! rendered from the same snapshot as the published `HiveStatus`, so the
//! two never disagree. Label values are escaped as the text format asks
//! (see [`labels`]).

use std::collections::BTreeMap;
use std::fmt::Write;

use swarm_queue_client::{HiveStatus, Level};

use super::{MetricsData, Snapshot};

/// Prometheus text exposition of a snapshot.
pub fn render_metrics(s: &Snapshot) -> String {
    let mut out = Exposition::default();
    status_families(&mut out, &s.status);
    publish_families(&mut out, &s.metrics);
    out.text
}

/// The text being written, one metric family at a time.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, kind: &str, name: &str, help: &str, lines: Vec<(String, String)>) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
        for (labels, value) in lines {
            let _ = writeln!(self.text, "{name}{labels} {value}");
        }
    }

    fn gauge(&mut self, name: &str, help: &str, lines: Vec<(String, String)>) {
        self.family("gauge", name, help, lines);
    }

    fn counter(&mut self, name: &str, help: &str, lines: Vec<(String, String)>) {
        self.family("counter", name, help, lines);
    }
}

/// One unlabelled line.
fn single(value: impl ToString) -> Vec<(String, String)> {
    vec![(String::new(), value.to_string())]
}

/// What the published `HiveStatus` says: ready, state, revisions,
/// agents by observed state and warnings by level.
fn status_families(out: &mut Exposition, r: &HiveStatus) {
    out.gauge(
        "hyperhive_hive_ready",
        "1 when the hive is ready (the same value /health/ready and the published status carry).",
        single(r.ready as u8),
    );
    out.gauge(
        "hyperhive_hive_state",
        "1 for the hive's current state.",
        ["ok", "degraded", "failing", "stopped"]
            .iter()
            .map(|s| {
                (
                    labels(&[("state", s)]),
                    ((r.state.to_string() == *s) as u8).to_string(),
                )
            })
            .collect(),
    );
    out.gauge(
        "hyperhive_converged_revision",
        "Declaration revision the hive last converged on (-1 when none).",
        single(r.converged_revision.map(|v| v as i64).unwrap_or(-1)),
    );
    out.gauge(
        "hyperhive_seen_revision",
        "Newest declaration revision the hive has read (-1 when none).",
        single(r.seen_revision.map(|v| v as i64).unwrap_or(-1)),
    );
    let mut by_state: BTreeMap<String, u64> = ["running", "stopped", "missing", "unknown"]
        .iter()
        .map(|s| (s.to_string(), 0))
        .collect();
    for a in r.agents.values() {
        *by_state.entry(a.observed.to_string()).or_default() += 1;
    }
    out.gauge(
        "hyperhive_agents",
        "Agents by observed state.",
        by_state
            .into_iter()
            .map(|(k, v)| (labels(&[("observed", &k)]), v.to_string()))
            .collect(),
    );
    let mut by_level: BTreeMap<&str, u64> = [("info", 0), ("warn", 0), ("error", 0)].into();
    for w in &r.warnings {
        let l = match w.level {
            Level::Info => "info",
            Level::Warn => "warn",
            _ => "error",
        };
        *by_level.entry(l).or_default() += 1;
    }
    out.gauge(
        "hyperhive_warnings",
        "HiveStatus warnings by level.",
        by_level
            .into_iter()
            .map(|(k, v)| (labels(&[("level", k)]), v.to_string()))
            .collect(),
    );
}

/// How status publishing fares, and the finished jobs' outcomes.
fn publish_families(out: &mut Exposition, m: &MetricsData) {
    out.gauge(
        "hyperhive_status_publish_consecutive_failures",
        "Failed status publishes since the last success.",
        single(m.publish_consecutive_failures),
    );
    out.gauge(
        "hyperhive_status_last_publish_age_seconds",
        "Seconds since the last successful status publish (-1 when never).",
        single(
            m.last_publish_age_secs
                .map(|a| format!("{a:.3}"))
                .unwrap_or_else(|| "-1".into()),
        ),
    );
    out.counter(
        "hyperhive_status_publish_failures_total",
        "Failed status publishes since start.",
        single(m.publish_failures_total),
    );
    out.counter(
        "hyperhive_status_publish_successes_total",
        "Successful status publishes since start.",
        single(m.publish_successes_total),
    );
    out.counter(
        "hyperhive_job_outcomes_total",
        "Finished jobs since start, by kind and outcome.",
        m.job_outcomes
            .iter()
            .map(|((k, s), v)| {
                (
                    labels(&[("kind", k.as_str()), ("state", s.as_str())]),
                    v.to_string(),
                )
            })
            .collect(),
    );
}

/// A label set in Prometheus text format, `{name="value",…}`, each value
/// escaped as the format asks: `\\`, `\"` and `\n`. Today's values come
/// from closed sets, but a label must never be able to break a line.
fn labels(pairs: &[(&str, &str)]) -> String {
    let body: Vec<String> = pairs
        .iter()
        .map(|(name, value)| {
            let escaped = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{name}=\"{escaped}\"")
        })
        .collect();
    format!("{{{}}}", body.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::StatusBoard;
    use swarm_queue_client::HiveName;

    #[test]
    fn label_values_are_escaped_as_the_text_format_asks() {
        assert_eq!(labels(&[("state", "ok")]), r#"{state="ok"}"#);
        assert_eq!(
            labels(&[("kind", "a\"b\\c\nd"), ("state", "done")]),
            r#"{kind="a\"b\\c\nd",state="done"}"#
        );
    }

    #[test]
    fn metrics_come_from_the_same_snapshot() {
        let h = StatusBoard::new(Some(HiveName::new("alpha").unwrap()), None);
        h.set_revisions(Some(5), Some(4));
        h.raise("k", Level::Warn, "w");
        h.record_job_outcome("first_deploy", "done");
        let s = h.snapshot();
        let text = render_metrics(&s);
        assert!(text.contains("hyperhive_converged_revision 4"), "{text}");
        assert!(
            text.contains("hyperhive_hive_state{state=\"degraded\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("hyperhive_warnings{level=\"warn\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("hyperhive_job_outcomes_total{kind=\"first_deploy\",state=\"done\"} 1")
        );
        assert!(text.contains("hyperhive_status_last_publish_age_seconds -1"));
    }
}
