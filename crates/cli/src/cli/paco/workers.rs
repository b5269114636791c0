//! `arraybridge paco` under mpirun (feature `mpi`): rank 0 sends the inputs to the other ranks,
//! which compute the units it hands out.

use bridge_core::{BridgeError, Device, Result};

use super::{Args, params_for};

/// A worker rank under mpirun: receive the inputs from rank 0 and compute the units it hands
/// out on `device`; writes nothing.
pub(super) fn serve(args: &Args, device: Device) -> Result<()> {
    let (cube, angles, psf) = share_inputs(None)?;
    let params = params_for(args)?;
    algorithms::paco::serve_units(
        cube.view(),
        angles.view(),
        psf.view(),
        &params,
        device,
        &arraybridge::open_device,
        &mut crate::cli::mpi::RootLink,
    )
}

/// Rank 0's inputs (`Some`, which it sends) or another rank's (`None`, which receives them): the
/// shapes, then the numbers.
pub(super) fn share_inputs(
    ours: Option<(
        &ndarray::Array3<f64>,
        &ndarray::Array1<f64>,
        &ndarray::Array2<f64>,
    )>,
) -> Result<(
    ndarray::Array3<f64>,
    ndarray::Array1<f64>,
    ndarray::Array2<f64>,
)> {
    use crate::cli::mpi::{broadcast, try_zeros};
    let mut dims = [0u64; 6];
    if let Some((c, a, p)) = ours {
        let (t, h, w) = c.dim();
        let (ph, pw) = p.dim();
        dims = [t, h, w, a.len(), ph, pw].map(|n| n as u64);
    }
    broadcast(&mut dims);
    let d = dims.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let count = |a: usize, b: usize| {
        a.checked_mul(b)
            .ok_or_else(|| BridgeError::InvalidInput("inputs too large".into()))
    };
    let mut cube: Vec<f64> = match ours {
        Some((c, _, _)) => c.iter().copied().collect(),
        None => try_zeros(count(count(d[0], d[1])?, d[2])?, "--cube")?,
    };
    let mut angles: Vec<f64> = match ours {
        Some((_, a, _)) => a.to_vec(),
        None => try_zeros(d[3], "--angles")?,
    };
    let mut psf: Vec<f64> = match ours {
        Some((_, _, p)) => p.iter().copied().collect(),
        None => try_zeros(count(d[4], d[5])?, "--psf")?,
    };
    broadcast(&mut cube);
    broadcast(&mut angles);
    broadcast(&mut psf);
    let shape = |e: ndarray::ShapeError| BridgeError::InvalidInput(format!("inputs: {e}").into());
    Ok((
        ndarray::Array3::from_shape_vec((d[0], d[1], d[2]), cube).map_err(shape)?,
        ndarray::Array1::from_vec(angles),
        ndarray::Array2::from_shape_vec((d[4], d[5]), psf).map_err(shape)?,
    ))
}
