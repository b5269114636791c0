//! Portable device kernels of the detectors (one source for OpenCL and CUDA, in
//! `kernels/blob_log.cl` and `kernels/locate.cl`, included at build time): [`BLOB_LOG`]
//! (the LoG blob detector, below) and [`LOCATE`] (trackpy's `locate`, see its docs).
//!
//! The source follows the portable kernel contract of [`bridge_core::kernel`] (`KERNEL`,
//! `GLOBAL`, `LOCAL`, `GID`, `BARRIER`, `ATOMIC_ADD_INT`, ...). It is compiled with one of the
//! [`BLOB_LOG`] option sets:
//!
//! | macro | meaning |
//! |---|---|
//! | `REAL` | storage type of the image, the pass outputs and the cube (`float` or `double`) |
//! | `ACC` | accumulation type of each 1-D pass (`double` where the device has it, else `float`) |
//! | `ACC_DOUBLE` | `1` when `ACC` is `double` |
//!
//! Pipeline for a batch of `nb` frames of `h × w` pixels and `ns` scales (layouts are
//! `[frame][scale][y][x]`, row-major):
//!
//! 0. `prescale_u8` / `prescale_u16`: raw integer frames (uploaded as such) converted to `REAL`
//!    with the CPU's arithmetic (`v · k` or `(v − c) / k` in `ACC`, then rounded);
//! 1. `log_pass_y`: `a2 = corr_y(g2, I)` and `a0 = corr_y(g0, I)` per (frame, scale);
//! 2. `log_pass_x`: `cube = −(REAL(corr_x(g0, a2)) + REAL(corr_x(g2, a0))) · σ²`, exactly the
//!    CPU's order of operations ([`crate::detect::filters::log_plane`]): SciPy `reflect`
//!    boundary, the centre tap first and then the mirrored pairs from the outermost inwards,
//!    each pass rounded to `REAL` when stored;
//!    The two passes fused (no scratch cubes; each region's extrema folded into the partials
//!    of step 3, so `cube_minmax` does not run): `log_pass_tile` (a tile of rows by the work
//!    group's width; OpenCL's default) or `log_pass_block` (a block of rows by `BLOCK_COLS`
//!    times the work group's width, the y pass with `LOG_ROWS` rows and the x pass with
//!    `BLOCK_COLS` columns a work item, sliding windows in registers; CUDA's default), the same
//!    operations in the same order, so the cube is the two passes' bit for bit;
//! 3. `cube_minmax`: per-frame partial minima and maxima (for `threshold = None` and
//!    `threshold_rel`), one pair per work group; `frame_thresholds` folds them per frame into
//!    the frame's threshold on the device, with the CPU's arithmetic in `REAL`;
//! 4. `log_peaks`: 3×3×3 (scale × y × x) maximum filter with `nearest` edges (out-of-range
//!    neighbours ignored), strict threshold, spatial `exclude_border`; every peak is appended to
//!    a candidate list through an atomic counter (`index`, `value`); the list order is
//!    arbitrary, the host restores raster order before its stable sort (only the filled prefix
//!    of the candidate buffers is read back); after the fused passes (build options
//!    `REGION_ROWS`, `REGION_COLS`: their regions) a voxel whose region's maximum is not above
//!    the threshold is not read;
//! 5. the certified search instead of 3–4 (an f32 cube, `REAL = ACC = float`; see
//!    `blob_log/certified.rs`): `cert_frames` per frame folds the extrema, the largest pixel
//!    magnitude and the margin `e`, and a lower bound of the threshold; `cert_peaks` appends
//!    every voxel within `e` of the largest of its neighbourhood and above that bound, with a
//!    bit per neighbour within `e` of it, and the voxels within `e` of the frame's extrema
//!    (skipping, after the fused passes, the regions whose extrema rule out both); the host
//!    settles them with exact float64 voxels.
//!
//! Floating-point contraction (FMA) is disabled (`FP_CONTRACT OFF` on OpenCL, `__dmul_rn` /
//! `__dadd_rn` on CUDA) so that with `ACC = double` the passes round exactly like the CPU code;
//! the certified search's float32 passes may fuse their multiply-adds explicitly
//! (`-DPASS_FMA=1`, [`OPTS_F32_ACC32_FMA`]: its error bound holds either way).
//!
//! Build options beyond the types: `LOG_ROWS` / `LOG_COLS`, the outputs per work-item of the
//! two passes (`ARRAYBRIDGE_DETECT_ROWS` / `_COLS`; the pipeline always sets both), and the
//! fused passes' `TILE_ROWS`, `BLOCK_ROWS`, `BLOCK_COLS` (`ARRAYBRIDGE_DETECT_TILE`, `_BLOCK`,
//! `_BLOCK_COLS`). The cube does not depend on them. CI builds every option set with the source's defaults (4 and 4,
//! the blocked code) and [`OPTS_F32_ACC64_UNBLOCKED`] with 1 and 1 (the shipped default).

