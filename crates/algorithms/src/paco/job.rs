//! [`PacoJob`]: one run's inputs, validated (cube shape, finiteness and range, angles, patch
//! radius against the frame and the PSF, memory of the per-thread covariances, PSF
//! normalisation, star centre), with the geometry, the patch disk and the templates derived from
//! them. Everything a backend needs; it runs nothing itself.
//!
//! # The cube's scale
//!
//! S/N does not depend on the cube's scale and the flux scales with it, but the arithmetic has a
//! range: the shrinkage of every covariance squares it, so its terms go as the fourth power of
//! the pixel values (issue 32: a cube ×1e-100 underflowed them, S/N 52.6 instead of 6.91;
//! ×1e80 overflowed them, all-NaN maps). A cube whose largest |value| M lies outside
//! `[2^-SAFE_EXP, 2^SAFE_EXP)` is therefore multiplied by the power of two `2^k` that brings M
//! into `[0.5, 1)` (one scaled copy, `T·H·W·8` bytes): multiplying by a power of two is exact,
//! and every step of PACO (centring, products, shrinkage ratio, Cholesky, substitutions) is
//! then exactly the unscaled one times a power of two, so S/N is the same to the bit and a, b,
//! flux and their uncertainty are converted back exactly ([`PacoJob::ab_in_cube_units`]:
//! `a·2^2k`, `b·2^k`). A cube within the range is used as given (no copy, the same bytes as
//! before). M outside `[2^-LIMIT_EXP, 2^LIMIT_EXP)` (about 3.9e-121 to 2.6e120) is refused:
//! a ∝ 1/scale² would leave the floating-point range.
//!
//! Float (a device without doubles, or `Precision::F32`) has far less room (fourth powers
//! of values beyond about 2^±30 leave it), so a device computing in float always brings M into
//! `[0.5, 1)` while it converts the cube (`PacoJob::device_scale`; no extra copy) and converts
//! its a and b back the same way (`PacoJob::ab_from_device`).

use bridge_core::{BridgeError, Result};
use ndarray::{Array3, ArrayView1, ArrayView2, ArrayView3, CowArray, Ix3};
use rayon::prelude::*;

use super::geometry::{Geometry, disk_offsets};
use super::psf::{NormalizedPsf, normalize_psf};
use super::settings::{Center, EdgeRule, PacoParams, SubPixel};
use super::stats::try_vec;
use super::templates::Templates;

/// A cube whose largest |value| M is in `[2^-SAFE_EXP, 2^SAFE_EXP)` is used as given: its
/// covariances' squares (≤ 16·K²·M⁴, and ≥ the noise's fourth power for any realistic noise
/// level) stay well inside the double range.
const SAFE_EXP: i32 = 60;

/// The largest |value| of a cube must lie in `[2^-LIMIT_EXP, 2^LIMIT_EXP)`: a and b, computed
/// on the cube scaled into `[0.5, 1)`, are multiplied back by up to `2^(2·LIMIT_EXP)`, which
/// leaves ±2^220 of the double range for the data's own a (the PSF and noise levels).
const LIMIT_EXP: i32 = 400;

