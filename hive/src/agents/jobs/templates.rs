//! The job templates: which nodes a request becomes, and their order.
//!
//! Pure: a request in, a list of nodes out. Each node lists the positions of
//! the nodes it depends on. Today every template is a chain, but the store
//! and the transition rules take any DAG, so a template may fan out later
//! (for example delivering credentials next to pulling the image).

use super::model::{JobRequest, Op};

/// One node of a planned job: what it does and which earlier nodes (by
/// position in the plan) must be done first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedNode {
    pub op: Op,
    pub deps: Vec<u32>,
}

/// Each node depends on the one before it.
fn chain(ops: &[Op]) -> Vec<PlannedNode> {
    ops.iter()
        .enumerate()
        .map(|(i, &op)| PlannedNode {
            op,
            deps: if i == 0 { vec![] } else { vec![i as u32 - 1] },
        })
        .collect()
}

/// The nodes a request becomes.
///
/// - `first_deploy`: seed power → state dir → image → create → start → reconcile.
///   Power is seeded first so that a created, not yet started container is
///   never read as an agent that should stay down.
/// - `rebuild`: image (re-resolved when `relock`) → stop → remove → create →
///   start if wanted up. The image comes first so a failing pull or build
///   leaves the old container running.
/// - `retire`: stop → remove, forgetting the installed record; the state
///   directory is kept.
/// - `reconcile`: start or stop to match the power intent.
/// - `purge`: stop → remove → delete the state directory and every record.
/// - `restart`: stop → start if wanted up (the same container: a credential
///   changed under it).
pub fn plan(request: &JobRequest) -> Vec<PlannedNode> {
    match request {
        JobRequest::FirstDeploy { .. } => chain(&[
            Op::SeedPower,
            Op::StateDir,
            Op::Image { relock: false },
            Op::Create,
            Op::Start,
            Op::Reconcile,
        ]),
        JobRequest::Rebuild { relock, .. } => chain(&[
            Op::Image { relock: *relock },
            Op::Stop,
            Op::Remove { forget: false },
            Op::Create,
            Op::Start,
        ]),
        JobRequest::Retire => chain(&[Op::Stop, Op::Remove { forget: true }]),
        JobRequest::Reconcile => chain(&[Op::Reconcile]),
        JobRequest::Purge => chain(&[Op::Stop, Op::Remove { forget: true }, Op::PurgeData]),
        JobRequest::Restart => chain(&[Op::Stop, Op::Start]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_queue_client::AgentSpec;

    fn spec() -> AgentSpec {
        AgentSpec {
            image: Some("local/x:1".into()),
            ..Default::default()
        }
    }

    #[test]
    fn templates_are_exactly_the_documented_chains() {
        let cases: Vec<(JobRequest, Vec<&str>)> = vec![
            (
                JobRequest::FirstDeploy {
                    spec: spec(),
                    revision: None,
                },
                vec![
                    "seed_power",
                    "state_dir",
                    "image",
                    "create",
                    "start",
                    "reconcile",
                ],
            ),
            (
                JobRequest::Rebuild {
                    spec: spec(),
                    relock: true,
                    revision: None,
                },
                vec!["image", "stop", "remove", "create", "start"],
            ),
            (JobRequest::Retire, vec!["stop", "remove"]),
            (JobRequest::Reconcile, vec!["reconcile"]),
            (JobRequest::Purge, vec!["stop", "remove", "purge_data"]),
            (JobRequest::Restart, vec!["stop", "start"]),
        ];
        for (request, ops) in cases {
            let nodes = plan(&request);
            let names: Vec<&str> = nodes.iter().map(|n| n.op.name()).collect();
            assert_eq!(names, ops, "{:?}", request.kind());
            for (i, n) in nodes.iter().enumerate() {
                let want: Vec<u32> = if i == 0 { vec![] } else { vec![i as u32 - 1] };
                assert_eq!(n.deps, want, "{:?} node {i}", request.kind());
            }
        }
    }

    #[test]
    fn relock_reaches_the_image_node_and_retire_forgets() {
        for relock in [false, true] {
            let nodes = plan(&JobRequest::Rebuild {
                spec: spec(),
                relock,
                revision: None,
            });
            assert_eq!(nodes[0].op, Op::Image { relock });
            assert_eq!(nodes[2].op, Op::Remove { forget: false });
        }
        let first = plan(&JobRequest::FirstDeploy {
            spec: spec(),
            revision: None,
        });
        assert_eq!(first[2].op, Op::Image { relock: false });
        assert_eq!(plan(&JobRequest::Retire)[1].op, Op::Remove { forget: true });
        assert_eq!(plan(&JobRequest::Purge)[1].op, Op::Remove { forget: true });
    }
}
