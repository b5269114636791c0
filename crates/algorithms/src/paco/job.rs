//! [`PacoJob`]: one run's inputs, validated (cube shape and finiteness, angles, patch radius
//! against the frame and the PSF, memory of the per-thread covariances, PSF normalisation, star
//! centre), with the geometry, the patch disk and the templates derived from them. Everything a
//! backend needs; it runs nothing itself.

use bridge_core::{BridgeError, Result};
use ndarray::{ArrayView1, ArrayView2, ArrayView3};

use super::geometry::{Geometry, disk_offsets};
use super::psf::{NormalizedPsf, normalize_psf};
use super::settings::{Center, EdgeRule, PacoParams, SubPixel};
use super::templates::Templates;

/// Everything a backend needs for one run, validated.
pub struct PacoJob<'a> {
    pub(crate) cube: ArrayView3<'a, f64>,
    pub(crate) angles: Vec<f64>,
    pub(crate) params: PacoParams,
    pub(crate) geom: Geometry,
    pub(crate) psf_n: NormalizedPsf,
    pub(crate) disk: Vec<(isize, isize)>,
}

/// Every pixel of every frame enters the statistics of its neighbours, so one NaN makes all
/// maps NaN and one infinite pixel silently hides what is around it: non-finite pixels are an
/// error that says where they are.
fn check_finite(cube: ArrayView3<'_, f64>) -> Result<()> {
    let t = cube.dim().0;
    let mut first: Option<(usize, usize)> = None;
    let (mut frames, mut pixels) = (0usize, 0usize);
    let mut all_bad = true;
    for i in 0..t {
        let f = cube.index_axis(ndarray::Axis(0), i);
        let bad = f.iter().filter(|v| !v.is_finite()).count();
        if bad > 0 {
            frames += 1;
            pixels += bad;
            first.get_or_insert((i, bad));
        }
        all_bad &= bad == f.len();
    }
    if all_bad {
        return Err(BridgeError::InvalidInput(
            "the cube has no finite value".into(),
        ));
    }
    match first {
        None => Ok(()),
        Some((i, n)) => Err(BridgeError::InvalidInput(format!(
            "the cube has {pixels} non-finite pixel(s) (NaN or ±Inf) in {frames} frame(s), the \
             first in frame {i} ({n} pixels); PACO uses every pixel of every frame in the \
             statistics of its neighbours, so remove those frames (with their angles) or \
             replace the pixels (e.g. by the frame median) first"
        ))),
    }
}

