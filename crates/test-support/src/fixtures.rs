//! Where the golden test data lives.
//!
//! The repository carries its fixtures in `fixtures/` at the workspace root (scikit-image,
//! SciPy, trackpy and VIP outputs; see `fixtures/detect/README.md` and
//! `fixtures/paco/README.md`). Every test and benchmark finds them through [`dir`], so a test
//! binary carried to another machine (the GPU harness `scripts/gpu-check.sh`) reads them from
//! wherever `ARRAYBRIDGE_FIXTURES` points.

use std::path::PathBuf;

/// The environment variable that overrides the fixture folder.
pub const ENV: &str = "ARRAYBRIDGE_FIXTURES";

/// The fixture folder: `$ARRAYBRIDGE_FIXTURES` when set and non-empty, else the workspace's
/// `fixtures/` as seen from where this crate was compiled.
pub fn dir() -> PathBuf {
    match std::env::var_os(ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures")),
    }
}

/// `dir()/rel`.
pub fn path(rel: &str) -> PathBuf {
    dir().join(rel)
}

#[cfg(test)]
mod tests {
    #[test]
    fn in_repository_fixtures_exist() {
        assert!(
            super::path("detect/README.md").is_file(),
            "{}",
            super::dir().display()
        );
        assert!(super::path("paco/README.md").is_file());
    }
}
