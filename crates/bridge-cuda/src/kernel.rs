//! Portable kernels on CUDA: the preamble implementing [`bridge_core::kernel`]'s macro table,
//! compile checks, the per-device program cache, and launch-geometry conversion.
//!
//! A portable kernel is written once (see [`bridge_core::kernel`]) and compiled by NVRTC with
//! [`PREAMBLE`] prepended. Programs are cached per (device, source hash, options); the compile
//! log is in [`BridgeError::KernelCompile`]. Launches are given OpenCL-style as a *global* size
//! (total threads per dimension) and an optional *local* size; [`LaunchDims::new`] converts to a
//! CUDA grid of blocks, rounding the global size up (kernels guard with `if (GID(0) >= n) return;`).

use bridge_core::kernel::KernelSource;
use bridge_core::{BridgeError, Device, Result};

use crate::nvrtc::{self, CHECK_TARGET};

/// The CUDA preamble: exactly the portable macro table of [`bridge_core::kernel`].
pub const PREAMBLE: &str = r#"// arraybridge portable-kernel preamble (CUDA)
#define KERNEL extern "C" __global__ void
#define GLOBAL
#define LOCAL __shared__
#define LOCAL_PTR
#define LOCAL_ARG(T, name) const unsigned int name##_bytes_
#define DYN_LOCAL(T, name) extern __shared__ __align__(16) unsigned char ab_dyn_local_[]; T* name = (T*)ab_dyn_local_; (void)name##_bytes_
#define DEVICE_FN __device__ inline
#define RESTRICT __restrict__
typedef unsigned int uint;
typedef unsigned long long ulong;
typedef unsigned short ushort;
typedef unsigned char uchar;
__device__ inline unsigned int ab_dim_(const uint3 v, int d) { return d == 0 ? v.x : (d == 1 ? v.y : v.z); }
__device__ inline unsigned int ab_dim_(const dim3 v, int d) { return d == 0 ? v.x : (d == 1 ? v.y : v.z); }
#define LID(d) ((size_t)ab_dim_(threadIdx, (d)))
#define GROUP_ID(d) ((size_t)ab_dim_(blockIdx, (d)))
#define LOCAL_SIZE(d) ((size_t)ab_dim_(blockDim, (d)))
#define NUM_GROUPS(d) ((size_t)ab_dim_(gridDim, (d)))
#define GID(d) (GROUP_ID(d) * LOCAL_SIZE(d) + LID(d))
#define BARRIER() __syncthreads()
#define ATOMIC_ADD_INT(p, v) atomicAdd((p), (v))
#define HAS_FP64 1
"#;

/// The strided gather of a DLPack import: `dst[i] = src[base + Σ idx_d · stride_d]` over the
/// row-major index `i` of the shape, in units of `ELEM` (the element, or a divisor of it: an
/// extra innermost dimension of stride 1 splits a wide element). `meta` holds `ndim` extents,
/// `ndim` strides and the base offset, as `long`; the element count is `n_lo + 2³² · n_hi`.
/// A grid-stride loop, so any count fits any grid.
pub const GATHER: KernelSource = KernelSource {
    name: "cuda_strided_gather",
    source: r#"
KERNEL gather(GLOBAL const ELEM* RESTRICT src, GLOBAL ELEM* RESTRICT dst,
              GLOBAL const long* RESTRICT meta, const uint ndim, const uint n_lo, const uint n_hi) {
    const ulong n = ((ulong)n_hi << 32) | (ulong)n_lo;
    const ulong step = (ulong)NUM_GROUPS(0) * (ulong)LOCAL_SIZE(0);
    for (ulong i = GID(0); i < n; i += step) {
        ulong rem = i;
        long off = meta[2 * ndim];
        for (uint k = ndim; k > 0; --k) {
            const ulong extent = (ulong)meta[k - 1];
            off += (long)(rem % extent) * meta[ndim + k - 1];
            rem /= extent;
        }
        dst[i] = src[off];
    }
}
"#,
    entry_points: &["gather"],
    option_sets: &[
        &["-DELEM=uchar"],
        &["-DELEM=ushort"],
        &["-DELEM=uint"],
        &["-DELEM=ulong"],
    ],
};

/// Kernels this crate ships (used by its GPU tests, the transfer self-checks and the strided
/// DLPack import). Every one is compiled through NVRTC in CI.
pub const KERNELS: &[KernelSource] = &[
    KernelSource {
        name: "cuda_selftest_axpy",
        source: r#"
KERNEL axpy(GLOBAL REAL* RESTRICT y, GLOBAL const REAL* RESTRICT x, const REAL a, const uint n) {
    size_t i = GID(0);
    if (i >= n) return;
    y[i] = a * x[i] + y[i];
}
"#,
        entry_points: &["axpy"],
        option_sets: &[&["-DREAL=float"], &["-DREAL=double"]],
    },
    KernelSource {
        name: "cuda_selftest_count",
        source: r#"
DEVICE_FN int is_positive(float v) { return v > 0.0f ? 1 : 0; }
KERNEL count_positive(GLOBAL const float* RESTRICT x, const uint n, GLOBAL int* count) {
    LOCAL int partial[256];
    size_t l = LID(0);
    size_t i = GID(0);
    partial[l] = (i < n) ? is_positive(x[i]) : 0;
    BARRIER();
    for (size_t s = LOCAL_SIZE(0) / 2; s > 0; s >>= 1) {
        if (l < s) partial[l] += partial[l + s];
        BARRIER();
    }
    if (l == 0) ATOMIC_ADD_INT(count, partial[0]);
    (void)GROUP_ID(0); (void)NUM_GROUPS(0);
}
"#,
        entry_points: &["count_positive"],
        option_sets: &[&[]],
    },
    GATHER,
];