/// `2^e` for `e` in the normal range (exact).
fn pow2(e: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&e));
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The binary exponent `e` of a finite `m > 0`: `m = f·2^e` with `f` in `[0.5, 1)` (C's
/// `frexp`).
fn binary_exponent(m: f64) -> i32 {
    let biased = ((m.to_bits() >> 52) & 0x7ff) as i32;
    if biased == 0 {
        // subnormal: 2^64·m is normal and exact
        return binary_exponent(m * pow2(64)) - 64;
    }
    biased - 1022
}

/// The exponent `k` the cube is multiplied by (`2^k`), from its largest |value| `max_abs`: 0
/// within the safe range (and for an all-zero cube), else the one that brings `max_abs` into
/// `[0.5, 1)`; an error outside the supported range.
fn cube_exponent(max_abs: f64) -> Result<i32> {
    if max_abs == 0.0 {
        return Ok(0);
    }
    let e = binary_exponent(max_abs);
    // max_abs < 2^e ≤ 2·max_abs, so max_abs ≥ 2^x ⇔ e > x and max_abs < 2^x ⇔ e ≤ x
    if e > -SAFE_EXP && e <= SAFE_EXP {
        return Ok(0);
    }
    if e <= -LIMIT_EXP || e > LIMIT_EXP {
        return Err(BridgeError::InvalidInput(
            format!(
                "the cube's largest |value| is {max_abs:e}: PACO supports cubes whose largest \
             |value| lies between 2^-{LIMIT_EXP} and 2^{LIMIT_EXP} (about {:.1e} to {:.1e}; \
             a scales as 1/value² and would leave the floating-point range); S/N does not \
             depend on the cube's scale and the flux scales with it, so multiply the cube by a \
             constant first (and the flux by its inverse after)",
                pow2(-LIMIT_EXP),
                pow2(LIMIT_EXP),
            )
            .into(),
        ));
    }
    Ok(-e)
}

/// The cube times `2^k`, a new array in standard layout, checked against the host budget first
/// ([`BridgeError::OutOfMemory`] instead of aborting when the allocation still fails).
fn scaled_cube(cube: ArrayView3<'_, f64>, k: i32) -> Result<Array3<f64>> {
    let (t, h, w) = cube.dim();
    bridge_core::host::check_allocation(
        (cube.len() as u64).saturating_mul(8),
        &format!("a scaled copy of the PACO cube ({t}×{h}×{w} f64)"),
        "multiply the cube by a power of two that brings its largest |value| into [2^-60, 2^60) \
         first (PACO then uses it as given, without the copy)",
    )?;
    let s = pow2(k);
    let mut data = try_vec(cube.len(), 0.0f64)?;
    match cube.as_slice() {
        Some(src) => data
            .par_iter_mut()
            .zip(src.par_iter())
            .for_each(|(d, &v)| *d = v * s),
        None => {
            for (d, &v) in data.iter_mut().zip(cube.iter()) {
                *d = v * s;
            }
        }
    }
    Array3::from_shape_vec(cube.raw_dim(), data)
        .map_err(|e| BridgeError::Unsupported(format!("internal: {e}")))
}

/// a and b computed on a cube times `2^k`, in place, into the units of the cube: a·2^2k, b·2^k
/// (exact; |k| ≤ LIMIT_EXP, so both factors are normal numbers). Nothing for k = 0.
fn scale_ab<'v>(
    k: i32,
    a: impl IntoIterator<Item = &'v mut f64>,
    b: impl IntoIterator<Item = &'v mut f64>,
) {
    if k == 0 {
        return;
    }
    let (fa, fb) = (pow2(2 * k), pow2(k));
    for v in a {
        *v *= fa;
    }
    for v in b {
        *v *= fb;
    }
}

/// Everything a backend needs for one run, validated.
pub struct PacoJob<'a> {
    /// The working cube: the caller's, or its copy times `2^cube_exp` (see the module docs).
    pub(crate) cube: CowArray<'a, f64, Ix3>,
    /// The working cube is the caller's times `2^cube_exp` (0: the caller's cube itself).
    pub(crate) cube_exp: i32,
    /// A back end computing in float multiplies the working cube by `2^float_exp` as it
    /// converts it (bringing its largest |value| into `[0.5, 1)`; 0 when `cube_exp` did).
    float_exp: i32,
    pub(crate) angles: Vec<f64>,
    pub(crate) params: PacoParams,
    pub(crate) geom: Geometry,
    pub(crate) psf_n: NormalizedPsf,
    pub(crate) disk: Vec<(isize, isize)>,
}

/// A frame's number of non-finite values and its largest finite |value| (0 when none): a
/// contiguous all-finite frame (every frame of a valid cube) in one vectorised pass
/// ([`max_abs_finite`](crate::detect::blob_log::max_abs_finite)), else counted value by value
/// (a maximum and a count are exact in any order).
fn frame_finite(f: ndarray::ArrayView2<'_, f64>) -> (usize, f64) {
    if let Some(m) = f
        .as_slice()
        .and_then(crate::detect::blob_log::max_abs_finite)
    {
        return (0, m);
    }
    f.iter().fold((0, 0.0f64), |(bad, m), &v| {
        if v.is_finite() {
            (bad, m.max(v.abs()))
        } else {
            (bad + 1, m)
        }
    })
}

/// Every pixel of every frame enters the statistics of its neighbours, so one NaN makes all
/// maps NaN and one infinite pixel silently hides what is around it: non-finite pixels are an
/// error that says where they are.
///
/// Returns the largest |value| of the (then all finite) cube.
fn check_finite(cube: ArrayView3<'_, f64>) -> Result<f64> {
    let t = cube.dim().0;
    // each frame's (non-finite count, largest finite |value|) in parallel (a 100×1024² cube
    // took 0.18 s on one core), then folded in frame order: the same result as one pass
    let per_frame: Vec<(usize, f64)> = (0..t)
        .into_par_iter()
        .map(|i| frame_finite(cube.index_axis(ndarray::Axis(0), i)))
        .collect();
    let mut first: Option<(usize, usize)> = None;
    let (mut frames, mut pixels) = (0usize, 0usize);
    let mut all_bad = true;
    let mut max_abs = 0.0f64;
    let len = cube.dim().1 * cube.dim().2;
    for (i, &(bad, m)) in per_frame.iter().enumerate() {
        max_abs = max_abs.max(m);
        if bad > 0 {
            frames += 1;
            pixels += bad;
            first.get_or_insert((i, bad));
        }
        all_bad &= bad == len;
    }
    if all_bad {
        return Err(BridgeError::InvalidInput(
            "the cube has no finite value".into(),
        ));
    }
    match first {
        None => Ok(max_abs),
        Some((i, n)) => Err(BridgeError::InvalidInput(
            format!(
                "the cube has {pixels} non-finite pixel(s) (NaN or ±Inf) in {frames} frame(s), the \
             first in frame {i} ({n} pixels); PACO uses every pixel of every frame in the \
             statistics of its neighbours, so remove those frames (with their angles) or \
             replace the pixels (e.g. by the frame median) first"
            )
            .into(),
        )),
    }
}

