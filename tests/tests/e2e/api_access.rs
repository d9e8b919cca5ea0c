//! Who can drive a hive: the operator API is on a Unix socket (0660, its
//! group), the TCP listener serves health and metrics only, and remote
//! writes, when enabled, need a bearer token, JSON and no `Origin`. Each
//! test runs a real `hive` process over the real dockerd, and checks
//! "changes nothing" by asking the hive's job store (through the socket)
//! whether any job was queued.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::jobs::JobApi;
use hyperhive_tests::{hive_bin, unique_name};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(60);

/// What a hostile page would deploy: any image, any command.
const HOSTILE: &str = r#"{"spec":{"image":"busybox:latest","command":["sh","-c","cat /x"]}}"#;

async fn job_count(api: &JobApi) -> usize {
    let (code, jobs) = api.get("/api/v1/jobs?all=true").await;
    assert_eq!(code, 200, "{jobs}");
    jobs["jobs"].as_array().expect("a job list").len()
}

/// POST `body` to `url` with `headers`; the status.
async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let mut req = reqwest::Client::new().post(url).body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send()
        .await
        .expect("the TCP listener answers")
        .status()
        .as_u16()
}

fn named_hive(name: &str, extra: &str) -> HiveProc {
    HiveProc::start(HiveSpec {
        name: Some(name),
        extra,
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_serves_only_health_and_no_post_there_queues_a_job() {
    let name = unique_name("api-tcp");
    let hive = named_hive(&name, "");
    let base = hive.api().await;
    let api = hive.job_api().await;
    let deploy = format!("{base}/api/v1/agents/evil/deploy");

    // What a browser sends cross-site without a preflight.
    let browser = [
        ("Content-Type", "text/plain;charset=UTF-8"),
        ("Origin", "https://evil.example"),
    ];
    let code = post(&deploy, &browser, HOSTILE).await;
    assert!(
        matches!(code, 404 | 405),
        "cross-origin text/plain POST: {code}"
    );
    // A well-formed JSON POST from a local process, no credentials.
    let code = post(&deploy, &[("Content-Type", "application/json")], HOSTILE).await;
    assert!(matches!(code, 404 | 405), "JSON POST over TCP: {code}");
    for verb in ["rebuild", "start", "stop", "retire", "purge"] {
        let url = format!("{base}/api/v1/agents/evil/{verb}");
        let code = post(&url, &[("Content-Type", "application/json")], "{}").await;
        assert!(matches!(code, 404 | 405), "{verb} over TCP: {code}");
    }
    assert_eq!(job_count(&api).await, 0, "a POST over TCP queued a job");

    // Reads over TCP: health and metrics only.
    let http = reqwest::Client::new();
    for path in ["/health/live", "/health/ready", "/metrics"] {
        let code = http.get(format!("{base}{path}")).send().await.unwrap();
        assert!(matches!(code.status().as_u16(), 200 | 503), "{path}");
    }
    for path in ["/api/v1/agents", "/api/v1/jobs"] {
        let code = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(code.status().as_u16(), 404, "{path} over TCP");
    }
    let code = post(&format!("{base}/health/live"), &[], "").await;
    assert_eq!(code, 405, "a write to a health path");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_works_through_the_socket_and_only_for_its_group() {
    let name = unique_name("api-sock");
    let _containers = ContainerGuard::new(&name);
    let image = TestImage::busybox("api-sock");
    let hive = named_hive(&name, "api_socket_group = \"users\"\n");
    let socket = hive.socket().await;
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660, "socket mode");
    assert_eq!(
        std::os::unix::fs::MetadataExt::gid(&meta),
        100,
        "group users"
    );

    // The CLI's default is the socket; here it is named with --api.
    let spec = hive.state_dir.parent().unwrap().join("spec.json");
    std::fs::write(&spec, json!({ "image": image.reference }).to_string()).unwrap();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(hive_bin())
            .arg("--api")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let spec_arg = spec.display().to_string();
    let (code, out) = cli(&["deploy", "a", "--spec", &spec_arg, "--wait"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("job 1 done"), "{out}");
    let (code, out) = cli(&["--json", "agents"]);
    assert_eq!(code, Some(0), "{out}");
    let agents: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(agents["agents"][0]["observed"], "running", "{agents}");

    // Someone outside the group: refused by the socket's mode, with a
    // message that says why. The dirs above it are opened up, so the
    // socket itself is what refuses.
    for dir in [hive.state_dir.as_path(), hive.state_dir.parent().unwrap()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let as_nobody = |group: &str, args: &[&str]| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid", "nobody", "--regid", group, "--clear-groups"])
            .arg(hive_bin())
            .arg("--api")
            .arg(&socket)
            .args(args)
            .output()
            .expect("setpriv (util-linux)");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    assert!(
        executable_by_others(&hive_bin()),
        "the hive binary must be runnable by nobody"
    );
    let (code, err) = as_nobody("nogroup", &["stop", "a"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("permission denied on the hive's socket"),
        "{err}"
    );
    let (code, err) = as_nobody("nogroup", &["agents"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("permission denied"), "{err}");
    let api = hive.job_api().await;
    assert_eq!(job_count(&api).await, 1, "nobody queued nothing");
    // The same user with the socket's group may.
    let (code, err) = as_nobody("users", &["agents"]);
    assert_eq!(code, Some(0), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_writes_need_the_token_json_and_no_origin() {
    let name = unique_name("api-remote");
    let _containers = ContainerGuard::new(&name);
    let image = TestImage::busybox("api-remote");
    let dir = tempfile::Builder::new()
        .prefix("hhtest-token-")
        .tempdir()
        .unwrap();
    let token_file = dir.path().join("api.token");
    let token = "3f6c0b1e9a4d47c2b8e5f0a1d2c3b4a5";
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let extra = format!("api_token_file = {:?}\n", token_file.display().to_string());

    // A token file others can read is refused, naming it.
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = std::process::Command::new(hive_bin())
        .arg("--check-config")
        .arg(write_config(dir.path(), &name, &extra))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains(&format!(
            "api_token_file {} has mode 0644",
            token_file.display()
        )),
        "{err}"
    );

    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let hive = named_hive(&name, &extra);
    let base = hive.api().await;
    let api = hive.job_api().await;
    let url = format!("{base}/api/v1/agents/a/deploy");
    let body = json!({ "spec": { "image": image.reference } }).to_string();
    let bearer = format!("Bearer {token}");
    let json_ct = ("Content-Type", "application/json");
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16);
    let refused: [Case; 5] = [
        ("no token", vec![json_ct], 401),
        (
            "wrong token",
            vec![
                json_ct,
                ("Authorization", "Bearer 00000000000000000000000000000000"),
            ],
            401,
        ),
        (
            "an Origin",
            vec![
                json_ct,
                ("Authorization", bearer.as_str()),
                ("Origin", "https://evil.example"),
            ],
            403,
        ),
        (
            "text/plain",
            vec![
                ("Content-Type", "text/plain"),
                ("Authorization", bearer.as_str()),
            ],
            415,
        ),
        (
            "no content type",
            vec![("Authorization", bearer.as_str())],
            415,
        ),
    ];
    for (what, headers, want) in refused {
        assert_eq!(post(&url, &headers, &body).await, want, "{what}");
        assert_eq!(job_count(&api).await, 0, "{what} queued a job");
    }
    let ok = post(&url, &[json_ct, ("Authorization", bearer.as_str())], &body).await;
    assert_eq!(ok, 202, "the right request");
    assert_eq!(job_count(&api).await, 1);

    // The CLI over TCP with the token file.
    let out = std::process::Command::new(hive_bin())
        .args(["--api", &base, "--api-token-file"])
        .arg(&token_file)
        .args(["--json", "jobs", "--all"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let jobs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(jobs["jobs"][0]["agent"], "a");
    let job = jobs["jobs"][0]["id"].as_i64().unwrap();
    api.done(job, T).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_another_origin_cannot_queue_a_job_from_chromium() {
    use hyperhive_tests::browser::Page;
    let plain = named_hive(&unique_name("api-browser"), "");
    let dir = tempfile::Builder::new()
        .prefix("hhtest-browser-")
        .tempdir()
        .unwrap();
    // With remote writes on too: the page cannot send the token, and its
    // Origin header is refused.
    let token_file = dir.path().join("api.token");
    std::fs::write(&token_file, "3f6c0b1e9a4d47c2b8e5f0a1d2c3b4a5\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let remote = named_hive(
        &unique_name("api-browser-rw"),
        &format!("api_token_file = {:?}\n", token_file.display().to_string()),
    );
    let targets = [plain.api().await, remote.api().await];

    // The attacker's page, served on an origin of its own.
    let site = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let site_url = format!("http://{}/", site.local_addr().unwrap());
    let page_html = "<!doctype html><title>evil</title><p>hello</p>";
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut conn, _)) = site.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf).await;
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page_html}",
                page_html.len()
            );
            let _ = conn.write_all(resp.as_bytes()).await;
        }
    });

    let mut page = Page::launch(&dir.path().join("chromium.log")).await;
    page.call("Page.navigate", json!({ "url": site_url })).await;
    page.wait_for("the attacker's page", "document.title === 'evil'")
        .await;
    for (i, base) in targets.iter().enumerate() {
        let script = format!(
            "window.hhDone{i} = null; \
             fetch('{base}/api/v1/agents/evil/deploy', {{method: 'POST', mode: 'no-cors', \
               body: {body:?}}}).then(r => window.hhDone{i} = 'sent:' + r.type, \
               e => window.hhDone{i} = 'error:' + e); true",
            body = HOSTILE
        );
        page.eval(&script).await;
        let outcome = page
            .wait_for("the page's fetch to settle", &format!("window.hhDone{i}"))
            .await;
        println!("page fetch to {base}: {outcome}");
    }
    for hive in [&plain, &remote] {
        let api = hive.job_api().await;
        assert_eq!(job_count(&api).await, 0, "the page queued a job");
    }
    server.abort();
}

fn write_config(dir: &Path, name: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join("hive.toml");
    let state = dir.join("state");
    std::fs::write(
        &path,
        format!(
            "name = {name:?}\nstate_dir = {:?}\n{extra}",
            state.display().to_string()
        ),
    )
    .unwrap();
    path
}

fn executable_by_others(path: &Path) -> bool {
    let mut p = Some(path);
    while let Some(cur) = p {
        let mode = std::fs::metadata(cur)
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        if mode & 0o001 == 0 {
            return false;
        }
        p = cur.parent();
    }
    true
}
