//! Transfer measurements shared by the criterion bench (`benches/cuda_transfer.rs`) and the
//! CLI (`arraybridge bench transfer`): each path of this crate next to a plain `cuMemcpy` from
//! pinned memory measured in the same run.

use std::sync::Arc;
use std::time::Instant;

use bridge_core::{DType, HostData, Result};

use crate::buffer::storage_of;
use crate::device::Gpu;
use crate::transfer::HostPath;

/// One measured path at one size.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferRow {
    /// `h2d`, `d2h` or `d2d`.
    pub direction: &'static str,
    /// `pageable`, `pinned-staged`, `device`, or `reference` (plain cuMemcpy, pinned).
    pub path: &'static str,
    /// Bytes per copy.
    pub bytes: usize,
    /// Best of the repetitions, GB/s (10⁹ bytes per second).
    pub gb_per_s: f64,
}

fn best<F: FnMut() -> Result<()>>(reps: usize, bytes: usize, mut f: F) -> Result<f64> {
    f()?; // warm-up
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(bytes as f64 / best / 1e9)
}

/// Measure every path for each size in `sizes` (bytes), best of `reps`.
pub fn transfer_report(gpu: &Arc<Gpu>, sizes: &[usize], reps: usize) -> Result<Vec<TransferRow>> {
    let mut rows = Vec::new();
    for &bytes in sizes {
        let host = HostData::from_c_bytes(DType::U8, &[bytes], &vec![7u8; bytes])?;
        let dev = gpu.upload(&host)?;
        let dev2 = gpu.alloc(DType::U8, &[bytes])?;
        let mut pinned = gpu.alloc_pinned(bytes)?;
        let mut row = |direction, path, v: f64| {
            rows.push(TransferRow {
                direction,
                path,
                bytes,
                gb_per_s: v,
            })
        };
        row(
            "h2d",
            "pageable",
            best(reps, bytes, || {
                gpu.upload_with(&host, HostPath::Pageable).map(drop)
            })?,
        );
        row(
            "h2d",
            "pinned-staged",
            best(reps, bytes, || {
                gpu.upload_with(&host, HostPath::PinnedStaged).map(drop)
            })?,
        );
        let d = storage_of(&dev)?;
        row(
            "h2d",
            "reference",
            best(reps, bytes, || gpu.copy_pinned_to_device(d, &pinned))?,
        );
        row(
            "d2h",
            "pageable",
            best(reps, bytes, || {
                gpu.download_with(&dev, HostPath::Pageable).map(drop)
            })?,
        );
        row(
            "d2h",
            "pinned-staged",
            best(reps, bytes, || {
                gpu.download_with(&dev, HostPath::PinnedStaged).map(drop)
            })?,
        );
        let mut reused = vec![0u8; bytes];
        row(
            "d2h",
            "staged-reused",
            best(reps, bytes, || gpu.download_into(&dev, &mut reused))?,
        );
        row(
            "d2h",
            "reference",
            best(reps, bytes, || gpu.copy_device_to_pinned(&mut pinned, d))?,
        );
        let d2 = storage_of(&dev2)?;
        row(
            "d2d",
            "device",
            best(reps, bytes, || gpu.copy(&dev).map(drop))?,
        );
        row(
            "d2d",
            "reference",
            best(reps, bytes, || gpu.copy_device_to_device(d2, d))?,
        );
    }
    Ok(rows)
}

/// Format rows as a Markdown table, with each path's share of the reference.
pub fn format_table(rows: &[TransferRow]) -> String {
    let mut s = String::from(
        "| direction | size | path | GB/s | % of reference |\n|---|---|---|---|---|\n",
    );
    for r in rows {
        let reference = rows
            .iter()
            .find(|x| x.direction == r.direction && x.bytes == r.bytes && x.path == "reference")
            .map(|x| x.gb_per_s)
            .unwrap_or(f64::NAN);
        s += &format!(
            "| {} | {} MiB | {} | {:.2} | {:.0}% |\n",
            r.direction,
            r.bytes >> 20,
            r.path,
            r.gb_per_s,
            100.0 * r.gb_per_s / reference
        );
    }
    s
}
