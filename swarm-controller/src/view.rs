//! Which hives a reader wants to see, in which order: the filters, paging
//! and "needs attention" ranking shared by `/api/status`, the dashboard's
//! event stream and `status --json`.
//!
//! A fleet of 10,000 hives cannot be shown row by row. The dashboard opens
//! on the hives that need attention, worst first, and pages the rest; the
//! API takes the same filters as query parameters. Everything here is pure:
//! a query parsed from `key=value` pairs (each bad value is an error that
//! names the parameter and the value), the class of a row, and whether a
//! class matches.
//!
//! Invariants:
//! - Attention is decided from the row's class and the time its declaration
//!   has been progressing, never from anything the page computes.
//! - [`OrderKey`] is a total order (rank, then name), so a page of a query
//!   is well defined and the page can place a pushed row by itself.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::time::Duration;

use serde::Serialize;
use time::OffsetDateTime;

use crate::age::human_age;
use crate::evaluate::{Convergence, Freshness, HiveRow};
use crate::roster::Labels;

pub use crate::config::DEFAULT_PROGRESSING_ATTENTION;
/// Rows per page when the event stream is not told otherwise.
pub const DEFAULT_PAGE: usize = 100;
/// Most rows one page (or one event stream) may ask for.
pub const MAX_PAGE: usize = 1000;

/// Why a hive needs attention, worst first (the derive order is the rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Attention {
    /// Its declaration failed.
    Failed,
    /// It stopped reporting.
    Stale,
    /// It never reported, or its status does not decode.
    Unknown,
    /// Converged, but something drifted or the hive is not `ok`.
    Degraded,
    /// Still progressing long after the declaration was published.
    SlowProgress,
}

impl Attention {
    /// Rank in the worst-first order; rows that need none rank after all.
    pub fn rank(attention: Option<Attention>) -> u8 {
        attention.map_or(5, |a| a as u8)
    }
}

/// What filtering and ordering look at in a row, kept per hive by the
/// fleet so a query need not evaluate every row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    pub freshness: Freshness,
    pub convergence: Convergence,
    pub attention: Option<Attention>,
}

/// Why a row needs attention, as shown with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttentionNote {
    pub kind: Attention,
    /// Position in the worst-first order (0 = worst).
    pub rank: u8,
    pub why: String,
}

/// A hive's row with its attention note: the element of every listing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ViewRow {
    #[serde(flatten)]
    pub row: HiveRow,
    pub attention: Option<AttentionNote>,
}

impl Deref for ViewRow {
    type Target = HiveRow;
    fn deref(&self) -> &HiveRow {
        &self.row
    }
}

impl ViewRow {
    pub fn class(&self) -> Class {
        Class {
            freshness: self.row.freshness,
            convergence: self.row.convergence,
            attention: self.attention.as_ref().map(|a| a.kind),
        }
    }
}

/// When a progressing hive's declaration was published, and the threshold.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub declared_at: Option<OffsetDateTime>,
    pub limit: Duration,
}

/// Whether `row` needs attention at `now`, and why.
pub fn attention(row: &HiveRow, progress: Progress, now: OffsetDateTime) -> Option<AttentionNote> {
    let (kind, why) = match (row.freshness, row.convergence) {
        // Down on purpose: an operator said so, and until when.
        (Freshness::Maintenance, _) => return None,
        (_, Convergence::Failed) => (Attention::Failed, row.reason.clone()),
        (Freshness::Stale | Freshness::Offline, _) => {
            (Attention::Stale, row.freshness_reason.clone())
        }
        (Freshness::Unknown, _) => (Attention::Unknown, row.freshness_reason.clone()),
        (_, Convergence::Degraded) => (Attention::Degraded, row.reason.clone()),
        (_, Convergence::Progressing) => {
            let since = progressing_for(progress.declared_at, now)?;
            if since <= progress.limit {
                return None;
            }
            let why = format!(
                "still progressing {} after the declaration (attention after {})",
                human_age(since),
                human_age(progress.limit)
            );
            (Attention::SlowProgress, why)
        }
        _ => return None,
    };
    Some(AttentionNote {
        kind,
        rank: kind as u8,
        why,
    })
}

