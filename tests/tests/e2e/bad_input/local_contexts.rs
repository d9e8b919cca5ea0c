//! Every spelling of a local build context is held to the build roots: a
//! hive started in `/` (as systemd starts it) is asked to build a git
//! repository outside every root, by a relative path, `./`, `file://`, an
//! absolute path, with and without `ref`, with a `.git` suffix; each deploy
//! fails naming the rule and no image is built from it.

use super::hostile_builds::BuiltImages;
use super::*;
use hyperhive_tests::docker::{docker, ContainerGuard, TestImage};

/// The label the secret repository's Dockerfile puts on any image built
/// from it, so that the test sees such an image whatever its tag.
const SECRET_LABEL: &str = "org.hyperhive.test.secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_contexts_outside_every_root_are_refused_in_every_spelling() {
    let name = hyperhive_tests::unique_name("local-ctx");
    let base = TestImage::busybox("local-ctx");
    let _built = BuiltImages::of_hive(&name);
    // Any image built from the secret repository, whatever its tag.
    let _labelled = BuiltImages(format!("label={SECRET_LABEL}={name}"));
    let _containers = ContainerGuard::new(&name);
    let tmp = tempfile::Builder::new()
        .prefix("hhtest-ctx-")
        .tempdir()
        .unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let root = dir.join("root");
    let secret = dir.join("secret");
    let dockerfile = format!(
        "FROM {}\nLABEL {SECRET_LABEL}={name}\nCOPY . /ctx\nCMD [\"cat\", \"/ctx/token\"]\n",
        base.reference
    );
    make_repo(&secret, &dockerfile, "s3cr3t-repo-token\n");
    make_repo(
        &root.join("good"),
        &dockerfile.replace(SECRET_LABEL, "x"),
        "",
    );
    let extra = format!("build_roots = [{:?}]\n", root.display().to_string());
    let hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        extra: &extra,
        cwd: Some(std::path::Path::new("/")),
        ..Default::default()
    });
    let api = hive.job_api().await;

    // A good git context inside the root builds, from a hive in `/`.
    let good = format!("{}/good", root.display());
    let job = api
        .deploy(
            "good",
            serde_json::json!({ "build": { "context": good, "ref": "main" } }),
        )
        .await;
    api.done(job, T).await;

    let abs = secret.display().to_string();
    let rel = abs.trim_start_matches('/').to_string();
    let builds = hive.state_dir.join("builds").display().to_string();
    let relative = "a local build context must be an absolute path";
    let outside = "outside every allowed root";
    let cases: Vec<(String, Option<&str>, &str)> = vec![
        (rel.clone(), None, relative),
        (format!("{rel}/.git"), None, relative),
        (rel.clone(), Some("main"), relative),
        (format!("./{rel}"), Some("main"), relative),
        (format!("{rel}/../secret"), Some("main"), relative),
        (format!("file://{rel}"), None, "file:///"),
        (format!("file://{abs}"), None, outside),
        (format!("file://{abs}"), Some("main"), outside),
        (abs.clone(), Some("main"), outside),
        (format!("{abs}/.git"), None, outside),
        (format!("{abs}/.git"), Some("main"), outside),
        (
            format!("{}/good/../../secret", root.display()),
            Some("main"),
            "'..'",
        ),
        (builds.clone(), None, "is the root of the hive's clones"),
    ];
    for (i, (context, git_ref, rule)) in cases.iter().enumerate() {
        let spec = serde_json::json!({ "build": { "context": context, "ref": git_ref } });
        let job = api.deploy(&format!("c{i}"), spec).await;
        let failed = api.finished(job, T).await;
        assert_eq!(
            failed["state"], "failed",
            "{context} {git_ref:?}: {failed:#}"
        );
        let error = failed["error"].as_str().unwrap_or_default();
        assert!(error.contains(rule), "{context} {git_ref:?}: {error}");
        assert!(error.contains("rule"), "{context} {git_ref:?}: {error}");
    }
    let from_secret = docker(&[
        "images",
        "-q",
        "--filter",
        &format!("label={SECRET_LABEL}={name}"),
    ]);
    assert!(
        from_secret.trim().is_empty(),
        "an image was built from the secret repository: {from_secret}"
    );
    let built = docker(&[
        "images",
        "--format",
        "{{.Repository}}",
        "--filter",
        &format!("reference=hyperhive-build/{name}/*"),
    ]);
    assert_eq!(
        built.lines().collect::<Vec<_>>(),
        vec![format!("hyperhive-build/{name}/good")],
        "only the good context was built"
    );
}

/// A git repository at `dir` on branch `main` holding `Dockerfile` and
/// `token`.
fn make_repo(dir: &std::path::Path, dockerfile: &str, token: &str) {
    let git = hive::git::git_for_tests;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
    std::fs::write(dir.join("token"), token).unwrap();
    git(dir, &["init", "-q", "-b", "main", "."]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "context"]);
}
