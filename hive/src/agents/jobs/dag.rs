//! The rules of the DAG, as pure functions: which nodes start ready, what a
//! node's outcome does to its dependents, when a transient failure is
//! retried, and what state the job is in afterwards.
//!
//! The store applies what these functions return inside one transaction;
//! nothing here touches SQLite, Docker or a clock.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use super::model::{JobState, Millis, NodeState};
use super::templates::PlannedNode;

/// How transient failures are retried: attempt `n` (1-based) that fails is
/// retried after `base * 2^(n-1)`, capped at `cap`, until `max_attempts`
/// attempts have been made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    /// Six attempts over about a minute (1 + 2 + 4 + 8 + 16 s of waiting,
    /// then the sixth): long enough to ride out a dockerd restart, short
    /// enough that a real outage shows as a failed job the reconciler will
    /// queue again.
    fn default() -> Self {
        Self {
            max_attempts: 6,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retrying after failed attempt `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        crate::backoff::nth_delay(self.base, self.cap, attempt)
    }
}

/// What a node's attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done {
        /// A last word for the operator ("left stopped: power is down").
        detail: Option<String>,
    },
    Failed {
        /// The whole error chain, outermost first, joined with ": ".
        error: String,
        /// Worth trying again (Docker unreachable, a timeout), as opposed to
        /// a failure that would repeat (no such image, a foreign container).
        transient: bool,
    },
}

/// The part of a node the rules look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub seq: u32,
    pub deps: Vec<u32>,
    pub state: NodeState,
    pub attempts: u32,
}

/// One change to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeChange {
    Ready,
    Done {
        detail: Option<String>,
    },
    /// Back to ready, not before `not_before`; the error is kept for the
    /// operator to see while it waits.
    Retry {
        not_before: Millis,
        error: String,
    },
    Failed {
        error: String,
    },
    Skipped {
        /// The failed node this one depended on.
        because_of: u32,
    },
}

/// Everything one outcome changes, applied in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub nodes: Vec<(u32, NodeChange)>,
    /// The job's new state, when it changes from running.
    pub job: Option<(JobState, Option<String>)>,
}

/// The state each planned node starts in: ready without dependencies,
/// pending otherwise.
pub fn initial_states(plan: &[PlannedNode]) -> Vec<NodeState> {
    plan.iter()
        .map(|n| {
            if n.deps.is_empty() {
                NodeState::Ready
            } else {
                NodeState::Pending
            }
        })
        .collect()
}

/// Check a plan is a DAG over its own nodes: every dependency names an
/// earlier node. Templates are written by hand; this keeps a typo from
/// becoming a job that can never finish.
pub fn check_plan(plan: &[PlannedNode]) -> Result<(), PlanError> {
    if plan.is_empty() {
        return Err(PlanError::Empty);
    }
    for (i, node) in plan.iter().enumerate() {
        if let Some(&bad) = node.deps.iter().find(|&&d| d as usize >= i) {
            return Err(PlanError::DependsOnLater {
                node: i,
                op: node.op.to_string(),
                dep: bad,
            });
        }
    }
    Ok(())
}

/// A plan that is not a DAG over its own nodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("a job needs at least one node")]
    Empty,
    #[error("node {node} ({op}) depends on node {dep}, which does not come before it")]
    DependsOnLater { node: usize, op: String, dep: u32 },
}

/// Apply one attempt's outcome for node `seq` of a job whose nodes are
/// `nodes` (as they are now, with `seq` running).
pub fn on_outcome(
    nodes: &[NodeFacts],
    seq: u32,
    outcome: Outcome,
    policy: &RetryPolicy,
    now: Millis,
) -> Transition {
    let mut states: BTreeMap<u32, NodeState> = nodes.iter().map(|n| (n.seq, n.state)).collect();
    let mut changes = Vec::new();
    let attempts = nodes
        .iter()
        .find(|n| n.seq == seq)
        .map_or(1, |n| n.attempts.max(1));

    match outcome {
        Outcome::Done { detail } => {
            states.insert(seq, NodeState::Done);
            changes.push((seq, NodeChange::Done { detail }));
            for n in nodes {
                let waiting = states.get(&n.seq) == Some(&NodeState::Pending);
                let deps_done = n
                    .deps
                    .iter()
                    .all(|d| states.get(d) == Some(&NodeState::Done));
                if waiting && deps_done {
                    states.insert(n.seq, NodeState::Ready);
                    changes.push((n.seq, NodeChange::Ready));
                }
            }
        }
        Outcome::Failed { error, transient } if transient && attempts < policy.max_attempts => {
            let wait = policy.backoff(attempts);
            states.insert(seq, NodeState::Ready);
            changes.push((
                seq,
                NodeChange::Retry {
                    not_before: now.saturating_add(wait.as_millis() as Millis),
                    error,
                },
            ));
        }
        Outcome::Failed { error, transient } => {
            let error = if transient {
                format!("gave up after {attempts} attempts: {error}")
            } else {
                error
            };
            states.insert(seq, NodeState::Failed);
            changes.push((seq, NodeChange::Failed { error }));
            for skipped in dependents(nodes, seq) {
                if !states[&skipped].is_terminal() {
                    states.insert(skipped, NodeState::Skipped);
                    changes.push((skipped, NodeChange::Skipped { because_of: seq }));
                }
            }
        }
    }

    Transition {
        job: job_state(&states).map(|state| (state, None)),
        nodes: changes,
    }
    .with_job_error(nodes, seq)
}

impl Transition {
    /// A failed job keeps the failed node's error, naming the node.
    fn with_job_error(mut self, nodes: &[NodeFacts], seq: u32) -> Self {
        if let Some((JobState::Failed, error)) = &mut self.job {
            let failed = self.nodes.iter().find_map(|(s, c)| match c {
                NodeChange::Failed { error } if *s == seq => Some(error.clone()),
                _ => None,
            });
            let total = nodes.len();
            *error = failed.map(|e| format!("node {} of {total} failed: {e}", seq + 1));
        }
        self
    }
}

/// Every node that depends on `seq`, directly or through others.
fn dependents(nodes: &[NodeFacts], seq: u32) -> BTreeSet<u32> {
    let mut found = BTreeSet::new();
    let mut queue = VecDeque::from([seq]);
    while let Some(s) = queue.pop_front() {
        for n in nodes {
            if n.deps.contains(&s) && found.insert(n.seq) {
                queue.push_back(n.seq);
            }
        }
    }
    found
}

/// The job's state once no node can move any more; `None` while some node
/// is pending, ready or running.
fn job_state(states: &BTreeMap<u32, NodeState>) -> Option<JobState> {
    if states.values().any(|s| !s.is_terminal()) {
        None
    } else if states.values().any(|s| *s == NodeState::Failed) {
        Some(JobState::Failed)
    } else {
        Some(JobState::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NodeState::*;

    fn chain(states: &[NodeState], attempts: u32) -> Vec<NodeFacts> {
        states
            .iter()
            .enumerate()
            .map(|(i, &state)| NodeFacts {
                seq: i as u32,
                deps: if i == 0 { vec![] } else { vec![i as u32 - 1] },
                state,
                attempts: if state == Running { attempts } else { 0 },
            })
            .collect()
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(250),
        }
    }

    fn done() -> Outcome {
        Outcome::Done { detail: None }
    }

    fn fail(transient: bool) -> Outcome {
        Outcome::Failed {
            error: "docker unreachable: socket not found".into(),
            transient,
        }
    }

    #[test]
    fn outcomes_table() {
        struct Case {
            name: &'static str,
            nodes: Vec<NodeFacts>,
            seq: u32,
            outcome: Outcome,
            changes: Vec<(u32, NodeChange)>,
            job: Option<(JobState, Option<String>)>,
        }
        let err = "docker unreachable: socket not found".to_string();
        let cases = vec![
            Case {
                name: "done readies the next node",
                nodes: chain(&[Running, Pending, Pending], 1),
                seq: 0,
                outcome: done(),
                changes: vec![
                    (0, NodeChange::Done { detail: None }),
                    (1, NodeChange::Ready),
                ],
                job: None,
            },
            Case {
                name: "last node done finishes the job",
                nodes: chain(&[Done, Done, Running], 1),
                seq: 2,
                outcome: done(),
                changes: vec![(2, NodeChange::Done { detail: None })],
                job: Some((JobState::Done, None)),
            },
            Case {
                name: "transient failure under the bound retries with backoff",
                nodes: chain(&[Done, Running, Pending], 2),
                seq: 1,
                outcome: fail(true),
                changes: vec![(
                    1,
                    NodeChange::Retry {
                        not_before: 1_000 + 200,
                        error: err.clone(),
                    },
                )],
                job: None,
            },
            Case {
                name: "transient failure at the bound fails and skips dependents",
                nodes: chain(&[Done, Running, Pending, Pending], 3),
                seq: 1,
                outcome: fail(true),
                changes: vec![
                    (
                        1,
                        NodeChange::Failed {
                            error: format!("gave up after 3 attempts: {err}"),
                        },
                    ),
                    (2, NodeChange::Skipped { because_of: 1 }),
                    (3, NodeChange::Skipped { because_of: 1 }),
                ],
                job: Some((
                    JobState::Failed,
                    Some(format!(
                        "node 2 of 4 failed: gave up after 3 attempts: {err}"
                    )),
                )),
            },
            Case {
                name: "permanent failure fails at once, keeping the chain",
                nodes: chain(&[Running, Pending], 1),
                seq: 0,
                outcome: fail(false),
                changes: vec![
                    (0, NodeChange::Failed { error: err.clone() }),
                    (1, NodeChange::Skipped { because_of: 0 }),
                ],
                job: Some((JobState::Failed, Some(format!("node 1 of 2 failed: {err}")))),
            },
        ];
        for case in cases {
            let t = on_outcome(&case.nodes, case.seq, case.outcome, &policy(), 1_000);
            assert_eq!(t.nodes, case.changes, "{}", case.name);
            assert_eq!(t.job, case.job, "{}", case.name);
        }
    }

    #[test]
    fn fan_in_waits_for_every_dependency_and_failure_skips_only_dependents() {
        // 0 -> 2, 1 -> 2, 1 -> 3
        let nodes = |s: [NodeState; 4]| {
            vec![
                NodeFacts {
                    seq: 0,
                    deps: vec![],
                    state: s[0],
                    attempts: 1,
                },
                NodeFacts {
                    seq: 1,
                    deps: vec![],
                    state: s[1],
                    attempts: 1,
                },
                NodeFacts {
                    seq: 2,
                    deps: vec![0, 1],
                    state: s[2],
                    attempts: 0,
                },
                NodeFacts {
                    seq: 3,
                    deps: vec![1],
                    state: s[3],
                    attempts: 0,
                },
            ]
        };
        let t = on_outcome(
            &nodes([Running, Running, Pending, Pending]),
            0,
            done(),
            &policy(),
            0,
        );
        assert_eq!(t.nodes, vec![(0, NodeChange::Done { detail: None })]);
        let t = on_outcome(
            &nodes([Done, Running, Pending, Pending]),
            1,
            done(),
            &policy(),
            0,
        );
        assert_eq!(
            t.nodes,
            vec![
                (1, NodeChange::Done { detail: None }),
                (2, NodeChange::Ready),
                (3, NodeChange::Ready)
            ]
        );
        // Node 0 fails while 1 is still running: 2 is skipped, 3 is not, and
        // the job is not finished until 1 is.
        let t = on_outcome(
            &nodes([Running, Running, Pending, Pending]),
            0,
            fail(false),
            &policy(),
            0,
        );
        assert_eq!(t.nodes[1], (2, NodeChange::Skipped { because_of: 0 }));
        assert_eq!(t.nodes.len(), 2);
        assert_eq!(t.job, None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy {
            max_attempts: 10,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(5),
        };
        let got: Vec<u64> = (1..=6).map(|a| p.backoff(a).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 5, 5, 5]);
        assert_eq!(p.backoff(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn initial_states_and_plan_checks() {
        use crate::agents::jobs::model::Op;
        let plan = vec![
            PlannedNode {
                op: Op::Stop,
                deps: vec![],
            },
            PlannedNode {
                op: Op::Remove { forget: true },
                deps: vec![0],
            },
        ];
        assert_eq!(initial_states(&plan), vec![Ready, Pending]);
        assert!(check_plan(&plan).is_ok());
        let bad = vec![PlannedNode {
            op: Op::Stop,
            deps: vec![0],
        }];
        assert!(check_plan(&bad)
            .unwrap_err()
            .to_string()
            .contains("node 0 (stop) depends on node 0"));
        assert!(check_plan(&[]).is_err());
    }
}
