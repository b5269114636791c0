//! Run tests of the current test binary again in a child process with other environment
//! variables: the way to test run-time knobs (`bridge_core::tuning`), which each process reads
//! once.

use std::process::Command;

/// Run the tests named in `tests` (exact names) of this test binary in a child process with
/// `env` set, and panic with the child's output unless every one of them ran and passed.
/// Returns the child's combined output (for further checks).
pub fn rerun_with_env(env: &[(&str, &str)], tests: &[&str]) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args(tests)
        .args(["--exact", "--test-threads=1", "--nocapture"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running the test binary again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "tests {tests:?} with {env:?} failed ({}):\n{text}",
        out.status
    );
    let want = format!("{} passed", tests.len());
    assert!(
        text.contains(&want),
        "tests {tests:?} with {env:?} did not all run (expected \"{want}\"):\n{text}"
    );
    text
}

/// Whether this process is the child run of [`rerun_with_env`] that set `var` (the flag a
/// test sets to know it is the inner run): the tests' one way to read such a flag.
pub fn in_child(var: &str) -> bool {
    std::env::var_os(var).is_some()
}
