//! Build contexts that would read the host, and operator API requests
//! with the wrong method, content type or origin, through a running `hive`
//! over the real dockerd.

use super::*;

/// Hostile build contexts and API requests, against a running hive over
/// the real dockerd: each is refused with the path (or request) and the
/// rule named, nothing is built or queued, and a good deploy still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_build_contexts_and_api_requests_are_refused_by_name() {
    use hyperhive_tests::docker::{ContainerGuard, TestImage};
    let name = hyperhive_tests::unique_name("bad-ctx");
    // Dropped in reverse: the hive, its containers, whatever it built (a
    // hostile context that was wrongly built included), the base image.
    let base = TestImage::busybox("bad-ctx");
    let _built = BuiltImages::of_hive(&name);
    let _containers = ContainerGuard::new(&name);
    let ContextTree {
        tmp: _tmp,
        root,
        secret,
        token,
    } = context_tree(&base.reference);
    let extra = format!(
        "build_roots = [{:?}]\nbuild_context_max_bytes = 131072\napi_token_file = {:?}\n",
        root.display().to_string(),
        token.display().to_string()
    );
    let hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        extra: &extra,
        ..Default::default()
    });
    let api = hive.job_api().await;
    let state = hive.state_dir.display().to_string();
    let r = root.display().to_string();
    let cases = [
        (format!("{r}/ok/../../secret"), "must not contain '..'"),
        (format!("{r}/escape"), "a symlink must not leave its root"),
        (state.clone(), "is or contains the hive's state dir"),
        (
            format!("{state}/agents"),
            "is or contains the hive's state dir",
        ),
        (
            hive.state_dir.parent().unwrap().display().to_string(),
            "is or contains the hive's state dir",
        ),
        (secret.display().to_string(), "outside every allowed root"),
        (
            format!("{r}/big"),
            "larger than build_context_max_bytes = 131072 bytes",
        ),
        (
            format!("file://{}", secret.display()),
            "outside every allowed root",
        ),
    ];
    for (i, (context, rule)) in cases.iter().enumerate() {
        let agent = format!("c{i}");
        let git_ref = context.starts_with("file://").then_some("main");
        let spec = serde_json::json!({
            "build": { "context": context, "ref": git_ref },
        });
        let job = api.deploy(&agent, spec).await;
        let failed = api.finished(job, T).await;
        assert_eq!(failed["state"], "failed", "{context}: {failed:#}");
        let error = failed["error"].as_str().unwrap_or_default();
        let shown = context.trim_start_matches("file://");
        assert!(error.contains(shown), "{context}: {error}");
        assert!(error.contains(rule), "{context}: {error}");
    }
    let built = hyperhive_tests::docker::docker(&[
        "images",
        "-q",
        "--filter",
        &format!("reference=hyperhive-build/{name}/*"),
    ]);
    assert!(built.trim().is_empty(), "an image was built: {built}");

    // The good context in the same root still builds.
    let job = api
        .deploy(
            "good",
            serde_json::json!({ "build": { "context": format!("{r}/ok") } }),
        )
        .await;
    api.done(job, T).await;
    assert!(built_tag(&api, "good")
        .await
        .starts_with("hyperhive-build/"));

    wrong_requests_are_refused_and_queue_nothing(&api, &hive.api().await).await;
}

/// Removes every image `docker images --filter .0` lists, on drop.
pub(super) struct BuiltImages(pub(super) String);

impl BuiltImages {
    /// Every image the hive named `hive` built.
    pub(super) fn of_hive(hive: &str) -> Self {
        BuiltImages(format!("reference=hyperhive-build/{hive}/*"))
    }
}

impl Drop for BuiltImages {
    fn drop(&mut self) {
        let filter = &self.0;
        let ids = hyperhive_tests::docker_cli::run(&["images", "-q", "--filter", filter])
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        for id in ids.split_whitespace() {
            let _ = hyperhive_tests::docker_cli::run(&["rmi", "-f", id]);
        }
    }
}

