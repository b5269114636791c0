//! `arraybridge bench detect --volume Z`: scikit-image's n-D `blob_log` on synthetic volumes
//! (`--frames` volumes of `Z × --size × --size` u16 voxels, `--particles` Gaussian blobs each,
//! seeded), on the CPU, volumes per second. With `--movie-cache DIR` the volumes are also
//! written as one 4-D `.npy` `(T, Z, Y, X)` there, so that a peer times the same voxels
//! (`scripts/bench_volume_skimage.py DIR/<file>.npy` runs scikit-image's `blob_log` with the
//! same parameters and compares the rows).

use crate::cli::common::outln;
use std::time::Instant;

use algorithms::detect::blob_log::{
    BlobLogNdParams, Border, Prescale, Sigma, VolumeView, blob_log_nd_on_device,
};
use bridge_core::host::{check_allocation, checked_product};
use bridge_core::{BridgeError, Device, Result};
use ndarray::Array3;

use super::common::Global;
use super::device::DeviceArg;

/// The parameters of the volume bench: σ 1…5 in 9 scales, a relative threshold of 0.1 (what
/// the peer script passes to scikit-image too).
pub fn params() -> BlobLogNdParams {
    BlobLogNdParams {
        min_sigma: Sigma::Scalar(1.0),
        max_sigma: Sigma::Scalar(5.0),
        num_sigma: 9,
        threshold: None,
        threshold_rel: Some(0.1),
        overlap: 0.5,
        log_scale: false,
        exclude_border: Border::None,
    }
}

/// Volume `t` of the bench: noise around 100 counts and `particles` blobs of 2000 counts, σ
/// 1.5…3, placed from `seed` and `t` (xorshift; the same on every machine).
pub fn synthetic_volume(z: usize, n: usize, particles: usize, seed: u64, t: usize) -> Array3<u16> {
    // splitmix64 of (seed, t): a distinct, non-zero xorshift state per volume
    let mut s = {
        let mut x = seed ^ (t as u64).wrapping_mul(0xd1b5_4a32_d192_ed03);
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (x ^ (x >> 31)) | 1
    };
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let blobs: Vec<[f64; 4]> = (0..particles)
        .map(|_| {
            [
                1.0 + next() * (z as f64 - 2.0).max(0.0),
                3.0 + next() * (n as f64 - 6.0),
                3.0 + next() * (n as f64 - 6.0),
                1.5 + 1.5 * next(),
            ]
        })
        .collect();
    let mut v = Array3::<f64>::from_shape_fn((z, n, n), |_| 90.0 + 20.0 * next());
    for [bz, by, bx, s] in blobs {
        let r = (3.0 * s).ceil() as isize;
        let (cz, cy, cx) = (
            bz.round() as isize,
            by.round() as isize,
            bx.round() as isize,
        );
        for k in (cz - r).max(0)..(cz + r + 1).min(z as isize) {
            for i in (cy - r).max(0)..(cy + r + 1).min(n as isize) {
                for j in (cx - r).max(0)..(cx + r + 1).min(n as isize) {
                    let d2 =
                        (k as f64 - bz).powi(2) + (i as f64 - by).powi(2) + (j as f64 - bx).powi(2);
                    v[[k as usize, i as usize, j as usize]] += 2000.0 * (-d2 / (2.0 * s * s)).exp();
                }
            }
        }
    }
    v.mapv(|x| x.clamp(0.0, 65535.0) as u16)
}

/// What `bench detect --volume` was asked for (from its flags).
pub struct VolumeBench {
    /// Volumes (`--frames`).
    pub frames: u64,
    /// Side of a plane (`--size`).
    pub size: u64,
    /// Blobs per volume (`--particles`).
    pub particles: u64,
    /// Seed of the synthetic volumes.
    pub seed: u64,
    /// `--device`.
    pub device: DeviceArg,
    /// `--method`.
    pub method: super::detect::Method,
    /// Where the volumes are written for the peer script.
    pub movie_cache: Option<std::path::PathBuf>,
    /// Write them and stop.
    pub prepare_only: bool,
}

