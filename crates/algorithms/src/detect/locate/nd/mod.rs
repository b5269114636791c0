//! `trackpy.locate` (0.7) on a 2-D image or a 3-D volume with sizes per axis: the n-D path of
//! [`locate`](super::locate), for volumes and anisotropic diameters (the 2-D path with one
//! diameter is [`locate`](super::locate), unchanged).
//!
//! The chain is trackpy's: optional inversion → bandpass axis by axis (`prep.rs`) → rescaling to
//! the integer gamut → grey-dilation maxima (box of `int(2·separation/√ndim)` per axis) above a
//! percentile of the non-zero pixels, outside the margin → iterated centre of mass on the
//! elliptical mask and characterisation as trackpy's Python engine computes them (`refine.rs`)
//! → duplicates within `separation` (per axis) removed → `mass > minmass`, `size < maxsize`,
//! `topn` → static error from the background noise (`noise.rs`).
//!
//! The columns are trackpy's: `z, y, x` (or `y, x`), `mass`, then with `characterize` `size`
//! (isotropic) or `size_z, size_y, size_x` (anisotropic), `ecc` (NaN in 3-D), `signal`,
//! `raw_mass`, and `ep` (isotropic diameter and `noise_size`) or `ep_z, ep_y, ep_x`.
//!
//! One divergence, on purpose: where rows are filtered out (`minmass`, `maxsize`, `topn`) and
//! the static error has one column per axis, trackpy 0.7 aligns its `ep_*` columns to the
//! filtered table by index (a pandas `concat`), which misplaces them; here every row keeps its
//! own `ep_*`.

#[cfg(any(feature = "opencl", feature = "cuda"))]
mod device;
mod noise;
mod params;
mod prep;
mod refine;

use bridge_core::{BridgeError, Device, Result};

use crate::detect::blob_log::VolumeView;
use crate::detect::blob_log::nd::pairs_within_nd;
use crate::detect::locate::maxima::percentile_nonzero;
use crate::detect::locate::{Empty, drop_dimmer};
use crate::exec::DeviceHandle;
pub use params::LocateNdParams;
use refine::{Images, Mask, Refined, refine_one};

/// The raw pixels' type, as trackpy's dtype rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// uint8 (gamut 255).
    U8,
    /// uint16 (gamut 65535).
    U16,
    /// float32 (rescaled to 255).
    F32,
    /// float64 (rescaled to 255).
    F64,
}

impl Kind {
    /// The integer gamut the bandpassed image is rescaled to.
    pub(super) fn int_max(self) -> f64 {
        match self {
            Kind::U16 => 65535.0,
            _ => 255.0,
        }
    }
}

/// The features of [`locate_nd`]: one row per feature, in the order of `columns`.
#[derive(Debug, Clone, PartialEq)]
pub struct FeaturesNd {
    /// Column names (trackpy's).
    pub columns: Vec<String>,
    /// One row per feature.
    pub rows: Vec<Vec<f64>>,
}