use bridge_core::kernel::KernelSource;

/// Build options: float32 cube, passes accumulated in float64 (float32 frames where the device
/// has doubles: the CPU's f32 working type bit for bit).
pub const OPTS_F32_ACC64: &[&str] = &["-DREAL=float", "-DACC=double", "-DACC_DOUBLE=1"];
/// Build options: float32 cube and float32 accumulation (devices without doubles).
pub const OPTS_F32_ACC32: &[&str] = &["-DREAL=float", "-DACC=float", "-DACC_DOUBLE=0"];
/// [`OPTS_F32_ACC32`] with the passes' multiply-adds fused (the certified search's float32
/// passes, `ARRAYBRIDGE_DETECT_PASS_FMA`).
pub const OPTS_F32_ACC32_FMA: &[&str] = &[
    "-DREAL=float",
    "-DACC=float",
    "-DACC_DOUBLE=0",
    "-DPASS_FMA=1",
];
/// Build options: float64 cube (matches the CPU's f64 working type bit for bit).
pub const OPTS_F64: &[&str] = &["-DREAL=double", "-DACC=double", "-DACC_DOUBLE=1"];
/// [`OPTS_F32_ACC64`] with one output per work-item in both passes, as the pipeline builds it
/// by default (listed so that CI compiles that build too).
pub const OPTS_F32_ACC64_UNBLOCKED: &[&str] = &[
    "-DREAL=float",
    "-DACC=double",
    "-DACC_DOUBLE=1",
    "-DLOG_ROWS=1",
    "-DLOG_COLS=1",
];

/// [`OPTS_F32_ACC32_FMA`] as the pipeline builds it on CUDA by default: the certified search's
/// float32 passes fused in `log_pass_block` (blocks of 16 rows, 3 columns a work item in its x
/// pass, 8 rows a work item in its y pass, extrema in regions of 8 × 48; listed so that CI
/// compiles that build too).
pub const OPTS_F32_ACC32_FMA_BLOCKED: &[&str] = &[
    "-DREAL=float",
    "-DACC=float",
    "-DACC_DOUBLE=0",
    "-DPASS_FMA=1",
    "-DLOG_ROWS=8",
    "-DLOG_COLS=1",
    "-DBLOCK_ROWS=16",
    "-DBLOCK_COLS=3",
    "-DBLOCK_PARTS=2",
    "-DBLOCK_STRIP=16",
    "-DREGION_ROWS=8",
    "-DREGION_COLS=48",
];

/// Work-group size of `cube_minmax` (its `LOCAL` arrays have this many entries).
pub const MINMAX_WG: usize = 256;

/// Work-group size of `locate_percentile` (one group per frame; `PCT_WG` in `locate.cl`).
pub const PCT_WG: usize = 256;

/// Work-group size of `locate_scale` and `locate_noise_frame` (one group per frame; a power of
/// two: `FRAME_WG` in `locate.cl`).
pub const FRAME_WG: usize = 256;

/// Rows of a work group of `locate_noise_tiles`, and its work items (`NOISE_T` in
/// `locate.cl`).
pub const NOISE_T: usize = 32;

/// Work-group size of `locate_row_max` (one group per row; a power of two).
pub const ROW_MAX_WG: usize = 64;

/// The LoG scale-space cube, its extrema and the peak candidates (see the module docs).
pub const BLOB_LOG: KernelSource = KernelSource {
    name: "detect_blob_log",
    source: BLOB_LOG_SRC,
    entry_points: blob_log_kernels::ENTRY_POINTS,
    option_sets: &[
        OPTS_F32_ACC64,
        OPTS_F32_ACC32,
        OPTS_F32_ACC32_FMA,
        OPTS_F64,
        OPTS_F32_ACC64_UNBLOCKED,
        OPTS_F32_ACC32_FMA_BLOCKED,
    ],
};

