//! Command line entry point.

/// Parse arguments, run, return the exit code.
pub fn main() -> i32 {
    eprintln!("hive: not built yet");
    1
}