/// When a progressing row would start to need attention, if it does not yet.
pub fn slow_at(row: &HiveRow, progress: Progress, now: OffsetDateTime) -> Option<OffsetDateTime> {
    if row.convergence != Convergence::Progressing || row.freshness != Freshness::Fresh {
        return None;
    }
    let at = progress.declared_at? + progress.limit;
    (at >= now).then_some(at)
}

/// The order rows are listed in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// By name: `status --json`'s order.
    #[default]
    Name,
    /// Worst first (failed, stale, unknown, degraded, slow), then by name.
    Attention,
}

/// Where a row sorts under an [`Order`].
pub type OrderKey<'a> = (u8, &'a str);

impl Order {
    pub fn key<'a>(self, name: &'a str, class: &Class) -> OrderKey<'a> {
        match self {
            Order::Name => (0, name),
            Order::Attention => (Attention::rank(class.attention), name),
        }
    }
}

/// Which rows match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Filter {
    /// Any of these (empty: any).
    pub freshness: Vec<Freshness>,
    /// Any of these (empty: any).
    pub convergence: Vec<Convergence>,
    /// `Some(true)`: only hives that need attention; `Some(false)`: only
    /// those that do not.
    pub attention: Option<bool>,
    /// Every one of these labels, with this value.
    pub labels: BTreeMap<String, String>,
    /// A substring of the name.
    pub name: Option<String>,
}

impl Filter {
    pub fn matches(&self, name: &str, labels: &Labels, class: &Class) -> bool {
        (self.freshness.is_empty() || self.freshness.contains(&class.freshness))
            && (self.convergence.is_empty() || self.convergence.contains(&class.convergence))
            && self
                .attention
                .is_none_or(|want| want == class.attention.is_some())
            && self
                .labels
                .iter()
                .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
            && self.name.as_ref().is_none_or(|n| name.contains(n.as_str()))
    }
}

/// A filter, an order and a page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Query {
    pub filter: Filter,
    pub sort: Order,
    pub offset: usize,
    /// `None`: every matching row.
    pub limit: Option<usize>,
}

/// A query parameter that cannot be used: 400, naming it and its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("unknown query parameter {name:?}; known: freshness, convergence, attention, label, name, sort, offset, limit")]
    Unknown { name: String },
    #[error("query parameter {name}={value:?}: {why}")]
    BadValue {
        name: &'static str,
        value: String,
        why: String,
    },
}

impl Query {
    /// Parse decoded `key=value` pairs. Lists are comma-separated, and a
    /// parameter given twice adds to the list (`label` adds a label).
    pub fn parse<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Result<Query, QueryError> {
        let mut q = Query::default();
        for (key, value) in pairs {
            let value = value.as_ref();
            match key.as_ref() {
                "freshness" => {
                    q.filter
                        .freshness
                        .extend(list("freshness", value, parse_freshness)?)
                }
                "convergence" => {
                    q.filter
                        .convergence
                        .extend(list("convergence", value, parse_convergence)?)
                }
                "attention" => q.filter.attention = Some(parse_bool("attention", value)?),
                "label" => {
                    let (k, v) = value
                        .split_once('=')
                        .filter(|(k, _)| !k.is_empty())
                        .ok_or_else(|| bad("label", value, "expected key=value"))?;
                    q.filter.labels.insert(k.to_string(), v.to_string());
                }
                "name" => q.filter.name = (!value.is_empty()).then(|| value.to_lowercase()),
                "sort" => {
                    q.sort = match value {
                        "name" => Order::Name,
                        "attention" => Order::Attention,
                        _ => return Err(bad("sort", value, "expected name or attention")),
                    }
                }
                "offset" => q.offset = parse_count("offset", value, usize::MAX)?,
                "limit" => {
                    let limit = parse_count("limit", value, MAX_PAGE)?;
                    if limit == 0 {
                        return Err(bad("limit", value, "must be at least 1"));
                    }
                    q.limit = Some(limit);
                }
                other => {
                    return Err(QueryError::Unknown {
                        name: other.to_string(),
                    })
                }
            }
        }
        Ok(q)
    }
}

fn bad(name: &'static str, value: &str, why: impl Into<String>) -> QueryError {
    QueryError::BadValue {
        name,
        value: value.to_string(),
        why: why.into(),
    }
}

fn list<T>(
    name: &'static str,
    value: &str,
    one: fn(&str) -> Option<T>,
) -> Result<Vec<T>, QueryError> {
    value
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| one(s).ok_or_else(|| bad(name, s, expected(name))))
        .collect()
}

