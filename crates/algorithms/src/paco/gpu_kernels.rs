//! Portable device kernels of PACO (one source for OpenCL and CUDA, in `gpu_kernels/paco.cl`,
//! included at build time).
//!
//! The source follows the portable kernel contract of [`bridge_core::kernel`] (`KERNEL`,
//! `GLOBAL`, `LOCAL`, `GID`, `LID`, `GROUP_ID`, `BARRIER`, ...) and is compiled with one of the
//! [`PACO`] option sets: `-DREAL=double` (devices with doubles; the default) or `-DREAL=float`.
//! `REAL` is the storage and arithmetic type of every kernel.
//!
//! **Patch size.** With the default options the patch area is bounded by `KMAX` ([`KMAX`] =
//! 64, patch radii up to 4) and the K×K matrix of one pixel lives in local (shared) memory
//! sized at launch, its upper triangle packed by rows ([`tri`]: `K(K+1)/2·s` bytes;
//! `LOCAL_ARG`/`DYN_LOCAL` of [`bridge_core::kernel`]), so a radius-4 patch (K = 49) takes
//! 9.6 KiB in double (19.2 KiB as a full K×K matrix, 32 KiB fixed before that) and more groups
//! fit on a multiprocessor. Larger
//! patches use the `-DKMAX=128 -DCOV_GLOBAL` variants ([`OPTS_F64_BIG`], [`OPTS_F32_BIG`]; K ≤
//! [`KMAX_BIG`] = 128, radii up to 6): the matrix lives in a slice `K(K+1)/2` of a global scratch
//! buffer per work group (`scr`, indexed by the group id of the launch, so the host bounds the
//! groups per launch by the scratch it allocates), and the group's barriers also fence global
//! memory. Everything else (the K-vectors in local memory, the per-thread K-vectors of the
//! pair evaluation in private memory, `KMAX` values each) is the same code.
//!
//! Pipeline, no sub-pixel templates (spec §6 "fast form"; steps 1, 3 and 4 of the CPU data flow
//! in the `paco/backend.rs` module docs):
//!
//! 1. `paco_centre`: `cen[p][t] = r_t[p] − μ[p]`, the cube centred per pixel and transposed to
//!    pixel-major (one thread per pixel; the mean is the sequential sum over frames / T, as on
//!    the CPU); the uploaded cube is centred in place as well (frame-major);
//! 2. `paco_lag` (when the run's `ARRAYBRIDGE_PACO_COV` mode takes it: by default whenever it
//!    computes fewer dot products, ~13× fewer at radius 4): the CPU's lag table
//!    `G_δ[p] = Σ_t c_t[p]·c_t[p+δ]` of the rows the next launches' patches cover: on GPUs one
//!    thread per (pixel, lag) reading the frame-major centred cube (neighbouring threads,
//!    neighbouring pixels), stored lag-major; on CPU devices one thread per pixel over all its
//!    lags reading the pixel-major cube, stored pixel-major (`ARRAYBRIDGE_PACO_LAG_LAYOUT`);
//! 3. `paco_stats` with `sub = 0`: one work group per statistics pixel θ of a band of rows
//!    (rows from `y0`, columns `[x_lo, x_lo + nx)`: the edge rule's ranges, computed on the
//!    host; any `LOCAL_SIZE(0)`: [`STATS_WG`] on GPUs, [`STATS_WG_CPU`] on CPU devices):
//!    the sample covariance `S_ij = (1/T)·G_{d_j−d_i}[θ+d_i]` read from the lag table (`nl ≠ 0`)
//!    or `(1/T)·Σ_t cen[θ+d_i][t]·cen[θ+d_j][t]` computed here (upper triangle, a row at a time
//!    over the group, the CPU's four-accumulator order either way: the same bits), the
//!    shrinkage ρ (paper or VIP numerator, `variant` 0 / 1; the rows' sums of squares in
//!    parallel), `C = (1−ρ)·S + ρ·diag S` (×½ for VIP), the right-looking Cholesky factor in
//!    place (two barriers a column; the trailing updates a row at a time over the group),
//!    `w = C⁻¹h0` (the forward solve column by column over the group, the
//!    backward solve with the four accumulators of each row's dot product on four threads;
//!    stored per pixel of the band in `wb`) and `q[θ] = h0·w`. Every parallel step keeps the
//!    CPU's rounding sequence element by element. Degenerate pixels (`S_ii ≤ 0`, non-finite, not
//!    positive definite) get NaN;
//! 4. `paco_z`: the whitened matched-filter cube `z[θ][t] = w(θ)·cen_t(θ)` (disk order), one
//!    thread per (pixel, frame);
//! 5. `paco_accumulate`: per output position φ0 (one thread each) with its trajectory pixels
//!    `traj[i][ℓ]` (the CPU's bit-exact geometry, −1 when `[φ_ℓ]` fails the edge rule):
//!    `a = Σ_ℓ q[θ_ℓ]`, `b = Σ_ℓ z[θ_ℓ][ℓ]` in increasing ℓ, NaN for an invalid trajectory.
//!    The trajectories come from the host, or (GPUs, double, `ARRAYBRIDGE_PACO_TRAJ`) from
//!    `paco_traj`: one thread per position over its frames, from its polar coordinates
//!    computed on the host, with the device's sine and cosine and every rounding certified
//!    (an entry whose coordinate lies within `2⁻⁴⁰·(r + |v| + |add| + 1)` of a rounding
//!    boundary is listed for the host, whose values `paco_traj_fix` writes), so the same
//!    trajectories either way.
//!
//! With sub-pixel templates (spec §5.2 and §10 "tile by θ"), `paco_stats` is launched with
//! `sub = 1` (table templates, `SubPixel::Table { q }`) or `sub = 2` (per-pair templates:
//! `SubPixel::VipFft`, `SubPixel::Spline5`, any exact mode) over a batch of pixels: the host
//! buckets the pairs (φ0, ℓ) by their trajectory pixel θ; group `g` takes pixel `plist[g]` and
//! the pair slots `[pstart[g], pstart[g+1])` (batch-local CSR, slots in (θ, pair id) order),
//! frame `pfr[slot]`. After its Cholesky factorisation the work group evaluates every pair of
//! its pixel (one thread per pair): the template `h_ℓ` is blended bilinearly from the
//! `(q+1)²·K` table `tbl` exactly like the CPU (`sub = 1`, fractional offsets `pfy`, `pfx`) or
//! read from `tbl[slot·K..]` (`sub = 2`, the CPU's own templates computed on the host), then
//! `L⁻¹[h_ℓ | c_ℓ(θ)]` in the CPU's `forward_multi` order, `a_c = |L⁻¹h|²`,
//! `b_c = (L⁻¹h)·(L⁻¹c)`, written to `cab[2·slot]`, `cab[2·slot+1]` (no atomics). The host
//! adds the contributions to a(φ0), b(φ0) in slot order, the CPU's order. C⁻¹ is never stored.
//!
//! Floating-point contraction is disabled (`FP_CONTRACT OFF` on OpenCL; on CUDA every product
//! is rounded explicitly with `__dmul_rn` / `__fmul_rn`, so no FMA can form), and the sums
//! follow the CPU's order: in double, the PoCL maps are bit-identical to the CPU backend, with
//! and without sub-pixel templates (see the `paco/gpu.rs` module docs for the measured figures).

