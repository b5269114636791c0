//! The particle side's results: detection positions, tracks grouped by id, and the
//! `detections.csv` / `tracks.csv` tables.

use std::path::Path;

use algorithms::detect::Particle;
use arraybridge::io::csv::create_writer;

use super::super::detect::{particle_header, particle_row};
use bridge_core::Result;

/// Where a detection is: its refined position when it has one, else its pixel.
pub(super) fn position(p: &Particle) -> (f64, f64) {
    p.refined.map_or((p.y, p.x), |r| (r.y, r.x))
}

/// Track id → its points `(frame, y, x)` in frame order, tracks in id order.
pub(super) fn collect_tracks(ps: &[Particle]) -> Vec<Vec<(u32, f64, f64)>> {
    let mut by_id: std::collections::BTreeMap<i64, Vec<(u32, f64, f64)>> = Default::default();
    for p in ps {
        if let Some(id) = p.id.filter(|&i| i >= 0) {
            let (y, x) = position(p);
            by_id.entry(id).or_default().push((p.frame, y, x));
        }
    }
    by_id
        .into_values()
        .map(|mut v| {
            v.sort_by_key(|q| q.0);
            v
        })
        .collect()
}

/// The `arraybridge detect --refine` columns, plus `particle` for the tracks.
pub(super) fn write_detections(path: &Path, ps: &[Particle], with_id: bool) -> Result<()> {
    let mut w = create_writer(path)?;
    let mut head = particle_header(true);
    if with_id {
        head.push("particle");
    }
    w.write_record(head)?;
    w.write_number_rows(ps, |p, row| {
        particle_row(p, true, row);
        if with_id {
            row.num(p.id.unwrap_or(-1));
        }
    })?;
    w.finish()
}