/// At least 2 frames, and one finite angle per frame.
fn check_frames(t: usize, angles: ArrayView1<'_, f64>) -> Result<()> {
    if t < 2 {
        return Err(BridgeError::InvalidInput(
            format!("the cube needs at least 2 frames, found {t}").into(),
        ));
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
    Ok(())
}

/// The patch disk of radius `psf_rad`, checked: a radius of at least 1, `h × w` frames large
/// enough for one pixel with statistics under the edge rule, the `patch_area` asked for (if
/// any), and the memory of one covariance per thread.
fn patch_disk(params: &PacoParams, h: usize, w: usize) -> Result<Vec<(isize, isize)>> {
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
        ).into()));
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
    Ok(disk)
}

/// The PSF's `ph × pw`: within the `h × w` frames, odd sides, and at least the patch of
/// radius `r`.
fn check_psf_shape((ph, pw): (usize, usize), (h, w): (usize, usize), r: usize) -> Result<()> {
    if ph > h || pw > w {
        return Err(BridgeError::InvalidInput(
            format!("the PSF ({ph}×{pw}) is larger than the frames ({h}×{w})").into(),
        ));
    }
    if ph % 2 == 0 || pw % 2 == 0 {
        return Err(BridgeError::InvalidInput(
            format!(
                "the PSF is {ph}×{pw}: PACO needs odd sides with the star on the centre pixel \
             (an even side has no centre pixel and would shift every template by half a \
             pixel); crop one row and/or column so the peak is in the middle"
            )
            .into(),
        ));
    }
    if ph < 2 * r + 1 || pw < 2 * r + 1 {
        return Err(BridgeError::InvalidInput(
            format!(
                "the PSF ({ph}×{pw}) is smaller than the patch ({0}×{0})",
                2 * r + 1
            )
            .into(),
        ));
    }
    Ok(())
}

