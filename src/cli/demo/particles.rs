//! The particle side's results: detection positions, tracks grouped by id, and the
//! `detections.csv` / `tracks.csv` tables.

use std::io::Write as _;
use std::path::Path;

use algorithms::detect::Particle;
use bridge_core::{BridgeError, Result};

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
    let name = path.display().to_string();
    let io = |e| BridgeError::io(name.clone(), e);
    let f = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(f);
    write!(
        w,
        "frame,y,x,sigma,response,y_refined,x_refined,mass,size,ecc,signal,background"
    )
    .map_err(io)?;
    writeln!(w, "{}", if with_id { ",particle" } else { "" }).map_err(io)?;
    for p in ps {
        write!(w, "{},{},{},{},{}", p.frame, p.y, p.x, p.sigma, p.response).map_err(io)?;
        match &p.refined {
            Some(r) => write!(
                w,
                ",{},{},{},{},{},{},{}",
                r.y, r.x, r.mass, r.size, r.ecc, r.signal, r.background
            ),
            None => write!(w, ",,,,,,,"),
        }
        .map_err(io)?;
        if with_id {
            write!(w, ",{}", p.id.unwrap_or(-1)).map_err(io)?;
        }
        writeln!(w).map_err(io)?;
    }
    w.flush().map_err(io)
}
