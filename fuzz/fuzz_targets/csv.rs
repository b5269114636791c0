//! The detections CSV of `track`: the table reader, the row reader and every numeric accessor
//! `track` uses.
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
    // the row reader `track` streams with: the same rows, one at a time
    if let Ok(mut rd) = arraybridge::io::csv::RowReader::open(p.path()) {
        let cols: Vec<usize> = ["frame", "y", "x"]
            .iter()
            .filter_map(|n| rd.column(n).ok())
            .collect();
        let mut row = arraybridge::io::csv::StringRecord::new();
        for _ in 0..64 {
            match rd.read_row(&mut row) {
                Ok(true) => {
                    for &c in &cols {
                        let _ = (rd.frame(&row, c), rd.finite_f64(&row, c));
                    }
                }
                _ => break,
            }
        }
    }
});
