//! The detections CSV of `track`: the table reader and every numeric accessor `track` uses.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::init();
    let p = common::temp_file(data, "csv");
    if let Ok(t) = arraybridge::io::csv::read_table(p.path()) {
        for name in ["frame", "y", "x"] {
            let _ = t.f64_column(name);
        }
        if let Ok(c) = t.column("frame") {
            for r in 0..t.rows.len().min(64) {
                let _ = t.frame(r, c);
            }
        }
    }
});
