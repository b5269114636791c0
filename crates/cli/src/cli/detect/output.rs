//! The output CSV: the `--method log` columns (shared with `demo`) and `Output`, the CSV
//! written chunk by chunk as detections come.

use std::path::Path;

use algorithms::detect::{Feature, Particle};
use arraybridge::io::csv::{NumberRow, TableWriter, create_writer};
use bridge_core::Result;

/// The `--method log` columns: `frame,y,x,sigma,response`, and with `refine` the refinement's
/// `y_refined,x_refined,mass,size,ecc,signal,background`.
pub(in crate::cli) fn particle_header(refine: bool) -> Vec<&'static str> {
    let mut header = vec!["frame", "y", "x", "sigma", "response"];
    if refine {
        header.extend([
            "y_refined",
            "x_refined",
            "mass",
            "size",
            "ecc",
            "signal",
            "background",
        ]);
    }
    header
}

/// One particle's fields under [`particle_header`]; with `refine`, a particle without a
/// refinement gets empty refinement fields.
pub(in crate::cli) fn particle_row(p: &Particle, refine: bool, row: &mut NumberRow<'_>) {
    row.num(p.frame);
    for v in [p.y, p.x, p.sigma, p.response] {
        row.num(v);
    }
    if refine {
        match &p.refined {
            Some(r) => {
                for v in [r.y, r.x, r.mass, r.size, r.ecc, r.signal, r.background] {
                    row.num(v);
                }
            }
            None => (0..7).for_each(|_| row.empty()),
        }
    }
}

/// The output CSV, written chunk by chunk as detections come.
pub(super) struct Output {
    w: TableWriter,
    /// `--refine`: the refinement's columns too.
    refine: bool,
}

impl Output {
    pub(super) fn log(path: &Path, refine: bool) -> Result<Self> {
        let mut w = create_writer(path)?;
        w.write_record(particle_header(refine))?;
        Ok(Output { w, refine })
    }

    pub(super) fn locate(path: &Path) -> Result<Self> {
        let mut w = create_writer(path)?;
        w.write_record([
            "frame", "y", "x", "mass", "size", "ecc", "signal", "raw_mass", "ep",
        ])?;
        Ok(Output { w, refine: false })
    }

    pub(super) fn particles(&mut self, ps: &[Particle]) -> Result<()> {
        let refine = self.refine;
        self.w
            .write_number_rows(ps, |p, row| particle_row(p, refine, row))
    }

    pub(super) fn features(&mut self, rows: &[(usize, Feature)]) -> Result<()> {
        self.w.write_number_rows(rows, |(t, f), row| {
            row.num(*t);
            for v in [f.y, f.x, f.mass, f.size, f.ecc, f.signal, f.raw_mass, f.ep] {
                row.num(v);
            }
        })
    }

    pub(super) fn finish(self) -> Result<()> {
        self.w.finish()
    }
}
