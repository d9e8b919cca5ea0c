//! # Which directories a build context or a host volume may name
//!
//! A build context is read in full by the hive and handed to Docker, so a
//! spec that could name any directory could copy any file the hive can
//! read into an image: the hive's own state dir holds its xkey seed and
//! every agent's credentials. A context may therefore name only a path
//! inside an allowed root:
//!
//! - the knowledge checkout (`<state>/knowledge`);
//! - the hive's own clones of git contexts (`<state>/builds/<agent>`);
//! - the directories the operator lists in `build_roots` (none by default).
//!
//! Refused, each with an error naming the path and the rule: a `..`
//! component; a path whose real location (symlinks resolved) leaves every
//! root; the state dir, anything that contains it, and anything inside it
//! but outside the two roots above; `<state>/builds` itself, which holds
//! every agent's clone. A local repository (however it is spelt: see
//! [`super::context::classify`], which refuses a relative one) is a
//! directory the clone reads, so it is held to the same rules
//! ([`confine_repo`]), and may not be a link to a git dir elsewhere.
//!
//! Symlinks *inside* a context are sent to Docker as symlinks (never
//! followed), and Docker resolves them inside the context, so they cannot
//! reach out either.
//!
//! An agent's `host` volumes are held to the same rules against the hive
//! config's `volume_roots` ([`confine_volume`]): no `..`, the real path
//! inside a root, never the state dir or anything containing it; the real
//! path is what is mounted.

use std::path::{Component, Path, PathBuf};

use swarm_queue_client::AgentName;

use super::RuntimeError;

/// The roots a build context may lie in.
#[derive(Debug, Clone)]
pub struct BuildRoots {
    /// The hive's state dir: never a context, and nothing in it is one but
    /// the knowledge checkout and the hive's own clones.
    pub state_dir: PathBuf,
    /// `<state>/knowledge`.
    pub knowledge: PathBuf,
    /// `<state>/builds`, the parent of every per-agent clone.
    pub builds: PathBuf,
    /// From the hive config's `build_roots`.
    pub configured: Vec<PathBuf>,
}

impl BuildRoots {
    /// The roots for a hive with this state dir and `build_roots`.
    pub fn new(state_dir: &Path, configured: Vec<PathBuf>) -> BuildRoots {
        BuildRoots {
            state_dir: state_dir.to_path_buf(),
            knowledge: state_dir.join("knowledge"),
            builds: state_dir.join("builds"),
            configured,
        }
    }

    /// The clone of `agent`'s git context.
    pub fn clone_dir(&self, agent: &str) -> PathBuf {
        self.builds.join(agent)
    }

    fn describe(&self) -> String {
        let configured = if self.configured.is_empty() {
            "none configured".to_string()
        } else {
            self.configured
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "the knowledge checkout {}, the hive's clones under {}, or build_roots ({configured})",
            self.knowledge.display(),
            self.builds.display()
        )
    }
}

/// Check that `path` may be a build context; its real (canonical) path.
pub fn confine(path: &Path, roots: &BuildRoots) -> Result<PathBuf, RuntimeError> {
    let refuse = |reason: String| RuntimeError::Context {
        context: path.display().to_string(),
        reason,
    };
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(refuse(
            "a build context must not contain '..' (rule: name the directory itself, inside an \
             allowed root)"
                .into(),
        ));
    }
    let real = path
        .canonicalize()
        .map_err(|e| refuse(format!("cannot resolve it: {e}")))?;
    let state = real_or_same(&roots.state_dir);
    let knowledge = real_or_same(&roots.knowledge);
    let builds = real_or_same(&roots.builds);
    let in_state_roots = real.starts_with(&knowledge) || real.starts_with(&builds);
    if real == builds {
        return Err(refuse(format!(
            "it is the root of the hive's clones {} (rule: that directory holds every agent's \
             clone; a context names one directory inside a root)",
            roots.builds.display()
        )));
    }
    if state.starts_with(&real) || (real.starts_with(&state) && !in_state_roots) {
        return Err(refuse(format!(
            "it is or contains the hive's state dir {} (rule: the state dir holds the hive's \
             keys and every agent's credentials, and is never a build context)",
            roots.state_dir.display()
        )));
    }
    let configured: Vec<PathBuf> = roots.configured.iter().map(|r| real_or_same(r)).collect();
    if in_state_roots || configured.iter().any(|r| real.starts_with(r)) {
        return Ok(real);
    }
    let lexically_inside = [&roots.knowledge, &roots.builds]
        .into_iter()
        .chain(roots.configured.iter())
        .any(|r| path.starts_with(r));
    if lexically_inside && real != path {
        return Err(refuse(format!(
            "it resolves to {}, outside every allowed root (rule: a symlink must not leave its \
             root; allowed: {})",
            real.display(),
            roots.describe()
        )));
    }
    Err(refuse(format!(
        "it is outside every allowed root (rule: a build context must be inside {})",
        roots.describe()
    )))
}

