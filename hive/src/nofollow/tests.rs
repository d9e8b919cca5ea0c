use std::os::unix::fs::{symlink, PermissionsExt};

use super::*;

/// A root the hive owns and, beside it, a host directory an agent would
/// like the hive to write into (`keep` inside, mode 0755).
struct Scene {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    host: PathBuf,
}

fn scene() -> Scene {
    let tmp = tempfile::tempdir().unwrap();
    let (root, host) = (tmp.path().join("agent"), tmp.path().join("host"));
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("keep"), "host data").unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755)).unwrap();
    Scene {
        _tmp: tmp,
        root,
        host,
    }
}

/// The names in `dir`, its mode, and `keep`'s content where it is.
fn snapshot(dir: &Path) -> (Vec<String>, u32, Option<String>) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mode = std::fs::metadata(dir).unwrap().permissions().mode();
    (names, mode, std::fs::read_to_string(dir.join("keep")).ok())
}

/// What delivery does: `<root>/a/b/secret`, `b` made and kept 0700.
fn deliver(root: &Path) -> Result<(), NoFollowError> {
    let b = Dir::open_root(root)?.child("a", 0o755)?.child("b", 0o700)?;
    b.set_mode(0o700)?;
    b.write_private("secret", b"s3cret")
}

fn assert_refused(r: Result<(), NoFollowError>, at: &Path, found: &str) {
    match r {
        Err(NoFollowError::Refused {
            path, found: what, ..
        }) => {
            assert_eq!(path, at);
            assert_eq!(what, found);
        }
        other => panic!("not refused at {}: {other:?}", at.display()),
    }
}

#[test]
fn a_good_write_makes_the_dirs_and_replaces_the_whole_file_with_mode_0600() {
    let s = scene();
    deliver(&s.root).unwrap();
    std::fs::set_permissions(
        s.root.join("a/b/secret"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::set_permissions(s.root.join("a/b"), std::fs::Permissions::from_mode(0o755)).unwrap();
    deliver(&s.root).unwrap();
    let b = s.root.join("a/b");
    assert_eq!(std::fs::read(b.join("secret")).unwrap(), b"s3cret");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&b.join("secret")), 0o600);
    assert_eq!(mode(&b), 0o700, "the mode is set again on each write");
    let names: Vec<_> = std::fs::read_dir(&b)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["secret"], "no temporary file left behind");
}

#[test]
fn a_symlinked_parent_dir_is_refused_and_its_target_untouched() {
    let s = scene();
    std::fs::create_dir(s.root.join("a")).unwrap();
    symlink(&s.host, s.root.join("a/b")).unwrap();
    let before = snapshot(&s.host);
    assert_refused(deliver(&s.root), &s.root.join("a/b"), "a symbolic link");
    assert_eq!(snapshot(&s.host), before, "no secret, same mode");
}

#[test]
fn a_symlink_in_the_middle_is_refused() {
    let s = scene();
    std::fs::create_dir(s.host.join("b")).unwrap();
    symlink(&s.host, s.root.join("a")).unwrap();
    let before = snapshot(&s.host);
    let inner = snapshot(&s.host.join("b"));
    assert_refused(deliver(&s.root), &s.root.join("a"), "a symbolic link");
    assert_eq!(snapshot(&s.host), before);
    assert_eq!(snapshot(&s.host.join("b")), inner);
}

