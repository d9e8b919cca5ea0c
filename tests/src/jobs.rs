//! A small client of a hive's operator API, for end-to-end tests: queue
//! jobs, read them, wait for them to finish. It is the hive's own client
//! ([`hive::local::client`]) on the hive's Unix socket, so a test sees exactly
//! what the operator CLI sees.

use std::time::Duration;

use hive::local::client::{ApiClient, Endpoint};
use serde_json::Value;

/// The hive's operator API at `base`: its socket path (what `hive --api`
/// takes), or an `http://` URL.
#[derive(Clone)]
pub struct JobApi {
    pub base: String,
    client: ApiClient,
}

impl JobApi {
    pub fn new(base: &str) -> Self {
        JobApi {
            base: base.trim_end_matches('/').to_string(),
            client: ApiClient::new(Endpoint::parse(base)),
        }
    }

    /// POST a JSON body; (status, parsed answer).
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let answer = self
            .client
            .post_json(path, &body)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {}", hive::error_chain(&e)));
        let value = serde_json::from_slice(&answer.body).expect("JSON answer");
        (answer.status, value)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let answer = self
            .client
            .get(path)
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {}", hive::error_chain(&e)));
        let value = serde_json::from_slice(&answer.body).expect("JSON answer");
        (answer.status, value)
    }

    /// Queue `verb` for `agent`; the job id. Panics unless it was accepted.
    pub async fn queue(&self, agent: &str, verb: &str, body: Value) -> i64 {
        let (code, answer) = self
            .post(&format!("/api/v1/agents/{agent}/{verb}"), body)
            .await;
        assert_eq!(code, 202, "{verb} {agent}: {answer}");
        answer["job"].as_i64().expect("job id")
    }

    /// Deploy `agent` with an explicit spec.
    pub async fn deploy(&self, agent: &str, spec: Value) -> i64 {
        self.queue(agent, "deploy", serde_json::json!({ "spec": spec }))
            .await
    }

    /// The job, or `None` while the API cannot be reached.
    pub async fn job(&self, id: i64) -> Option<Value> {
        let answer = self.client.get(&format!("/api/v1/jobs/{id}")).await.ok()?;
        serde_json::from_slice(&answer.body).ok()
    }

    /// Wait until job `id` is done or failed; its final JSON.
    pub async fn finished(&self, id: i64, timeout: Duration) -> Value {
        crate::wait_until(timeout, &format!("job {id} to finish"), || async {
            let job = self.job(id).await?;
            matches!(job["state"].as_str(), Some("done" | "failed")).then_some(job)
        })
        .await
    }

    /// Wait until job `id` is done; panics with the job when it failed.
    pub async fn done(&self, id: i64, timeout: Duration) -> Value {
        let job = self.finished(id, timeout).await;
        assert_eq!(job["state"], "done", "job {id} failed: {job:#}");
        job
    }
}

/// The node of `job` with op name `op`.
pub fn node<'a>(job: &'a Value, op: &str) -> &'a Value {
    job["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["op"] == op))
        .unwrap_or_else(|| panic!("no {op} node in {job:#}"))
}