/// The image tag the hive built for `agent`.
async fn built_tag(api: &hyperhive_tests::jobs::JobApi, agent: &str) -> String {
    let (_, agents) = api.get("/api/v1/agents").await;
    agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .and_then(|a| a["image"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// A build root with a good context (`ok`), one over the size cap (`big`)
/// and a symlink out of it (`escape`) to a `secret` directory beside it,
/// and a remote-writes token file; all removed with `tmp`.
struct ContextTree {
    tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    secret: std::path::PathBuf,
    token: std::path::PathBuf,
}

fn context_tree(base_image: &str) -> ContextTree {
    let tmp = tempfile::Builder::new()
        .prefix("hhtest-ctx-")
        .tempdir()
        .unwrap();
    let root = tmp.path().join("root");
    let secret = tmp.path().join("secret");
    for d in [root.join("ok"), root.join("big"), secret.clone()] {
        std::fs::create_dir_all(&d).unwrap();
    }
    let dockerfile = format!("FROM {}\nCOPY . /ctx\n", base_image);
    for d in [root.join("ok"), root.join("big"), secret.clone()] {
        std::fs::write(d.join("Dockerfile"), &dockerfile).unwrap();
    }
    std::fs::write(root.join("big/blob"), vec![0u8; 256 * 1024]).unwrap();
    std::os::unix::fs::symlink(&secret, root.join("escape")).unwrap();
    let token = tmp.path().join("api.token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    ContextTree {
        tmp,
        root,
        secret,
        token,
    }
}

/// API requests with the wrong method, content type or origin: refused
/// with a status that says which, and nothing is queued.
async fn wrong_requests_are_refused_and_queue_nothing(
    api: &hyperhive_tests::jobs::JobApi,
    tcp: &str,
) {
    let before = api.get("/api/v1/jobs?all=true").await.1["jobs"]
        .as_array()
        .unwrap()
        .len();
    let bearer = "Bearer 0123456789abcdef0123456789abcdef";
    let http = reqwest::Client::new();
    let deploy = format!("{tcp}/api/v1/agents/x/deploy");
    let requests = [
        (
            "GET on a verb",
            http.get(&deploy).header("Authorization", bearer),
            405,
        ),
        (
            "PUT on a verb",
            http.put(&deploy)
                .header("Authorization", bearer)
                .header("Content-Type", "application/json"),
            405,
        ),
        (
            "DELETE on a verb",
            http.delete(&deploy).header("Authorization", bearer),
            405,
        ),
        (
            "POST on a listing",
            http.post(format!("{tcp}/api/v1/agents"))
                .header("Authorization", bearer)
                .header("Content-Type", "application/json"),
            405,
        ),
        (
            "text/plain",
            http.post(&deploy)
                .header("Authorization", bearer)
                .header("Content-Type", "text/plain"),
            415,
        ),
        (
            "form",
            http.post(&deploy)
                .header("Authorization", bearer)
                .header("Content-Type", "application/x-www-form-urlencoded"),
            415,
        ),
        (
            "Origin",
            http.post(&deploy)
                .header("Authorization", bearer)
                .header("Content-Type", "application/json")
                .header("Origin", "null"),
            403,
        ),
        (
            "no token",
            http.post(&deploy)
                .header("Content-Type", "application/json"),
            401,
        ),
        (
            "POST on a health path",
            http.post(format!("{tcp}/health/ready")),
            405,
        ),
        (
            "unknown path",
            http.post(format!("{tcp}/api/v2/agents/x/deploy")),
            404,
        ),
    ];
    for (what, req, want) in requests {
        let resp = req.body("{}").send().await.unwrap();
        assert_eq!(resp.status().as_u16(), want, "{what}");
    }
    let after = api.get("/api/v1/jobs?all=true").await.1["jobs"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(after, before, "a refused request queued a job");
}
