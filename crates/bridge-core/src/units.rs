//! Units for messages (a bottom module: it imports nothing of the crate).

/// `a` and `b` as [`format_bytes`] writes them, in bytes where the two would read the same
/// (`needs 64.0 MiB but only 64.0 MiB fit` says nothing).
pub fn format_bytes_apart(a: u64, b: u64) -> (String, String) {
    let (fa, fb) = (format_bytes(a), format_bytes(b));
    if fa == fb && a != b {
        (format!("{a} bytes"), format!("{b} bytes"))
    } else {
        (fa, fb)
    }
}

/// Human-readable byte count (`1.5 GiB`).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
