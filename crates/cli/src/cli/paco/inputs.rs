//! Reading the inputs of `arraybridge paco`: the ADI cube, the derotation angles and the PSF
//! (FITS), squeezed to their expected shapes and checked against each other.

use super::super::common::Stages;
use std::path::Path;

use arraybridge::io::fits;
use bridge_core::{BridgeError, Result};
use ndarray::{Array1, Array2, Array3, ArrayD, Ix2, Ix3};

/// The inputs of one run, consistent with each other.
pub(super) struct Inputs {
    /// The cube `(T, H, W)`.
    pub(super) cube: Array3<f64>,
    /// One derotation angle per frame (degrees).
    pub(super) angles: Array1<f64>,
    /// The PSF (the per-pixel median when the file holds a cube of PSFs), no larger than a frame.
    pub(super) psf: Array2<f64>,
}

/// Drop the axes of length 1.
fn squeeze(a: ArrayD<f64>) -> ArrayD<f64> {
    let shape: Vec<usize> = a.shape().iter().copied().filter(|&n| n != 1).collect();
    if shape.len() == a.ndim() {
        return a;
    }
    let v: Vec<f64> = a.iter().copied().collect();
    ArrayD::from_shape_vec(shape, v).unwrap_or(a)
}

/// Drop axes of length 1, first to last, while `a` has more than `min_ndim` axes.
fn squeeze_to(a: ArrayD<f64>, min_ndim: usize) -> ArrayD<f64> {
    let mut shape: Vec<usize> = a.shape().to_vec();
    while shape.len() > min_ndim {
        match shape.iter().position(|&n| n == 1) {
            Some(i) => {
                shape.remove(i);
            }
            None => break,
        }
    }
    if shape.len() == a.ndim() {
        return a;
    }
    let v: Vec<f64> = a.iter().copied().collect();
    ArrayD::from_shape_vec(shape, v).unwrap_or(a)
}

/// Read one FITS image; a malformed file's message names `what`.
fn load(path: &Path, what: &str) -> Result<ArrayD<f64>> {
    fits::read_image(path).map_err(|e| match e {
        BridgeError::InvalidInput(m) => BridgeError::InvalidInput(format!("{what}: {m}").into()),
        other => other,
    })
}

/// Read `--cube`, `--angles` and `--psf`, reporting progress through `stages`. Errors: a cube that
/// is not 3-D (`--cube`), angles that are not `(T,)` or `(T, 1)` or not one per frame
/// (`--angles`), a PSF that is not 2-D or a cube of PSFs (`--psf`), a PSF larger than the frames.
pub(super) fn read(
    cube_path: &Path,
    angles_path: &Path,
    psf_path: &Path,
    stages: &Stages,
) -> Result<Inputs> {
    stages.say(format!("paco: reading {}", cube_path.display()));
    let cube = load(cube_path, "cube")?;
    let cube: Array3<f64> = if cube.ndim() == 3 {
        cube.into_dimensionality::<Ix3>()
            .map_err(|e| BridgeError::InvalidInput(e.to_string().into()))?
    } else {
        return Err(BridgeError::shape_mismatch(
            "a 3-D cube (T, H, W)",
            format!("{:?}", cube.shape()),
            "--cube",
        ));
    };
    let angles = squeeze(load(angles_path, "angles")?);
    if angles.ndim() > 1 {
        return Err(BridgeError::shape_mismatch(
            "angles of shape (T,) or (T, 1)",
            format!("{:?}", angles.shape()),
            "--angles",
        ));
    }
    let angles: Array1<f64> = angles.iter().copied().collect();
    // only the extra axes of length 1 (a (1, H, W) cube of one PSF): a 1×1 PSF stays 2-D
    let psf = squeeze_to(load(psf_path, "psf")?, 2);
    let psf: Array2<f64> = match psf.ndim() {
        2 => psf
            .into_dimensionality::<Ix2>()
            .map_err(|e| BridgeError::InvalidInput(format!("psf: {e}").into()))?,
        // A cube of PSFs: their per-pixel median, as VIP does.
        3 => {
            let (n, ph, pw) = (psf.shape()[0], psf.shape()[1], psf.shape()[2]);
            stages.say(format!(
                "paco: the PSF file holds {n} PSFs; using their per-pixel median"
            ));
            Array2::from_shape_fn((ph, pw), |(y, x)| {
                let mut v: Vec<f64> = (0..n)
                    .map(|i| psf[[i, y, x]])
                    .filter(|v| !v.is_nan())
                    .collect();
                v.sort_by(f64::total_cmp);
                match v.len() {
                    0 => f64::NAN,
                    m if m % 2 == 1 => v[m / 2],
                    m => 0.5 * (v[m / 2 - 1] + v[m / 2]),
                }
            })
        }
        d => {
            return Err(BridgeError::shape_mismatch(
                "a 2-D PSF image (or a cube of PSFs)",
                format!("{d}-D"),
                "--psf",
            ));
        }
    };
    let (t, h, w) = cube.dim();
    if angles.len() != t {
        return Err(BridgeError::shape_mismatch(
            format!("{t} angles (one per frame of the cube)"),
            format!("{} angles", angles.len()),
            "--angles",
        ));
    }
    let (ph, pw) = psf.dim();
    if ph > h || pw > w {
        return Err(BridgeError::InvalidInput(
            format!("the PSF ({ph}×{pw}) is larger than the frames ({h}×{w})").into(),
        ));
    }
    Ok(Inputs { cube, angles, psf })
}