#[test]
fn a_symlinked_file_is_refused_and_the_file_it_names_untouched() {
    let s = scene();
    std::fs::create_dir_all(s.root.join("a/b")).unwrap();
    symlink(s.host.join("keep"), s.root.join("a/b/secret")).unwrap();
    let before = snapshot(&s.host);
    assert_refused(
        deliver(&s.root),
        &s.root.join("a/b/secret"),
        "a symbolic link",
    );
    assert_eq!(snapshot(&s.host), before);
    assert!(
        std::fs::symlink_metadata(s.root.join("a/b/secret"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "left for the operator to see"
    );
}

#[test]
fn dangling_links_are_refused_and_nothing_is_made_where_they_point() {
    let s = scene();
    std::fs::create_dir(s.root.join("a")).unwrap();
    symlink(s.host.join("new-dir"), s.root.join("a/b")).unwrap();
    assert_refused(deliver(&s.root), &s.root.join("a/b"), "a symbolic link");
    assert!(!s.host.join("new-dir").exists());

    std::fs::remove_file(s.root.join("a/b")).unwrap();
    std::fs::create_dir(s.root.join("a/b")).unwrap();
    symlink(s.host.join("new-file"), s.root.join("a/b/secret")).unwrap();
    assert_refused(
        deliver(&s.root),
        &s.root.join("a/b/secret"),
        "a symbolic link",
    );
    assert!(!s.host.join("new-file").exists());
}

#[test]
fn what_is_not_a_directory_or_not_a_file_is_refused() {
    let s = scene();
    std::fs::create_dir(s.root.join("a")).unwrap();
    std::fs::write(s.root.join("a/b"), "a file").unwrap();
    assert_refused(deliver(&s.root), &s.root.join("a/b"), "a regular file");

    std::fs::remove_file(s.root.join("a/b")).unwrap();
    std::fs::create_dir_all(s.root.join("a/b/secret")).unwrap();
    assert_refused(deliver(&s.root), &s.root.join("a/b/secret"), "a directory");
}

#[test]
fn a_name_that_is_not_one_component_is_refused_before_any_syscall() {
    let s = scene();
    let root = Dir::open_root(&s.root).unwrap();
    for bad in ["", ".", "..", "../host", "a/b"] {
        let e = root.child(bad, 0o700).unwrap_err();
        assert!(matches!(e, NoFollowError::BadName { .. }), "{bad:?}: {e}");
        let e = root.write_private(bad, b"x").unwrap_err();
        assert!(matches!(e, NoFollowError::BadName { .. }), "{bad:?}: {e}");
    }
    assert_eq!(snapshot(&s.host).0, ["keep"]);
}

#[test]
fn the_refusal_names_the_path_and_the_rule() {
    let s = scene();
    symlink(&s.host, s.root.join("a")).unwrap();
    let e = deliver(&s.root).unwrap_err().to_string();
    assert!(e.contains(&s.root.join("a").display().to_string()), "{e}");
    assert!(e.contains("it is a symbolic link, not a directory"), "{e}");
    assert!(e.contains("follows no link"), "{e}");
}

#[test]
fn compare_remove_and_list_follow_no_link() {
    let s = scene();
    let root = Dir::open_root(&s.root).unwrap();
    assert!(root.existing_child("b").unwrap().is_none(), "nothing made");
    assert!(!s.root.join("b").exists());
    let b = root.child("b", 0o700).unwrap();
    b.write_private("secret", b"one").unwrap();
    assert!(b.holds("secret", b"one").unwrap());
    assert!(!b.holds("secret", b"on").unwrap());
    assert!(!b.holds("secret", b"one!").unwrap());
    assert!(!b.holds("missing", b"one").unwrap());
    // A link to a host file holding the same bytes is not "the same file".
    symlink(s.host.join("keep"), s.root.join("b/linked")).unwrap();
    assert!(!b.holds("linked", b"host data").unwrap());
    // A named pipe does not hang the comparison.
    rustix::fs::mkfifoat(&b.fd, "pipe", Mode::from_raw_mode(0o600)).unwrap();
    assert!(!b.holds("pipe", b"x").unwrap());
    assert_eq!(
        b.names(16).unwrap(),
        ["linked", "pipe", "secret"],
        "hidden temporaries are not listed"
    );
    assert_eq!(b.names(1).unwrap().len(), 1);
    // Removing the link removes the link, never what it points at.
    assert!(b.remove_file("linked").unwrap());
    assert_eq!(snapshot(&s.host).2.as_deref(), Some("host data"));
    assert!(b.remove_file("secret").unwrap());
    assert!(!b.remove_file("secret").unwrap(), "gone already");
    std::fs::create_dir(s.root.join("b/dir")).unwrap();
    assert_refused(
        b.remove_file("dir").map(drop),
        &s.root.join("b/dir"),
        "a directory",
    );
    // A link where the directory should be is refused, not opened.
    symlink(&s.host, s.root.join("c")).unwrap();
    let e = root.existing_child("c").unwrap_err();
    assert!(matches!(e, NoFollowError::Refused { .. }), "{e}");
}