/// Check that the local repository at `path` may be cloned from: it is a
/// context directory by [`confine`]'s rules, and its git dir lies in it (a
/// `.git` file, `gitdir: …`, or an `objects/info/alternates` list would make
/// the clone read a repository elsewhere). Its real path.
pub fn confine_repo(path: &Path, roots: &BuildRoots) -> Result<PathBuf, RuntimeError> {
    let real = confine(path, roots)?;
    let dot_git = real.join(".git");
    let git_dir = if dot_git.is_dir() {
        dot_git
    } else {
        real.clone()
    };
    let link = if real.join(".git").is_file() {
        Some(".git is a file (a link to a git dir elsewhere)")
    } else if git_dir.join("objects/info/alternates").exists() {
        Some("its objects/info/alternates borrows objects from another repository")
    } else {
        None
    };
    match link {
        None => Ok(real),
        Some(why) => Err(RuntimeError::Context {
            context: path.display().to_string(),
            reason: format!(
                "{why} (rule: a local repository is read only inside its build root; clone it \
                 into one instead)"
            ),
        }),
    }
}

/// Where an agent's `host` volumes may lie: inside one of the hive
/// config's `volume_roots` (none by default, so no host path is mounted
/// until the operator names a root), never the state dir nor anything
/// containing it. The same rules as a build context's: no `..`, the real
/// path (symlinks resolved) inside a root, a symlink never leaving it.
#[derive(Debug, Clone)]
pub struct VolumeRoots {
    pub state_dir: PathBuf,
    /// From the hive config's `volume_roots`.
    pub configured: Vec<PathBuf>,
}