/// Run the volume bench (`z` planes a volume).
pub fn run(a: &VolumeBench, z: u64, g: Global) -> Result<()> {
    let big = |flag: &str| BridgeError::invalid_argument(flag, "too large for this machine");
    let t = usize::try_from(a.frames).map_err(|_| big("--frames"))?;
    let z = usize::try_from(z).map_err(|_| big("--volume"))?;
    let n = usize::try_from(a.size).map_err(|_| big("--size"))?;
    let particles = usize::try_from(a.particles).map_err(|_| big("--particles"))?;
    let device = match a.device {
        DeviceArg::Auto => Device::Cpu,
        DeviceArg::Explicit(d) => d,
        _ => {
            return Err(BridgeError::Unsupported(format!(
                "bench detect --volume runs on one device; --device {} names several",
                a.device
            )));
        }
    };
    if a.method != super::detect::Method::Log {
        return Err(BridgeError::invalid_argument(
            "--method",
            "bench detect --volume times blob_log (--method log); a 3-D locate is timed by \
             `detect --method locate` on a z-stack",
        ));
    }
    // one volume in u16, its f64 copy and the scale space of 9 f64 planes, plus four work
    // volumes
    let vox =
        checked_product(&[z as u64, n as u64, n as u64]).ok_or_else(|| big("--volume x --size"))?;
    check_allocation(
        vox.saturating_mul(2 + 8 + 9 * 8 + 4 * 8),
        "bench detect --volume: one volume and its scale space",
        "use a smaller --size or --volume",
    )?;
    let p = params();
    let vols: Vec<Array3<u16>> = (0..t)
        .map(|i| synthetic_volume(z, n, particles, a.seed, i))
        .collect();
    if let Some(dir) = &a.movie_cache {
        let path = dir.join(format!(
            "volumes_t{t}_z{z}_n{n}_p{particles}_s{}.npy",
            a.seed
        ));
        let mut payload = Vec::with_capacity(t * z * n * n * 2);
        for v in &vols {
            for &x in v.iter() {
                payload.extend_from_slice(&x.to_le_bytes());
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| BridgeError::io(dir.display().to_string(), e))?;
        std::fs::write(
            &path,
            arraybridge::io::npy::encode_npy("<u2", &[t, z, n, n], &payload),
        )
        .map_err(|e| BridgeError::io(path.display().to_string(), e))?;
        g.note(format!(
            "bench detect --volume: volumes written to {}",
            path.display()
        ));
        if a.prepare_only {
            return Ok(());
        }
    }
    let dev = arraybridge::open_device(device)?;
    g.note(format!(
        "bench detect --volume on {device}: {t} volumes of {z}x{n}x{n} u16, {particles} blobs each; \
         blob_log sigma 1..5, num_sigma 9, threshold_rel 0.1"
    ));
    let (mut detections, mut best) = (0usize, f64::INFINITY);
    let start = Instant::now();
    for v in &vols {
        let t0 = Instant::now();
        let b = blob_log_nd_on_device(
            &dev,
            VolumeView::U16(v.view().into_dyn()),
            Prescale::Legacy,
            &p,
        )?;
        best = best.min(t0.elapsed().as_secs_f64());
        detections += b.rows.len();
    }
    let secs = start.elapsed().as_secs_f64();
    let per = secs / t.max(1) as f64;
    if g.json {
        g.print_json(&serde_json::json!({
            "command": "bench detect --volume", "device": device.to_string(),
            "volumes": t, "z": z, "size": n, "particles": particles,
            "seconds": secs, "ms_per_volume": per * 1e3, "best_ms": best * 1e3,
            "volumes_per_s": 1.0 / per.max(1e-12), "detections": detections,
        }))?;
    } else {
        outln!("| volumes | z×y×x | detections | ms/volume (mean) | ms (best) | volumes/s |")?;
        outln!("|---|---|---|---|---|---|")?;
        outln!(
            "| {t} | {z}×{n}×{n} | {detections} | {:.1} | {:.1} | {:.2} |",
            per * 1e3,
            best * 1e3,
            1.0 / per.max(1e-12)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use algorithms::detect::blob_log::blob_log_nd_prescaled;

    /// The bench's volumes are seeded (the same voxels every run) and hold their blobs.
    #[test]
    fn volumes_are_seeded_and_detected() {
        let a = synthetic_volume(12, 40, 4, 3, 0);
        assert_eq!(a, synthetic_volume(12, 40, 4, 3, 0));
        assert_ne!(a, synthetic_volume(12, 40, 4, 3, 1));
        let b = blob_log_nd_prescaled(
            VolumeView::U16(a.view().into_dyn()),
            Prescale::Legacy,
            &params(),
        )
        .unwrap();
        assert!((1..=8).contains(&b.rows.len()), "{}", b.rows.len());
    }
}
