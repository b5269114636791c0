//! What `arraybridge paco` adds to the listed candidates: sub-pixel astrometry (`--refine`) and
//! the unbiased flux (`--flux`).

use algorithms::paco::{FluxOptions, PacoJob, PacoParams, SubPixel, refine_peak, unbiased_flux};
use bridge_core::{BridgeError, Result};

use super::super::common::{Global, Stages};
use super::inputs::Inputs;
use super::output::Candidate;

/// `--refine`: each candidate's S/N on a 0.25-px grid within 1 px, on the CPU with the run's
/// sub-pixel templates (a q = 32 table without); a candidate that cannot be refined is noted.
pub(super) fn refine(
    cands: &mut [Candidate],
    inputs: &Inputs,
    params: &PacoParams,
    stages: &Stages,
    g: Global,
) -> Result<()> {
    let Inputs { cube, angles, psf } = inputs;
    let n = cands.len();
    stages.say(format!(
        "paco: sub-pixel astrometry for {n} candidate(s) (0.25-px grid, CPU)"
    ));
    let mut rp = params.clone();
    if rp.subpixel == SubPixel::Off {
        rp.subpixel = SubPixel::Table { q: 32 };
    }
    let job = PacoJob::new(cube.view(), angles.view(), psf.view(), &rp)?;
    for c in cands.iter_mut() {
        match refine_peak(&job, (c.y as f64, c.x as f64), 0.25, 1.0) {
            Ok(pk) => {
                c.y_sub = Some(pk.y);
                c.x_sub = Some(pk.x);
                c.snr_sub = Some(pk.snr);
            }
            Err(BridgeError::InvalidInput(m)) => g.note(format!(
                "paco: candidate ({}, {}) not refined: {m}",
                c.y, c.x
            )),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `--flux`: the unbiased flux (paper Algorithm 3) of each candidate, at its refined position
/// where it has one.
pub(super) fn flux(
    cands: &mut [Candidate],
    inputs: &Inputs,
    params: &PacoParams,
    stages: &Stages,
) -> Result<()> {
    let Inputs { cube, angles, psf } = inputs;
    stages.say(format!(
        "paco: unbiased flux for {} candidate(s)",
        cands.len()
    ));
    let pos: Vec<(f64, f64)> = cands
        .iter()
        .map(|c| match (c.y_sub, c.x_sub) {
            (Some(y), Some(x)) => (y, x),
            _ => (c.y as f64, c.x as f64),
        })
        .collect();
    let est = unbiased_flux(
        cube.view(),
        angles.view(),
        psf.view(),
        params,
        &pos,
        FluxOptions::default(),
    )?;
    for (c, e) in cands.iter_mut().zip(est) {
        c.unbiased_flux = Some(e.flux);
        c.unbiased_flux_err = Some(e.std);
    }
    Ok(())
}