use bridge_core::kernel::KernelSource;

/// Build options: double precision (devices with `cl_khr_fp64`, every CUDA device).
pub const OPTS_F64: &[&str] = &["-DREAL=double"];
/// Build options: single precision.
pub const OPTS_F32: &[&str] = &["-DREAL=float"];
/// Build options: double precision, patches of up to [`KMAX_BIG`] pixels (K×K matrix in global
/// scratch memory).
pub const OPTS_F64_BIG: &[&str] = &["-DREAL=double", "-DKMAX=128", "-DCOV_GLOBAL"];
/// Build options: single precision, patches of up to [`KMAX_BIG`] pixels.
pub const OPTS_F32_BIG: &[&str] = &["-DREAL=float", "-DKMAX=128", "-DCOV_GLOBAL"];

/// Largest patch area K of the default (local-memory) option sets (the `KMAX` default of the
/// source).
pub const KMAX: usize = 64;

/// Largest patch area K of the global-scratch option sets ([`OPTS_F64_BIG`], [`OPTS_F32_BIG`]):
/// radii up to 6 (K = 113).
pub const KMAX_BIG: usize = 128;

/// Work-group size of `paco_stats` (one group per pixel) on GPUs; the kernel works with any
/// size (it reads `LOCAL_SIZE(0)`).
pub const STATS_WG: usize = 64;

/// Work-group size of `paco_stats` on CPU OpenCL devices (PoCL): one work item, so a pixel runs
/// as serial code with no barrier regions (PoCL, 61×100² VIP: 0.053 s against 0.156 s with 32
/// and 0.248 s with 64, `docs/perf.md`).
pub const STATS_WG_CPU: usize = 1;

/// Work-group size of the per-pixel kernels `paco_centre`, `paco_lag`, `paco_z` and `paco_accumulate`.
pub const LINE_WG: usize = 64;

/// Values of a pixel's K×K matrix in `paco_stats`: its upper triangle packed by rows,
/// `K(K+1)/2` (in local memory, or per work group of the `COV_GLOBAL` scratch).
pub fn tri(k: usize) -> usize {
    k * (k + 1) / 2
}

/// The option set for a run: precision and patch area K (`None` when K > [`KMAX_BIG`]).
pub fn options(f64_real: bool, k: usize) -> Option<&'static [&'static str]> {
    match (f64_real, k) {
        (_, k) if k > KMAX_BIG => None,
        (true, k) if k > KMAX => Some(OPTS_F64_BIG),
        (false, k) if k > KMAX => Some(OPTS_F32_BIG),
        (true, _) => Some(OPTS_F64),
        (false, _) => Some(OPTS_F32),
    }
}

/// The PACO statistics, whitened matched filter and trajectory sums (see the module docs).
pub const PACO: KernelSource = KernelSource {
    name: "paco",
    source: PACO_SRC,
    entry_points: paco_kernels::ENTRY_POINTS,
    option_sets: &[OPTS_F64, OPTS_F32, OPTS_F64_BIG, OPTS_F32_BIG],
};

/// Every kernel source of the PACO module (each is compiled through NVRTC in CI, in every
/// option set).
pub const ALL: &[KernelSource] = &[PACO];

const PACO_SRC: &str = include_str!("gpu_kernels/paco.cl");

/// Typed launchers of [`PACO`] (generated by the build script from the prototypes in
/// `gpu_kernels/paco.cl`).
pub mod paco_kernels {
    include!(concat!(env!("OUT_DIR"), "/paco_kernels.rs"));
}
