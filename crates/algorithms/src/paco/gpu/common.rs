//! What the device passes share: byte encodings, index conversion, the precision decision,
//! the OOM policy and the template kinds of the pairs path.

use bridge_core::exec::Executor;
use bridge_core::tuning::Tuning;
use bridge_core::{BridgeError, Device, Result};
use rayon::prelude::*;

use super::super::gpu_kernels;
use super::super::templates::Templates;
use super::GpuPrecision;

/// `paco_stats` work-group size: `ARRAYBRIDGE_PACO_STATS_WG` of `t`, else smaller on CPU
/// devices (PoCL) than on GPUs.
pub(super) fn stats_wg<E: Executor>(e: &E, t: &Tuning) -> usize {
    t.usize_knob("ARRAYBRIDGE_PACO_STATS_WG")
        .unwrap_or(if e.is_cpu() {
            gpu_kernels::STATS_WG_CPU
        } else {
            gpu_kernels::STATS_WG
        })
}

/// Work-group size of the per-pixel kernels (`ARRAYBRIDGE_PACO_LINE_WG` of `t`, default
/// [`gpu_kernels::LINE_WG`]).
pub(super) fn line_wg(t: &Tuning) -> usize {
    t.usize_or("ARRAYBRIDGE_PACO_LINE_WG", gpu_kernels::LINE_WG)
}

/// Output positions per `paco_accumulate` launch (`ARRAYBRIDGE_PACO_DEVICE_BATCH` of `t`,
/// default [`super::DEVICE_BATCH`]).
pub(super) fn device_batch(t: &Tuning) -> usize {
    t.usize_or("ARRAYBRIDGE_PACO_DEVICE_BATCH", super::DEVICE_BATCH)
}

/// The launch shapes of one run, from the tuning of its back end (results do not depend on
/// them).
#[derive(Debug, Clone, Copy)]
pub(super) struct Shapes {
    /// `paco_stats` work-group size ([`stats_wg`]).
    pub(super) stats_wg: usize,
    /// Work-group size of the per-pixel kernels ([`line_wg`]).
    pub(super) line_wg: usize,
    /// Output positions per `paco_accumulate` launch ([`device_batch`], at least 1).
    pub(super) batch: usize,
}

impl Shapes {
    pub(super) fn new<E: Executor>(e: &E, t: &Tuning) -> Shapes {
        Shapes {
            stats_wg: stats_wg(e, t),
            line_wg: line_wg(t),
            batch: device_batch(t).max(1),
        }
    }
}

pub(super) fn to_u32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        BridgeError::invalid_argument(what, format!("{v} does not fit the device's 32-bit index"))
    })
}

/// Encode f64 values as `REAL` (8 or 4 bytes, little-endian).
pub(super) fn encode(vals: impl Iterator<Item = f64>, f64_real: bool, cap: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(cap * if f64_real { 8 } else { 4 });
    for v in vals {
        if f64_real {
            out.extend_from_slice(&v.to_le_bytes());
        } else {
            out.extend_from_slice(&(v as f32).to_le_bytes());
        }
    }
    out
}

/// [`encode`] of a slice times `scale` (a power of two: exact), written in parallel pieces for
/// large inputs (the cube).
pub(super) fn encode_slice(vals: &[f64], f64_real: bool, scale: f64) -> Vec<u8> {
    const PIECE: usize = 1 << 18;
    let size = if f64_real { 8 } else { 4 };
    if vals.len() <= PIECE {
        return encode(vals.iter().map(|&x| x * scale), f64_real, vals.len());
    }
    let mut out = vec![0u8; vals.len() * size];
    out.par_chunks_mut(PIECE * size)
        .zip(vals.par_chunks(PIECE))
        .for_each(|(o, v)| {
            for (o, &x) in o.chunks_exact_mut(size).zip(v) {
                let x = x * scale;
                if f64_real {
                    o.copy_from_slice(&x.to_le_bytes());
                } else {
                    o.copy_from_slice(&(x as f32).to_le_bytes());
                }
            }
        });
    out
}

/// Decode `REAL` bytes to f64.
pub(super) fn decode(bytes: &[u8], f64_real: bool) -> Vec<f64> {
    if f64_real {
        bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect()
    } else {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect()
    }
}

pub(super) fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn u32_bytes(v: impl Iterator<Item = u32>) -> Vec<u8> {
    v.flat_map(u32::to_le_bytes).collect()
}

/// Whether the run uses double precision on this device.
pub(super) fn resolve_precision(p: GpuPrecision, fp64: bool, device: Device) -> Result<bool> {
    match p {
        GpuPrecision::Auto => Ok(fp64),
        GpuPrecision::F32 => Ok(false),
        GpuPrecision::F64 if fp64 => Ok(true),
        GpuPrecision::F64 => Err(BridgeError::Unsupported(format!(
            "PACO in double precision: {device} has no float64 support"
        ))),
    }
}

/// Templates of the bucketed-pairs path.
pub(super) enum PairTemplates {
    /// The `(q+1)²·K` table, blended on the device (`sub = 1`).
    Table { q: usize, data: Vec<f64> },
    /// The CPU's templates, one per pair, computed on the host (`sub = 2`).
    PerPair(Templates),
}