/// Every kernel source of the detection module (each is compiled through NVRTC and built on
/// OpenCL in CI, in every option set).
pub const ALL: &[KernelSource] = &[BLOB_LOG, LOCATE];

const BLOB_LOG_SRC: &str = include_str!("kernels/blob_log.cl");

/// Build options of [`LOCATE`]: float64 images and arithmetic (devices with doubles; the
/// features are then the CPU's bit for bit).
pub const LOCATE_OPTS_F64: &[&str] = &["-DREAL=double", "-DACC_DOUBLE=1"];
/// Build options of [`LOCATE`]: float32 images and arithmetic (devices without doubles).
pub const LOCATE_OPTS_F32: &[&str] = &["-DREAL=float", "-DACC_DOUBLE=0"];

/// trackpy's `locate` on the device: the bandpass, the rescale to the integer gamut, the
/// percentile threshold, the grey-dilation maxima, the iterated centroid with the
/// characterisation of each feature, and the background noise (see the module docs of
/// [`crate::detect::gpu`]).
///
/// | kernel | one work item per | does |
/// |---|---|---|
/// | `locate_load_{u8,u16,f32,f64}` | pixel | the frame (uploaded as stored) to `REAL`, inverted if asked, as the CPU does it |
/// | `locate_lowpass_y`, `locate_lowpass_x` | pixel | trackpy's Gaussian lowpass, zero padding, the CPU's order of operations |
/// | `locate_box_cols` (float frames), `locate_box_int_y` (integer frames), `locate_box_rows` | column / pixel / row | the boxcar background: for float frames running sums in the CPU's order (the mean rounded to `float` for float32 frames), for integer frames exact integer window sums (equal to the CPU's running sums); then `bandpass = low − background` clipped at the threshold, and each row's maximum |
/// | `locate_scale` | frame (a group of 256) | the frame maximum (a fold of the rows' maxima) and the rescale factor `int_max / max` |
/// | `locate_rescale` | pixel | the image in the integer gamut (truncated) and the histogram of its non-zero values |
/// | `locate_percentile` | frame | NumPy's linear-interpolation percentile of the non-zero values, as the smallest integer above it |
/// | `locate_dilate_x`, `locate_maxima` | pixel | grey dilation (row maxima, then column maxima) and the maxima above the percentile outside the margin, appended through an atomic counter |
/// | `locate_refine` | candidate | the iterated centre of mass on the circular mask, then mass, size, eccentricity, signal and raw mass |
/// | `locate_row_dist`, `locate_noise_flag`, `locate_noise_tiles` (or `locate_noise_rows`), `locate_noise_frame` | pixel / pixel / 32 rows (row) / frame (a group of 256) | the raw pixels not covered by the mask dilation of the non-zero image (flagged over the integer image, which is no longer needed): count, mean and squared deviations, each row's sums in column order (`locate_noise_tiles` reads 32 rows × 32 columns at a time into local memory, coalesced; `locate_noise_rows`, `ARRAYBRIDGE_LOCATE_NOISE=rows`, a row a work item, flagging in its first pass) |
///
/// Integer quantities (the integer image, its sums and moments) are integers on the device
/// too; the floating-point steps follow the CPU's order with contraction (FMA) disabled.
pub const LOCATE: KernelSource = KernelSource {
    name: "detect_locate",
    source: LOCATE_SRC,
    entry_points: locate_kernels::ENTRY_POINTS,
    option_sets: &[LOCATE_OPTS_F64, LOCATE_OPTS_F32],
};

const LOCATE_SRC: &str = include_str!("kernels/locate.cl");

/// Typed launchers of [`BLOB_LOG`] (generated by the build script from the prototypes in
/// `kernels/blob_log.cl`).
pub mod blob_log_kernels {
    include!(concat!(env!("OUT_DIR"), "/blob_log_kernels.rs"));
}

/// Typed launchers of [`LOCATE`] (generated by the build script from the prototypes in
/// `kernels/locate.cl`).
pub mod locate_kernels {
    include!(concat!(env!("OUT_DIR"), "/locate_kernels.rs"));
}