impl<'a> PacoJob<'a> {
    /// Validate inputs and normalise the PSF.
    pub fn new(
        cube: ArrayView3<'a, f64>,
        angles: ArrayView1<'_, f64>,
        psf: ArrayView2<'_, f64>,
        params: &PacoParams,
    ) -> Result<Self> {
        let (t, h, w) = cube.dim();
        if t < 2 {
            return Err(BridgeError::InvalidInput(format!(
                "the cube needs at least 2 frames, found {t}"
            )));
        }
        if angles.len() != t {
            return Err(BridgeError::shape_mismatch(
                format!("{t} angles (one per frame)"),
                format!("{} angles", angles.len()),
                "PACO angles",
            ));
        }
        if angles.iter().any(|a| !a.is_finite()) {
            return Err(BridgeError::InvalidInput(
                "angles contain non-finite values".into(),
            ));
        }
        let r = params.psf_rad;
        if r == 0 {
            return Err(BridgeError::invalid_argument(
                "psf_rad",
                "must be at least 1",
            ));
        }
        // The smallest frame with one pixel that may hold statistics. Checked before anything
        // of size R² is built (and without overflow for absurd radii).
        let min_side = match params.edge {
            EdgeRule::Box => r.checked_mul(2).and_then(|d| d.checked_add(3)),
            EdgeRule::Disk => r.checked_mul(2).and_then(|d| d.checked_add(1)),
        }
        .unwrap_or(usize::MAX);
        if h < min_side || w < min_side {
            return Err(BridgeError::InvalidInput(format!(
                "frames of {h}×{w} are too small for patches of radius {r} with the {:?} edge rule (need at least {min_side}×{min_side})",
                params.edge
            )));
        }
        let disk = disk_offsets(r);
        if let Some(pa) = params.patch_area
            && pa != disk.len()
        {
            return Err(BridgeError::invalid_argument(
                "patch_area",
                format!("a disk of radius {r} has {} pixels, not {pa}", disk.len()),
            ));
        }
        // Each worker holds at least one K×K covariance (and its factor) at a time.
        let k = disk.len() as u64;
        let workers = rayon::current_num_threads() as u64;
        bridge_core::host::check_allocation(
            k.saturating_mul(k)
                .saturating_mul(16)
                .saturating_mul(workers),
            &format!(
                "PACO patches of radius {r} (--radius; {k} pixels, a {k}×{k} covariance per \
                 thread, {workers} threads)"
            ),
            "use a smaller patch radius (about the PSF's FWHM)",
        )?;
        let (ph, pw) = psf.dim();
        if ph > h || pw > w {
            return Err(BridgeError::InvalidInput(format!(
                "the PSF ({ph}×{pw}) is larger than the frames ({h}×{w})"
            )));
        }
        if ph % 2 == 0 || pw % 2 == 0 {
            return Err(BridgeError::InvalidInput(format!(
                "the PSF is {ph}×{pw}: PACO needs odd sides with the star on the centre pixel \
                 (an even side has no centre pixel and would shift every template by half a \
                 pixel); crop one row and/or column so the peak is in the middle"
            )));
        }
        if ph < 2 * r + 1 || pw < 2 * r + 1 {
            return Err(BridgeError::InvalidInput(format!(
                "the PSF ({ph}×{pw}) is smaller than the patch ({0}×{0})",
                2 * r + 1
            )));
        }
        check_finite(cube)?;
        if params.batch_size == 0 {
            return Err(BridgeError::invalid_argument(
                "batch_size",
                "must be at least 1",
            ));
        }
        let psf_n = normalize_psf(psf, params.psf_norm, params.psf_scale)?;
        let (sub, add) = match params.center {
            Center::Auto => {
                // floor(N/2) is N/2 for even N and (N−1)/2, the centre pixel, for odd N.
                let c = ((h / 2) as f64, (w / 2) as f64);
                (c, c)
            }
            Center::VipOdd => (
                (h as f64 / 2.0, w as f64 / 2.0),
                ((h / 2) as f64, (w / 2) as f64),
            ),
            Center::At(cy, cx) => {
                if !(cy.is_finite() && cx.is_finite()) {
                    return Err(BridgeError::invalid_argument("center", "must be finite"));
                }
                // The star must be on the frame (every trajectory rotates about it).
                if !(0.0..=(h - 1) as f64).contains(&cy) || !(0.0..=(w - 1) as f64).contains(&cx) {
                    return Err(BridgeError::invalid_argument(
                        "center",
                        format!(
                            "({cy}, {cx}) is outside the {h}×{w} frame (y in 0..={}, x in 0..={})",
                            h - 1,
                            w - 1
                        ),
                    ));
                }
                ((cy, cx), (cy, cx))
            }
        };
        let geom = Geometry {
            height: h,
            width: w,
            sub,
            add,
            rounding: params.rounding,
            radius: r,
            edge: params.edge,
        };
        Ok(PacoJob {
            cube,
            angles: angles.to_vec(),
            params: params.clone(),
            geom,
            psf_n,
            disk,
        })
    }

    /// The geometry in use.
    pub fn geometry(&self) -> &Geometry {
        &self.geom
    }

    /// The cube `[t][y][x]`.
    pub fn cube(&self) -> ArrayView3<'a, f64> {
        self.cube
    }

    /// Derotation angles, one per frame (degrees).
    pub fn angles(&self) -> &[f64] {
        &self.angles
    }

    /// The settings.
    pub fn params(&self) -> &PacoParams {
        &self.params
    }

    /// Patch disk offsets (dy, dx) in row-major order (K of them).
    pub fn disk(&self) -> &[(isize, isize)] {
        &self.disk
    }

    /// The PSF template for every entry of a sub-pixel table with `q` steps per pixel: a
    /// `(q+1)·(q+1)·K` row-major array (fy index, fx index, disk index) of exact VIP FFT-shifted
    /// templates starting at offset 0 (`Trunc`) or −½ (`Nearest`). Device backends upload it and
    /// blend bilinearly like the CPU does.
    pub fn template_table(&self, q: usize) -> Result<Vec<f64>> {
        match Templates::new(
            &self.psf_n.psf,
            &self.disk,
            SubPixel::Table { q },
            self.geom.rounding,
        )? {
            Templates::Table { data, .. } => Ok(data),
            _ => Err(BridgeError::Unsupported(
                "internal: table templates expected".into(),
            )),
        }
    }

    /// The centred template h0 (K values).
    pub fn centred_template(&self) -> Result<Vec<f64>> {
        match Templates::new(
            &self.psf_n.psf,
            &self.disk,
            SubPixel::Off,
            self.geom.rounding,
        )? {
            Templates::Centred(h) => Ok(h),
            _ => Err(BridgeError::Unsupported(
                "internal: centred template expected".into(),
            )),
        }
    }

    /// The normalised PSF in use.
    pub fn normalized_psf(&self) -> &NormalizedPsf {
        &self.psf_n
    }
}
