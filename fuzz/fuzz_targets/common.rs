//! Shared by the fuzz targets: a small memory budget (so a header that declares gigabytes is
//! rejected by the readers' checks, never by libFuzzer's malloc limit) and a per-process
//! temporary file for the readers that take a path (removed once the input is done).

use std::path::{Path, PathBuf};
use std::sync::Once;

/// Budget the readers see, MiB (well under `-rss_limit_mb=1024`).
pub const BUDGET_MB: &str = "256";

/// Set the budget once per process.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: called once, before any other thread of this process reads the environment
        // (libFuzzer runs the target on one thread).
        unsafe { std::env::set_var(bridge_core::host::LIMIT_ENV, BUDGET_MB) };
    });
}

/// This process's temporary file; removed when dropped, so a replay leaves nothing behind.
pub struct TempFile(PathBuf);

impl TempFile {
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Write `data` to this process's temporary file with extension `ext`.
pub fn temp_file(data: &[u8], ext: &str) -> TempFile {
    let p = std::env::temp_dir().join(format!("arraybridge-fuzz-{}.{ext}", std::process::id()));
    std::fs::write(&p, data).expect("the temporary folder is writable");
    TempFile(p)
}