/// The full source NVRTC compiles: preamble plus portable source.
pub fn full_source(src: &KernelSource) -> String {
    format!("{PREAMBLE}\n#line 1 \"{}\"\n{}", src.name, src.source)
}

/// Compile every option set of `src` with NVRTC for sm_90 (no GPU needed) and check that each
/// entry point is in the binary.
///
/// Returns `Ok(false)` — skipped — when `libnvrtc` is absent (a test that requires it, under
/// `ARRAYBRIDGE_REQUIRE_NVRTC=1`, fails on that: `test_support::require`). `Ok(true)` means
/// compiled. Compile errors are [`BridgeError::KernelCompile`] with NVRTC's log.
pub fn compile_check(src: &KernelSource) -> Result<bool> {
    if let Err(reason) = nvrtc::available() {
        log::warn!("skipping NVRTC compile check of {}: {reason}", src.name);
        return Ok(false);
    }
    let code = full_source(src);
    let sets: Vec<&[&str]> = if src.option_sets.is_empty() {
        vec![&[]]
    } else {
        src.option_sets.to_vec()
    };
    for set in sets {
        let opts: Vec<String> = set.iter().map(|s| (*s).to_owned()).collect();
        let image = nvrtc::compile(src.name, &code, &opts, CHECK_TARGET, Device::Cuda(0))?;
        for entry in src.entry_points {
            if !contains(&image.bytes, entry.as_bytes()) {
                return Err(BridgeError::KernelCompile {
                    kernel: src.name.to_owned(),
                    device: Device::Cuda(0),
                    log: format!(
                        "entry point {entry:?} is missing from the compiled binary (options {set:?}); declare it with KERNEL"
                    ),
                });
            }
        }
    }
    Ok(true)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    // Entry points are NUL-delimited symbol names in the CUBIN's string table.
    hay.windows(needle.len() + 2)
        .any(|w| w[0] == 0 && &w[1..=needle.len()] == needle && w[needle.len() + 1] == 0)
}

/// A CUDA launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks per grid dimension.
    pub grid: (u32, u32, u32),
    /// Threads per block dimension.
    pub block: (u32, u32, u32),
}

/// Default threads per block along dimension 0 when no local size is given.
pub const DEFAULT_BLOCK: usize = 256;

impl LaunchDims {
    /// Convert an OpenCL-style global size (1–3 dimensions, total threads) and optional local
    /// size into a grid of blocks: `grid[d] = ceil(global[d] / local[d])`. Without `local`, dimension
    /// 0 uses [`DEFAULT_BLOCK`] (or less for a smaller global size) and the others 1.
    ///
    /// Errors on an empty or over-long shape, a zero local size, more than 1024 threads per
    /// block, or a grid beyond CUDA's limits (2³¹−1 × 65535 × 65535).
    pub fn new(global: &[usize], local: Option<&[usize]>) -> Result<LaunchDims> {
        let bad = |r: String| BridgeError::invalid_argument("launch size", r);
        if global.is_empty() || global.len() > 3 {
            return Err(bad(format!(
                "global size must have 1 to 3 dimensions, got {global:?}"
            )));
        }
        let mut g = [1usize; 3];
        g[..global.len()].copy_from_slice(global);
        let mut l = [1usize; 3];
        match local {
            Some(loc) => {
                if loc.len() != global.len() {
                    return Err(bad(format!(
                        "local size {loc:?} and global size {global:?} differ in rank"
                    )));
                }
                l[..loc.len()].copy_from_slice(loc);
            }
            None => l[0] = DEFAULT_BLOCK.min(g[0].max(1)),
        }
        if l.contains(&0) {
            return Err(bad(format!("local size must be positive, got {l:?}")));
        }
        let threads = l[0] * l[1] * l[2];
        if threads > 1024 || l[2] > 64 {
            return Err(bad(format!(
                "block {l:?} exceeds CUDA's limits (1024 threads, z ≤ 64)"
            )));
        }
        let blocks: Vec<usize> = g
            .iter()
            .zip(&l)
            .map(|(g, l)| g.div_ceil(*l).max(1))
            .collect();
        let limits = [i32::MAX as usize, 65_535, 65_535];
        for d in 0..3 {
            if blocks[d] > limits[d] {
                return Err(bad(format!(
                    "grid dimension {d} needs {} blocks (limit {})",
                    blocks[d], limits[d]
                )));
            }
        }
        Ok(LaunchDims {
            grid: (blocks[0] as u32, blocks[1] as u32, blocks[2] as u32),
            block: (l[0] as u32, l[1] as u32, l[2] as u32),
        })
    }
}