fn expected(name: &str) -> String {
    let all: Vec<&str> = if name == "freshness" {
        Freshness::ALL.iter().map(|f| f.as_str()).collect()
    } else {
        Convergence::ALL.iter().map(|c| c.as_str()).collect()
    };
    format!("expected one of {}", all.join(", "))
}

fn parse_freshness(s: &str) -> Option<Freshness> {
    Freshness::ALL.into_iter().find(|f| f.as_str() == s)
}

fn parse_convergence(s: &str) -> Option<Convergence> {
    Convergence::ALL.into_iter().find(|c| c.as_str() == s)
}

fn parse_bool(name: &'static str, value: &str) -> Result<bool, QueryError> {
    match value {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(bad(name, value, "expected true or false")),
    }
}

fn parse_count(name: &'static str, value: &str, max: usize) -> Result<usize, QueryError> {
    let n: usize = value
        .parse()
        .map_err(|_| bad(name, value, "expected a whole number"))?;
    if n > max {
        return Err(bad(name, value, format!("at most {max}")));
    }
    Ok(n)
}

fn progressing_for(declared_at: Option<OffsetDateTime>, now: OffsetDateTime) -> Option<Duration> {
    Duration::try_from(now - declared_at?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn row(freshness: Freshness, convergence: Convergence) -> HiveRow {
        let mut row = crate::evaluate::evaluate(crate::evaluate::Inputs {
            name: "a",
            roster: None,
            status: None,
            wanted: None,
            hold: None,
            now: t0(),
            stale_after: Duration::from_secs(60),
            link: None,
        });
        row.freshness = freshness;
        row.convergence = convergence;
        row.freshness_reason = "fr".into();
        row.reason = "cr".into();
        row
    }

    #[test]
    fn attention_ranks_worst_first() {
        use Convergence as C;
        use Freshness as F;
        let ten_min = Duration::from_secs(600);
        let declared = |ago: i64| Progress {
            declared_at: Some(t0() - time::Duration::seconds(ago)),
            limit: ten_min,
        };
        let cases = [
            (F::Fresh, C::Failed, declared(0), Some(Attention::Failed)),
            (F::Stale, C::Unknown, declared(0), Some(Attention::Stale)),
            (
                F::Unknown,
                C::Unknown,
                declared(0),
                Some(Attention::Unknown),
            ),
            (
                F::Fresh,
                C::Degraded,
                declared(0),
                Some(Attention::Degraded),
            ),
            (
                F::Fresh,
                C::Progressing,
                declared(601),
                Some(Attention::SlowProgress),
            ),
            (F::Fresh, C::Progressing, declared(600), None),
            (F::Fresh, C::Converged, declared(9999), None),
            (F::Fresh, C::Published, declared(9999), None),
            (F::Stopped, C::Unknown, declared(0), None),
            (F::Unrostered, C::Converged, declared(0), None),
            // Down on purpose: no attention, whatever the evidence says.
            (F::Maintenance, C::Unknown, declared(0), None),
            (F::Maintenance, C::Failed, declared(0), None),
            (F::Maintenance, C::Progressing, declared(9999), None),
        ];
        for (f, c, progress, want) in cases {
            let got = attention(&row(f, c), progress, t0()).map(|a| a.kind);
            assert_eq!(got, want, "{f} {c}");
        }
        assert!(Attention::Failed < Attention::Stale);
        assert!(Attention::Degraded < Attention::SlowProgress);
        assert_eq!(Attention::rank(None), 5);
        let why = attention(&row(F::Fresh, C::Progressing), declared(900), t0()).unwrap();
        assert_eq!(
            why.why,
            "still progressing 15m00s after the declaration (attention after 10m00s)"
        );
    }

    #[test]
    fn slow_at_is_set_only_before_the_threshold() {
        let p = Progress {
            declared_at: Some(t0()),
            limit: Duration::from_secs(60),
        };
        let r = row(Freshness::Fresh, Convergence::Progressing);
        assert_eq!(
            slow_at(&r, p, t0()),
            Some(t0() + time::Duration::seconds(60))
        );
        assert_eq!(slow_at(&r, p, t0() + time::Duration::seconds(61)), None);
        let r = row(Freshness::Fresh, Convergence::Converged);
        assert_eq!(slow_at(&r, p, t0()), None);
    }

    #[test]
    fn queries_parse_and_bad_values_name_the_parameter() {
        let q = Query::parse(&[
            ("freshness", "stale,unknown"),
            ("convergence", "failed"),
            ("attention", "true"),
            ("label", "site=attic"),
            ("label", "rack=2"),
            ("name", "Web"),
            ("sort", "attention"),
            ("offset", "100"),
            ("limit", "50"),
        ])
        .unwrap();
        assert_eq!(q.filter.freshness, [Freshness::Stale, Freshness::Unknown]);
        assert_eq!(q.filter.convergence, [Convergence::Failed]);
        assert_eq!(q.filter.attention, Some(true));
        assert_eq!(q.filter.labels.len(), 2);
        assert_eq!(q.filter.name.as_deref(), Some("web"));
        assert_eq!(
            (q.sort, q.offset, q.limit),
            (Order::Attention, 100, Some(50))
        );
        assert_eq!(Query::parse::<&str, &str>(&[]).unwrap(), Query::default());

        let cases: [(&str, &str, &str); 8] = [
            ("freshness", "stal", "query parameter freshness=\"stal\": expected one of fresh, stale, unknown, unrostered, stopped"),
            ("convergence", "ok", "query parameter convergence=\"ok\": expected one of converged"),
            ("attention", "maybe", "query parameter attention=\"maybe\": expected true or false"),
            ("label", "site", "query parameter label=\"site\": expected key=value"),
            ("sort", "age", "query parameter sort=\"age\": expected name or attention"),
            ("offset", "-1", "query parameter offset=\"-1\": expected a whole number"),
            ("limit", "0", "query parameter limit=\"0\": must be at least 1"),
            ("limit", "5000", "query parameter limit=\"5000\": at most 1000"),
        ];
        for (k, v, want) in cases {
            let err = Query::parse(&[(k, v)]).unwrap_err().to_string();
            assert!(err.starts_with(want), "{k}={v}: {err}");
        }
        let err = Query::parse(&[("fresh", "stale")]).unwrap_err();
        assert_eq!(
            err,
            QueryError::Unknown {
                name: "fresh".into()
            }
        );
    }

    #[test]
    fn filters_match_on_class_labels_and_name() {
        let class = Class {
            freshness: Freshness::Stale,
            convergence: Convergence::Unknown,
            attention: Some(Attention::Stale),
        };
        let labels: Labels = [("site".to_string(), "attic".to_string())].into();
        let yes = |pairs: &[(&str, &str)]| {
            Query::parse(pairs)
                .unwrap()
                .filter
                .matches("web-01", &labels, &class)
        };
        assert!(yes(&[]));
        assert!(yes(&[("freshness", "fresh,stale")]));
        assert!(!yes(&[("freshness", "fresh")]));
        assert!(yes(&[("convergence", "unknown")]));
        assert!(!yes(&[("convergence", "failed")]));
        assert!(yes(&[("attention", "true")]));
        assert!(!yes(&[("attention", "false")]));
        assert!(yes(&[("label", "site=attic")]));
        assert!(!yes(&[("label", "site=cellar")]));
        assert!(!yes(&[("label", "rack=1")]));
        assert!(yes(&[("name", "eb-0")]));
        assert!(!yes(&[("name", "db")]));
    }

    #[test]
    fn attention_order_puts_the_worst_first_then_names() {
        let class = |a| Class {
            freshness: Freshness::Fresh,
            convergence: Convergence::Converged,
            attention: a,
        };
        let mut rows = [
            ("a", class(None)),
            ("b", class(Some(Attention::Degraded))),
            ("c", class(Some(Attention::Failed))),
            ("d", class(Some(Attention::Failed))),
        ];
        rows.sort_by(|x, y| {
            Order::Attention
                .key(x.0, &x.1)
                .cmp(&Order::Attention.key(y.0, &y.1))
        });
        let names: Vec<&str> = rows.iter().map(|r| r.0).collect();
        assert_eq!(names, ["c", "d", "b", "a"]);
        rows.sort_by(|x, y| Order::Name.key(x.0, &x.1).cmp(&Order::Name.key(y.0, &y.1)));
        let names: Vec<&str> = rows.iter().map(|r| r.0).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
    }
}