/// Check that `agent` may mount the host path `path`; its real path, which
/// is what is mounted. The error names the path, the agent and the rule.
pub fn confine_volume(
    agent: &AgentName,
    path: &Path,
    roots: &VolumeRoots,
) -> Result<PathBuf, RuntimeError> {
    let refuse = |rule: String| RuntimeError::Refused {
        agent: agent.clone(),
        what: format!("volume host path {}", path.display()),
        rule,
    };
    let allowed = || match roots.configured.as_slice() {
        [] => "volume_roots (none configured)".to_string(),
        list => format!(
            "volume_roots ({})",
            list.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(refuse(
            "rule: a host path is absolute, without '..', inside the hive config's volume_roots"
                .into(),
        ));
    }
    let real = path
        .canonicalize()
        .map_err(|e| refuse(format!("cannot resolve it: {e} (rule: it must exist)")))?;
    let state = real_or_same(&roots.state_dir);
    if state.starts_with(&real) || real.starts_with(&state) {
        return Err(refuse(format!(
            "it is, contains or lies in the hive's state dir {} (rule: the state dir holds the \
             hive's keys and every agent's credentials, and is never mounted as a volume)",
            roots.state_dir.display()
        )));
    }
    let configured: Vec<PathBuf> = roots.configured.iter().map(|r| real_or_same(r)).collect();
    if configured.iter().any(|r| real.starts_with(r)) {
        return Ok(real);
    }
    if roots.configured.iter().any(|r| path.starts_with(r)) && real != path {
        return Err(refuse(format!(
            "it resolves to {}, outside every root (rule: a symlink must not leave its root; \
             allowed: {})",
            real.display(),
            allowed()
        )));
    }
    Err(refuse(format!(
        "it is outside every root (rule: a host path must be inside {})",
        allowed()
    )))
}

/// A root that does not exist (yet) cannot be resolved; compare as given.
fn real_or_same(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        _tmp: tempfile::TempDir,
        base: PathBuf,
        roots: BuildRoots,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let state = base.join("state");
        for d in [
            "state/knowledge/ctx",
            "state/builds/a",
            "state/agents/a",
            "srv/ok",
            "secret",
        ] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::os::unix::fs::symlink(base.join("secret"), base.join("srv/escape")).unwrap();
        std::os::unix::fs::symlink(base.join("srv/ok"), base.join("srv/inner")).unwrap();
        std::os::unix::fs::symlink(&state, base.join("srv/state-link")).unwrap();
        let roots = BuildRoots::new(&state, vec![base.join("srv")]);
        Fixture {
            _tmp: tmp,
            base,
            roots,
        }
    }

    #[test]
    fn contexts_inside_roots_pass() {
        let f = fixture();
        for rel in [
            "state/knowledge/ctx",
            "state/builds/a",
            "srv/ok",
            "srv",
            "srv/inner",
        ] {
            let p = f.base.join(rel);
            assert!(confine(&p, &f.roots).is_ok(), "{rel}");
        }
    }

    #[test]
    fn hostile_contexts_are_refused_naming_path_and_rule() {
        let f = fixture();
        let table = [
            ("srv/ok/../../secret", "must not contain '..'"),
            ("srv/escape", "a symlink must not leave its root"),
            ("state", "hive's state dir"),
            ("state/agents/a", "hive's state dir"),
            ("srv/state-link", "hive's state dir"),
            ("", "hive's state dir"),
            ("state/builds", "is the root of the hive's clones"),
            ("secret", "outside every allowed root"),
            ("nope", "cannot resolve"),
        ];
        for (rel, rule) in table {
            let p = f.base.join(rel);
            let msg = confine(&p, &f.roots).unwrap_err().to_string();
            assert!(msg.contains(rule), "{rel}: {msg}");
            assert!(msg.contains(&p.display().to_string()), "{rel}: {msg}");
        }
        let none = BuildRoots::new(&f.base.join("state"), vec![]);
        let msg = confine(&f.base.join("srv/ok"), &none)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("build_roots (none configured)"), "{msg}");
    }

    #[test]
    fn volume_host_paths_stay_inside_volume_roots() {
        let f = fixture();
        let agent = AgentName::new("web").unwrap();
        let roots = VolumeRoots {
            state_dir: f.base.join("state"),
            configured: vec![f.base.join("srv")],
        };
        for rel in ["srv/ok", "srv", "srv/inner"] {
            let p = f.base.join(rel);
            confine_volume(&agent, &p, &roots).unwrap_or_else(|e| panic!("{rel}: {e}"));
        }
        let real = confine_volume(&agent, &f.base.join("srv/inner"), &roots).unwrap();
        assert_eq!(real, f.base.join("srv/ok"), "the real path is mounted");
        let table = [
            ("srv/ok/../../secret", "without '..'"),
            ("srv/escape", "a symlink must not leave its root"),
            ("srv/state-link", "hive's state dir"),
            ("state/agents/a", "hive's state dir"),
            ("", "hive's state dir"),
            ("secret", "outside every root"),
            ("srv/nope", "cannot resolve"),
        ];
        for (rel, rule) in table {
            let p = f.base.join(rel);
            let msg = confine_volume(&agent, &p, &roots).unwrap_err().to_string();
            assert!(msg.contains(rule), "{rel}: {msg}");
            assert!(msg.contains(&p.display().to_string()), "{rel}: {msg}");
            assert!(msg.contains("agent web"), "{rel}: {msg}");
        }
        let none = VolumeRoots {
            configured: vec![],
            ..roots
        };
        let msg = confine_volume(&agent, &f.base.join("srv/ok"), &none)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("volume_roots (none configured)"), "{msg}");
    }

    #[test]
    fn a_local_repository_must_keep_its_git_dir_inside_its_root() {
        let f = fixture();
        let git = crate::git::git_for_tests;
        let repo = f.base.join("srv/ok/repo");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main", "."]);
        assert_eq!(confine_repo(&repo, &f.roots).unwrap(), repo);
        assert!(confine_repo(&repo.join(".git"), &f.roots).is_ok());
        assert!(confine_repo(&f.base.join("secret"), &f.roots).is_err());

        let linked = f.base.join("srv/ok/linked");
        std::fs::create_dir_all(&linked).unwrap();
        let gitdir = format!("gitdir: {}\n", f.base.join("secret/.git").display());
        std::fs::write(linked.join(".git"), gitdir).unwrap();
        let msg = confine_repo(&linked, &f.roots).unwrap_err().to_string();
        assert!(
            msg.contains(".git is a file") && msg.contains("rule:"),
            "{msg}"
        );

        let info = repo.join(".git/objects/info");
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(info.join("alternates"), "/elsewhere/objects\n").unwrap();
        for p in [repo.clone(), repo.join(".git")] {
            let msg = confine_repo(&p, &f.roots).unwrap_err().to_string();
            assert!(msg.contains("alternates"), "{msg}");
        }
    }
}
