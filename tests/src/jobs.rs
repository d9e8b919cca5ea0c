//! A small client of a hive's local job API, for end-to-end tests: queue
//! jobs, read them, wait for them to finish. Plain JSON, so a test sees
//! exactly what the operator CLI sees.

use std::time::Duration;

use serde_json::Value;

/// The hive's local API at `base` (`http://127.0.0.1:<port>`).
#[derive(Clone)]
pub struct JobApi {
    pub base: String,
    http: reqwest::Client,
}

impl JobApi {
    pub fn new(base: &str) -> Self {
        JobApi {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
        }
    }

    /// POST a JSON body; (status, parsed answer).
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let code = resp.status().as_u16();
        (code, resp.json().await.expect("JSON answer"))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let code = resp.status().as_u16();
        (code, resp.json().await.expect("JSON answer"))
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
        let resp = self
            .http
            .get(format!("{}/api/v1/jobs/{id}", self.base))
            .send()
            .await
            .ok()?;
        resp.json().await.ok()
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