impl FeaturesNd {
    /// The index of column `name`.
    pub fn col(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
}

/// trackpy's column names for `ndim` axes.
fn columns(ndim: usize, p: &LocateNdParams, isotropic: bool, ep_isotropic: bool) -> Vec<String> {
    let pos: Vec<String> = ["z", "y", "x"][3 - ndim..]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut c = pos.clone();
    c.push("mass".into());
    if p.characterize {
        if isotropic {
            c.push("size".into());
        } else {
            c.extend(pos.iter().map(|a| format!("size_{a}")));
        }
        c.extend(["ecc", "signal", "raw_mass"].map(String::from));
        if ep_isotropic {
            c.push("ep".into());
        } else {
            c.extend(pos.iter().map(|a| format!("ep_{a}")));
        }
    }
    c
}

/// The raw pixels as f64 and their type; an error for an empty image or non-finite pixels.
fn raw_pixels(image: &VolumeView<'_>) -> Result<(Vec<f64>, Kind)> {
    let (raw, kind): (Vec<f64>, Kind) = match image {
        VolumeView::U8(a) => (a.iter().map(|&v| f64::from(v)).collect(), Kind::U8),
        VolumeView::U16(a) => (a.iter().map(|&v| f64::from(v)).collect(), Kind::U16),
        VolumeView::F32(a) => (a.iter().map(|&v| f64::from(v)).collect(), Kind::F32),
        VolumeView::F64(a) => (a.iter().copied().collect(), Kind::F64),
    };
    if raw.is_empty() {
        return Err(BridgeError::InvalidInput(
            format!("empty image of shape {:?}", image.shape()).into(),
        ));
    }
    let bad = raw.iter().filter(|v| !v.is_finite()).count();
    if bad > 0 {
        return Err(BridgeError::InvalidInput(
            format!(
                "image contains {bad} NaN or infinite pixel(s); replace them (e.g. by the median) \
                 before locate"
            )
            .into(),
        ));
    }
    Ok((raw, kind))
}

/// `trackpy.locate(image, diameter, …)` on a 2-D image or a 3-D volume (axes `z, y, x`), with
/// sizes per axis; see the module docs. Rows follow the raster order of the maxima (ascending
/// mass with `topn`).
pub fn locate_nd(image: VolumeView<'_>, p: &LocateNdParams) -> Result<FeaturesNd> {
    locate_nd_on_device(&DeviceHandle::cpu(), image, p)
}

/// [`locate_nd`] with its preprocessing (the bandpass and the rescale to the integer gamut,
/// the part that reads every voxel many times) on `device`: the CPU, or an open
/// `opencl:N`/`cuda:N` with float64, whose passes sum in the CPU's order and round where it
/// rounds (`nd/device.rs`), so the features are the CPU's bit for bit; the maxima, the
/// refinement and the characterisation run on the host. A device without float64 is refused
/// ([`BridgeError::Unsupported`]), as are torch devices.
pub fn locate_nd_on_device(
    device: &DeviceHandle,
    image: VolumeView<'_>,
    p: &LocateNdParams,
) -> Result<FeaturesNd> {
    let shape = image.shape().to_vec();
    let ndim = shape.len();
    if !(2..=3).contains(&ndim) {
        return Err(BridgeError::InvalidInput(
            format!(
                "locate takes a 2-D image or a 3-D volume, got {ndim} dimensions {shape:?} (a \
                 movie goes through batch)"
            )
            .into(),
        ));
    }
    let res = p.resolve(ndim)?;
    check_device(device)?;
    check_memory_nd(&shape)?;
    let (mut raw, kind) = raw_pixels(&image)?;
    let ep_iso = res.isotropic && res.noise.windows(2).all(|w| w[0] == w[1]);
    let mut out = FeaturesNd {
        columns: columns(ndim, p, res.isotropic, ep_iso),
        rows: Vec::new(),
    };
    let margin = res.margin();
    if shape.iter().zip(&margin).any(|(&n, &m)| n <= 2 * m) {
        return Ok(out);
    }
    if p.invert {
        prep::invert(&mut raw, kind);
    }
    let (img, scale) = prepare_on(device, &raw, &shape, kind, p, &res)?;
    let Some(thr) = percentile_nonzero(&img, p.percentile) else {
        return Ok(out);
    };
    let maxima = prep::local_maxima(&img, &shape, &res.box_size(), &margin, thr);
    let mask = Mask::new(&res.radius);
    let strides: Vec<usize> = (0..ndim).map(|a| shape[a + 1..].iter().product()).collect();
    let im = Images {
        img: &img,
        raw: &raw,
        shape: &shape,
        strides,
        kind,
    };
    let refined: Vec<Refined> = maxima
        .iter()
        .map(|c| {
            refine_one(
                &im,
                &mask,
                c,
                p.max_iterations,
                p.characterize,
                res.isotropic,
            )
        })
        .collect();
    let mut feats = remove_duplicates(refined, &res.separation);
    for f in &mut feats {
        f.mass /= scale;
        f.signal /= scale;
    }
    feats.retain(|f| f.mass > p.minmass);
    if let Some(m) = p.maxsize {
        feats.retain(|f| f.size.first().is_some_and(|s| *s < m));
    }
    if let Some(n) = p.topn {
        feats = crate::detect::locate::top_n_by(feats, n, |f| f.mass);
    }
    let noise = (p.characterize && !feats.is_empty())
        .then(|| noise::measure_noise(&img, &raw, &shape, &mask, kind));
    let moments = mask.root_sum_x2();
    let npx = mask.points.len() as f64;
    for f in feats {
        let mut row = f.pos.clone();
        row.push(f.mass);
        if let Some((black, sigma)) = noise {
            row.extend(&f.size);
            row.extend([f.ecc, f.signal, f.raw_mass]);
            let n_s = sigma / (f.raw_mass - npx * black);
            if ep_iso {
                row.push(n_s * res.noise[0] * moments[0]);
            } else {
                row.extend(res.noise.iter().zip(&moments).map(|(ns, m)| n_s * (ns * m)));
            }
        }
        out.rows.push(row);
    }
    Ok(out)
}

/// Host bytes [`locate_nd_on_device`] holds per voxel at its peak: the image in float64, the
/// bandpass's three float64 images, the rescaled image and the dilation's two `u32` images.
pub const LOCATE_ND_BYTES_PER_VOXEL: u64 = 48;

/// [`locate_nd_on_device`]'s host memory for an image of `shape`, checked against the host
/// budget before anything is allocated: a [`BridgeError::TooLarge`] when it does not fit (an
/// image of 10⁹ voxels needs 48 GB).
pub fn check_memory_nd(shape: &[usize]) -> Result<()> {
    let mut dims: Vec<u64> = shape.iter().map(|&n| n as u64).collect();
    dims.push(LOCATE_ND_BYTES_PER_VOXEL);
    let bytes = bridge_core::host::checked_product(&dims).unwrap_or(u64::MAX);
    bridge_core::host::check_allocation(
        bytes,
        &format!("locate on an image of shape {shape:?} (about six float64 copies of it)"),
        "locate a smaller region of it (crop the image), or raise the host memory limit",
    )
}

/// A device `locate_nd_on_device` can run on: the CPU, or an OpenCL or CUDA device with
/// float64 (checked before any early return, so that a device that cannot run it is refused
/// whatever the image).
fn check_device(device: &DeviceHandle) -> Result<()> {
    if device.device() == Device::Cpu {
        return Ok(());
    }
    let e = device.executor_for("locate on a volume")?;
    if !e.has_fp64() {
        return Err(BridgeError::Unsupported(format!(
            "locate on a volume needs float64 on the device ({} has none): its bandpass sums in \
             float64 as trackpy does; run it on the CPU",
            e.device()
        )));
    }
    Ok(())
}

/// [`prep::prepare`] on `device` (without preprocessing there is nothing to offload: the
/// CPU's).
fn prepare_on(
    device: &DeviceHandle,
    raw: &[f64],
    shape: &[usize],
    kind: Kind,
    p: &LocateNdParams,
    res: &params::Resolved,
) -> Result<(Vec<u32>, f64)> {
    if device.device() == Device::Cpu || !p.preprocess {
        return Ok(prep::prepare(raw, shape, kind, p, res));
    }
    // exhaustive over the compiled-in executors (no arm without a device backend)
    match device.executor_for("locate on a volume")? {
        #[cfg(feature = "opencl")]
        crate::exec::AnyExecutor::OpenCl(e) => device::prepare_on(&e, raw, shape, kind, p, res),
        #[cfg(feature = "cuda")]
        crate::exec::AnyExecutor::Cuda(e) => device::prepare_on(&e, raw, shape, kind, p, res),
    }
}

/// Why [`locate_nd`] finds no feature in `image` (`None`: it finds some), as the 2-D
/// [`crate::detect::locate::why_empty`] says it for a frame: the preprocessed image is black,
/// it has no local maximum above the percentile threshold, they are all in the margin (or the
/// image is no larger than its margins), or none passes the mass and size filters. For the
/// images [`locate_nd`] returned empty: it repeats the preprocessing, and the whole
/// [`locate_nd`] when maxima remain outside the margin.
pub fn why_empty_nd(image: VolumeView<'_>, p: &LocateNdParams) -> Result<Option<Empty>> {
    let shape = image.shape().to_vec();
    let res = p.resolve(shape.len())?;
    let (mut raw, kind) = raw_pixels(&image)?;
    if p.invert {
        prep::invert(&mut raw, kind);
    }
    let (img, _) = prep::prepare(&raw, &shape, kind, p, &res);
    let Some(thr) = percentile_nonzero(&img, p.percentile) else {
        return Ok(Some(Empty::Black));
    };
    let zero = vec![0usize; shape.len()];
    let maxima = prep::local_maxima(&img, &shape, &res.box_size(), &zero, thr);
    if maxima.is_empty() {
        return Ok(Some(Empty::NoMaxima));
    }
    let margin = res.margin();
    let inside = |c: &Vec<usize>| {
        c.iter()
            .zip(&shape)
            .zip(&margin)
            .all(|((&i, &n), &m)| i >= m && i + m < n)
    };
    if shape.iter().zip(&margin).any(|(&n, &m)| n <= 2 * m) || !maxima.iter().any(inside) {
        return Ok(Some(Empty::InMargins));
    }
    Ok(locate_nd(image, p)?
        .rows
        .is_empty()
        .then_some(Empty::Filtered))
}

/// trackpy's `where_close` and drop: every pair closer than `sep` per axis (‖Δ/sep‖ ≤ 1 − 1e-7)
/// loses its dimmer member (ties broken as [`drop_dimmer`] breaks them),
/// all pairs decided at once; skipped unless every separation is positive.
fn remove_duplicates(feats: Vec<Refined>, sep: &[f64]) -> Vec<Refined> {
    if feats.len() < 2 || !sep.iter().all(|&s| s > 0.0) {
        return feats;
    }
    let nd = sep.len();
    let pos: Vec<f64> = feats
        .iter()
        .flat_map(|f| f.pos.iter().zip(sep).map(|(p, s)| p / s))
        .collect();
    let sum = |i: usize| pos[i * nd..(i + 1) * nd].iter().sum::<f64>();
    let pairs = pairs_within_nd(&pos, nd, 1.0 - 1e-7);
    drop_dimmer(feats, pairs, |f| f.mass, sum)
}
