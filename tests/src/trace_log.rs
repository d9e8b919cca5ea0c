//! Capture the `tracing` output of code a test runs in-process (the hive's
//! tasks, the contract crate) into one file per test binary, at trace
//! level, so a test can read what was logged: a warning it expects, or a
//! secret it must not find.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The file every tracing event of this test process goes to. The first
/// call installs the global subscriber; later calls return the same path.
///
/// It lives in cargo's target directory (`target/<profile>/test-logs/`,
/// one file per test binary, truncated at each run), not under `/tmp`: a
/// test run leaves nothing behind there, and the last run's log stays
/// where a failing test can be looked into.
pub fn in_process_log() -> &'static Path {
    static LOG: OnceLock<PathBuf> = OnceLock::new();
    LOG.get_or_init(|| {
        let exe = std::env::current_exe().expect("current test executable");
        let stem = exe
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        // target/<profile>/deps/<exe> -> target/<profile>/test-logs/
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .map(|p| p.join("test-logs"))
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&dir).expect("create the test log directory");
        let path = dir.join(format!("trace-{stem}.log"));
        let file = std::fs::File::create(&path).expect("create the in-process log");
        let file = Arc::new(Mutex::new(file));
        let writer = move || LockedFile(file.clone());
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(writer)
            .init();
        path
    })
}

/// What has been logged in-process so far.
pub fn in_process_log_text() -> String {
    std::fs::read_to_string(in_process_log()).unwrap_or_default()
}

struct LockedFile(Arc<Mutex<std::fs::File>>);

impl Write for LockedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().expect("log lock").flush()
    }
}