/// The star centre of `h × w` frames as [`Geometry`] takes it, `(sub, add)`: the centre
/// subtracted from a position and the one added back. An explicit centre must be finite and
/// on the frame.
fn star_centre(center: Center, h: usize, w: usize) -> Result<((f64, f64), (f64, f64))> {
    Ok(match center {
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
    })
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
        check_frames(t, angles)?;
        let r = params.psf_rad;
        let disk = patch_disk(params, h, w)?;
        check_psf_shape(psf.dim(), (h, w), r)?;
        let max_abs = check_finite(cube)?;
        let cube_exp = cube_exponent(max_abs)?;
        // float's range (±2^±126..128) is too narrow for fourth powers of anything but
        // values near 1: a float back end always normalises (converting costs a copy anyway)
        let float_exp = if cube_exp != 0 || max_abs == 0.0 {
            0
        } else {
            -binary_exponent(max_abs)
        };
        if params.batch_size == 0 {
            return Err(BridgeError::invalid_argument(
                "batch_size",
                "must be at least 1",
            ));
        }
        let psf_n = normalize_psf(psf, params.psf_norm, params.psf_scale)?;
        let (sub, add) = star_centre(params.center, h, w)?;
        let geom = Geometry {
            height: h,
            width: w,
            sub,
            add,
            rounding: params.rounding,
            radius: r,
            edge: params.edge,
        };
        let cube = match cube_exp {
            0 => CowArray::from(cube),
            k => CowArray::from(scaled_cube(cube, k)?),
        };
        Ok(PacoJob {
            cube,
            cube_exp,
            float_exp,
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

    /// The working cube `[t][y][x]`: the caller's cube times [`PacoJob::cube_scale`] (the
    /// caller's own cube, not a copy, when that is 1). Back ends compute on it and return a
    /// and b in the caller's units ([`PacoJob::ab_in_cube_units`]).
    pub fn cube(&self) -> ArrayView3<'_, f64> {
        self.cube.view()
    }

    /// The power of two the caller's cube was multiplied by to make the working cube: 1 when
    /// its largest |value| is within `[2^-60, 2^60)`, else the one that brings it into
    /// `[0.5, 1)` (see the module docs).
    pub fn cube_scale(&self) -> f64 {
        pow2(self.cube_exp)
    }

    /// Convert a and b computed on the working cube ([`PacoJob::cube`]) into the caller's
    /// units, in place: with the cube scaled by `s` ([`PacoJob::cube_scale`]), a = hᵀC⁻¹h
    /// scales as `1/s²` and b = hᵀC⁻¹(r − m) as `1/s`, so a is multiplied by `s²` and b by `s`
    /// (exact: powers of two). S/N = b/√a is unchanged, flux = b/a and its deviation 1/√a come
    /// out times `1/s`. Nothing is done when `s` is 1.
    pub fn ab_in_cube_units<'v>(
        &self,
        a: impl IntoIterator<Item = &'v mut f64>,
        b: impl IntoIterator<Item = &'v mut f64>,
    ) {
        scale_ab(self.cube_exp, a, b);
    }

    /// The power of two a device back end multiplies the working cube by as it converts it to
    /// its arithmetic: 1 in double, and in float the one that brings the largest |value| into
    /// `[0.5, 1)` (float's range leaves little room for the fourth powers of the shrinkage).
    #[cfg(any(feature = "opencl", feature = "cuda"))]
    pub(crate) fn device_scale(&self, double: bool) -> f64 {
        pow2(self.device_exp(double))
    }

    fn device_exp(&self, double: bool) -> i32 {
        if double { 0 } else { self.float_exp }
    }

    /// [`PacoJob::ab_in_cube_units`] for a and b computed on the cube as a device converted
    /// it (`PacoJob::device_scale`).
    pub(crate) fn ab_from_device<'v>(
        &self,
        double: bool,
        a: impl IntoIterator<Item = &'v mut f64>,
        b: impl IntoIterator<Item = &'v mut f64>,
    ) {
        scale_ab(self.cube_exp + self.device_exp(double), a, b);
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

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array3, s};

    /// The one-pass reference: non-finite count, frames with one, the first, the largest
    /// finite |value|.
    fn naive(c: ArrayView3<'_, f64>) -> (usize, usize, Option<(usize, usize)>, f64) {
        let (mut pixels, mut frames, mut first, mut m) = (0, 0, None, 0.0f64);
        for (i, f) in c.outer_iter().enumerate() {
            let bad = f.iter().filter(|v| !v.is_finite()).count();
            if bad > 0 {
                frames += 1;
                pixels += bad;
                first.get_or_insert((i, bad));
            }
            for v in f.iter().filter(|v| v.is_finite()) {
                m = m.max(v.abs());
            }
        }
        (pixels, frames, first, m)
    }

    /// The parallel, vectorised scan gives the one-pass answer: the largest |value| (negative,
    /// subnormal, in a remainder lane, in a strided view) and, with NaN and ±Inf in several
    /// frames, the counts and the first frame in its message.
    #[test]
    fn check_finite_is_the_one_pass_scan() {
        let mut c = Array3::from_shape_fn((7, 13, 11), |(t, y, x)| {
            ((t * 131 + y * 17 + x * 7) % 97) as f64 * 0.37 - 12.0
        });
        assert_eq!(check_finite(c.view()).unwrap(), naive(c.view()).3);
        // the largest |value| negative, in the last (remainder) element of a frame
        c[[3, 12, 10]] = -1e6;
        assert_eq!(check_finite(c.view()).unwrap(), 1e6);
        // a strided view (no contiguous frames)
        let v = c.slice(s![..;2, ..;3, 1..;2]);
        assert_eq!(check_finite(v).unwrap(), naive(v).3);
        // subnormal values only
        let tiny = Array3::from_elem((2, 3, 9), -f64::MIN_POSITIVE / 4.0);
        assert_eq!(check_finite(tiny.view()).unwrap(), f64::MIN_POSITIVE / 4.0);
        // NaN and ±Inf in frames 2 and 5
        c[[2, 0, 0]] = f64::NAN;
        c[[2, 5, 3]] = f64::INFINITY;
        c[[2, 12, 10]] = f64::NEG_INFINITY;
        c[[5, 7, 7]] = f64::NAN;
        let (pixels, frames, first, _) = naive(c.view());
        assert_eq!((pixels, frames, first), (4, 2, Some((2, 3))));
        let Err(BridgeError::InvalidInput(m)) = check_finite(c.view()) else {
            panic!("non-finite pixels accepted");
        };
        assert!(
            m.contains("4 non-finite pixel(s)")
                && m.contains("in 2 frame(s)")
                && m.contains("first in frame 2 (3 pixels)"),
            "{m}"
        );
        let nan = Array3::from_elem((3, 4, 4), f64::NAN);
        let Err(BridgeError::InvalidInput(m)) = check_finite(nan.view()) else {
            panic!("an all-NaN cube accepted");
        };
        assert!(m.contains("no finite value"), "{m}");
    }
}
