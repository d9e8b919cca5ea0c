//! A git URL's userinfo is a secret (a forge token, a password): a failing
//! clone of such a URL, through a running `hive`, leaves it in none of the
//! published status, the operator API's job listing or the hive's log.

use super::*;

const TOKEN: &str = "s3cr3tTOKEN";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_clone_shows_its_url_without_the_userinfo() {
    let f = fixture().await;
    let url = f.s.server.url();
    let nats = f.s.hive("alpha").nats_toml(&url);
    let hive = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        extra: &nats,
        ..Default::default()
    });
    let status = status_bucket(&f.ctl).await;
    let leaky = AgentName::new("leaky").unwrap();
    let spec = AgentSpec {
        build: Some(swarm_queue_client::BuildSpec {
            context: format!("https://user:{TOKEN}@127.0.0.1:1/x.git"),
            git_ref: None,
            dockerfile: None,
        }),
        ..Default::default()
    };
    let declaration = Declaration::new(BTreeMap::from([(leaky.clone(), spec)]));
    f.wanted
        .put("alpha", encode(&declaration).unwrap().into())
        .await
        .unwrap();
    // Six attempts with backoff (about 31 s) before the job fails.
    let published = wait_until(4 * T, "the failed clone in the published status", || {
        let (status, leaky) = (status.clone(), leaky.clone());
        async move {
            let e = status.entry("alpha").await.ok().flatten()?;
            let r = decode::<HiveStatus>(&e.value).ok()?.value;
            let job = r.agents.get(&leaky)?.last_job.as_ref()?;
            (job.state == "failed").then(|| String::from_utf8_lossy(&e.value).to_string())
        }
    })
    .await;
    assert!(
        published.contains("https://***@127.0.0.1:1/x.git"),
        "the error names the URL, userinfo redacted: {published}"
    );
    let api = hive.job_api().await;
    let mut seen = vec![("status", published)];
    let (_, jobs) = api.get("/api/v1/jobs?all=true").await;
    for job in jobs["jobs"].as_array().unwrap() {
        let id = job["id"].as_i64().unwrap();
        seen.push(("a job", api.job(id).await.unwrap().to_string()));
    }
    seen.push(("the job listing", jobs.to_string()));
    seen.push(("/health/ready", hive.ready().await.1.to_string()));
    seen.push(("the hive log", hive.daemon.log()));
    for (what, text) in seen {
        assert!(!text.contains(TOKEN), "{what} shows the token: {text}");
    }
}
