//! Portable device kernels of the detectors (one source for OpenCL and CUDA): [`BLOB_LOG`]
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
//! 3. `cube_minmax`: per-frame partial minima and maxima (for `threshold = None` and
//!    `threshold_rel`), one pair per work group, reduced on the host;
//! 4. `log_peaks`: 3×3×3 (scale × y × x) maximum filter with `nearest` edges (out-of-range
//!    neighbours ignored), strict threshold, spatial `exclude_border`; every peak is appended to
//!    a candidate list through an atomic counter (`index`, `value`); the list order is
//!    arbitrary, the host restores raster order before its stable sort (only the filled prefix
//!    of the candidate buffers is read back).
//!
//! Floating-point contraction (FMA) is disabled (`FP_CONTRACT OFF` on OpenCL, `__dmul_rn` /
//! `__dadd_rn` on CUDA) so that with `ACC = double` the passes round exactly like the CPU code.
//!
//! Build options beyond the types: `LOG_ROWS` / `LOG_COLS`, the outputs per work-item of the
//! two passes (`ARRAYBRIDGE_DETECT_ROWS` / `_COLS`; the pipeline always sets both). The cube
//! does not depend on them. CI builds every option set with the source's defaults (4 and 4,
//! the blocked code) and [`OPTS_F32_ACC64_UNBLOCKED`] with 1 and 1 (the shipped default).

use bridge_core::kernel::KernelSource;

/// Build options: float32 cube, passes accumulated in float64 (the default where the device has
/// doubles).
pub const OPTS_F32_ACC64: &[&str] = &["-DREAL=float", "-DACC=double", "-DACC_DOUBLE=1"];
/// Build options: float32 cube and float32 accumulation (devices without doubles).
pub const OPTS_F32_ACC32: &[&str] = &["-DREAL=float", "-DACC=float", "-DACC_DOUBLE=0"];
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

/// Work-group size of `cube_minmax` (its `LOCAL` arrays have this many entries).
pub const MINMAX_WG: usize = 256;

/// The LoG scale-space cube, its extrema and the peak candidates (see the module docs).
pub const BLOB_LOG: KernelSource = KernelSource {
    name: "detect_blob_log",
    source: BLOB_LOG_SRC,
    entry_points: &[
        "prescale_u8",
        "prescale_u16",
        "log_pass_y",
        "log_pass_x",
        "cube_minmax",
        "log_peaks",
    ],
    option_sets: &[
        OPTS_F32_ACC64,
        OPTS_F32_ACC32,
        OPTS_F64,
        OPTS_F32_ACC64_UNBLOCKED,
    ],
};

/// Every kernel source of the detection module (each is compiled through NVRTC and built on
/// OpenCL in CI, in every option set).
pub const ALL: &[KernelSource] = &[BLOB_LOG, LOCATE];

const BLOB_LOG_SRC: &str = r#"
#ifndef REAL
#define REAL float
#endif
#ifndef ACC
#define ACC double
#endif
#ifndef ACC_DOUBLE
#define ACC_DOUBLE 1
#endif
#define MINMAX_WG 256

#if defined(__CUDACC__)
#if ACC_DOUBLE
#define MUL_RN(a, b) __dmul_rn((a), (b))
#define ADD_RN(a, b) __dadd_rn((a), (b))
#define DIV_RN(a, b) __ddiv_rn((a), (b))
#else
#define MUL_RN(a, b) __fmul_rn((a), (b))
#define ADD_RN(a, b) __fadd_rn((a), (b))
#define DIV_RN(a, b) __fdiv_rn((a), (b))
#endif
#else
#pragma OPENCL FP_CONTRACT OFF
#define MUL_RN(a, b) ((a) * (b))
#define ADD_RN(a, b) ((a) + (b))
#define DIV_RN(a, b) ((a) / (b))
#endif

/* Input conversion of raw integer frames (spec 1.2/1.3), in ACC as the CPU does it in f64:
   mode 0: v * k (Legacy: k = 1/dtype_max; None: k = 1); mode 1: (v - c) / k (MinMax, Range;
   k = d - c). pp[2f] = c, pp[2f + 1] = k for frame f. Launched over (plane, frames); frame f
   of the output is frame f0 + f of raw (a caller's device-resident movie, read in place). */
#define PRESCALE_KERNEL(NAME, T)                                                         \
KERNEL NAME(GLOBAL const T* RESTRICT raw, GLOBAL const ACC* RESTRICT pp,                 \
            GLOBAL REAL* RESTRICT img, const uint plane, const uint nf, const uint mode, \
            const uint f0) {                                                             \
    size_t i = GID(0);                                                                   \
    size_t f = GID(1);                                                                   \
    if (i >= plane || f >= nf) return;                                                   \
    size_t o = f * plane + i;                                                            \
    ACC v = (ACC)raw[((size_t)f0 + f) * plane + i];                                      \
    ACC r = mode == 0 ? MUL_RN(v, pp[2 * f + 1])                                         \
                      : DIV_RN(ADD_RN(v, -pp[2 * f]), pp[2 * f + 1]);                    \
    img[o] = (REAL)r;                                                                    \
}
PRESCALE_KERNEL(prescale_u8, uchar)
PRESCALE_KERNEL(prescale_u16, ushort)

/* SciPy 'reflect' (half-sample symmetric), valid for any j, also when |j| >= n. */
DEVICE_FN int reflect_index(int j, int n) {
    if (j >= 0 && j < n) return j;
    int period = 2 * n;
    int k = j % period;
    if (k < 0) k += period;
    return k >= n ? period - 1 - k : k;
}

/* 'reflect' for -n <= j < 2n (every tap when r <= n): select-only, vectorises. */
DEVICE_FN int reflect_near(int j, int n) {
    return j < 0 ? -1 - j : (j >= n ? 2 * n - 1 - j : j);
}

/* Outputs per work-item of the two passes (build options -DLOG_ROWS=n, -DLOG_COLS=n; the
   knobs ARRAYBRIDGE_DETECT_ROWS and ARRAYBRIDGE_DETECT_COLS). Each output is computed with the
   same operations in the same order whatever n is, so the cube does not depend on them. The
   pipeline always sets both; these defaults make the CI builds of every option set (NVRTC and
   PoCL) cover the blocked code. */
#ifndef LOG_ROWS
#define LOG_ROWS 4
#endif
#ifndef LOG_COLS
#define LOG_COLS 4
#endif

/* One output of corr_y at row y: centre tap, then the mirrored pairs from the outermost in. */
DEVICE_FN void pass_y_one(GLOBAL const REAL* RESTRICT im, GLOBAL const ACC* RESTRICT g0,
                          GLOBAL const ACC* RESTRICT g2, int r, int y, uint h, uint w,
                          size_t x, ACC* s2out, ACC* s0out) {
    ACC c = (ACC)im[(size_t)y * w + x];
    ACC s2 = MUL_RN(c, g2[0]);
    ACC s0 = MUL_RN(c, g0[0]);
    for (int j = r; j >= 1; --j) {
        int u = reflect_index(y - j, (int)h);
        int d = reflect_index(y + j, (int)h);
        ACC t = ADD_RN((ACC)im[(size_t)u * w + x], (ACC)im[(size_t)d * w + x]);
        s2 = ADD_RN(s2, MUL_RN(t, g2[j]));
        s0 = ADD_RN(s0, MUL_RN(t, g0[j]));
    }
    *s2out = s2;
    *s0out = s0;
}

/* meta[2s] = offset of scale s in taps (g0 half, then g2 half), meta[2s+1] = radius r.
   Work-item (x, i, bs) computes rows LOG_ROWS*i .. LOG_ROWS*i + LOG_ROWS - 1 of column x. Where
   those rows and all their taps are inside the frame, a sliding window over the rows above
   (up[k] = row y0+k-j) and below (dn[k] = row y0+k+j) loads two values per tap for all
   LOG_ROWS outputs, each converted to ACC once. */
KERNEL log_pass_y(GLOBAL const REAL* RESTRICT img, const uint frame0,
                  GLOBAL const ACC* RESTRICT taps, GLOBAL const uint* RESTRICT meta,
                  GLOBAL REAL* RESTRICT a2, GLOBAL REAL* RESTRICT a0,
                  const uint h, const uint w, const uint ns, const uint nb) {
    size_t x = GID(0);
    size_t y0 = GID(1) * LOG_ROWS;
    size_t bs = GID(2);
    if (x >= w || y0 >= h || bs >= (size_t)nb * ns) return;
    uint b = (uint)(bs / ns);
    uint s = (uint)(bs % ns);
    uint off = meta[2 * s];
    int r = (int)meta[2 * s + 1];
    GLOBAL const ACC* g0 = taps + off;
    GLOBAL const ACC* g2 = taps + off + (uint)r + 1;
    GLOBAL const REAL* im = img + (size_t)(frame0 + b) * h * w;
    size_t o = bs * h * w + y0 * w + x;
    if ((int)y0 >= r && (long)y0 + (LOG_ROWS - 1) + r < (long)h) {
        /* interior block (uniform over most of a work group): no boundary handling */
        GLOBAL const REAL* col = im + y0 * w + x;
        long lw = (long)w;
        ACC s2[LOG_ROWS], s0[LOG_ROWS], up[LOG_ROWS], dn[LOG_ROWS];
        for (int k = 0; k < LOG_ROWS; ++k) {
            ACC c = (ACC)col[k * lw];
            s2[k] = MUL_RN(c, g2[0]);
            s0[k] = MUL_RN(c, g0[0]);
            up[k] = (ACC)col[(k - r) * lw];
            dn[k] = (ACC)col[(k + r) * lw];
        }
        for (int j = r; j >= 1; --j) {
            ACC t2 = g2[j];
            ACC t0 = g0[j];
            for (int k = 0; k < LOG_ROWS; ++k) {
                ACC t = ADD_RN(up[k], dn[k]);
                s2[k] = ADD_RN(s2[k], MUL_RN(t, t2));
                s0[k] = ADD_RN(s0[k], MUL_RN(t, t0));
            }
            if (j > 1) {
                for (int k = 0; k + 1 < LOG_ROWS; ++k) up[k] = up[k + 1];
                up[LOG_ROWS - 1] = (ACC)col[(LOG_ROWS - j) * lw];
                for (int k = LOG_ROWS - 1; k > 0; --k) dn[k] = dn[k - 1];
                dn[0] = (ACC)col[(j - 1) * lw];
            }
        }
        for (int k = 0; k < LOG_ROWS; ++k) {
            a2[o + (size_t)k * w] = (REAL)s2[k];
            a0[o + (size_t)k * w] = (REAL)s0[k];
        }
    } else {
        for (int k = 0; k < LOG_ROWS && y0 + (size_t)k < h; ++k) {
            ACC s2, s0;
            pass_y_one(im, g0, g2, r, (int)(y0 + (size_t)k), h, w, x, &s2, &s0);
            a2[o + (size_t)k * w] = (REAL)s2;
            a0[o + (size_t)k * w] = (REAL)s0;
        }
    }
}

/* One output of pass x at column x of a row: corr_x(g0, a2) and corr_x(g2, a0). */
DEVICE_FN REAL pass_x_one(GLOBAL const REAL* RESTRICT r2, GLOBAL const REAL* RESTRICT r0,
                          GLOBAL const ACC* RESTRICT g0, GLOBAL const ACC* RESTRICT g2, int r,
                          int x, uint w, REAL sig2) {
    ACC ly = MUL_RN((ACC)r2[x], g0[0]);
    ACC lx = MUL_RN((ACC)r0[x], g2[0]);
    int near = r <= (int)w;
    for (int j = r; j >= 1; --j) {
        int lft = near ? reflect_near(x - j, (int)w) : reflect_index(x - j, (int)w);
        int rgt = near ? reflect_near(x + j, (int)w) : reflect_index(x + j, (int)w);
        ly = ADD_RN(ly, MUL_RN(ADD_RN((ACC)r2[lft], (ACC)r2[rgt]), g0[j]));
        lx = ADD_RN(lx, MUL_RN(ADD_RN((ACC)r0[lft], (ACC)r0[rgt]), g2[j]));
    }
    REAL lyy = (REAL)ly;
    REAL lxx = (REAL)lx;
    REAL sum = lyy + lxx;
    return (-sum) * sig2;
}

/* cube = -(REAL(corr_x(g0, a2)) + REAL(corr_x(g2, a0))) * sigma2[s]. Work-item (i, y, bs)
   computes columns LOG_COLS*i .. LOG_COLS*i + LOG_COLS - 1 of row y, with sliding windows
   (as log_pass_y) where those columns and their taps are inside the row. */
KERNEL log_pass_x(GLOBAL const REAL* RESTRICT a2, GLOBAL const REAL* RESTRICT a0,
                  GLOBAL const ACC* RESTRICT taps, GLOBAL const uint* RESTRICT meta,
                  GLOBAL const REAL* RESTRICT sigma2, GLOBAL REAL* RESTRICT cube,
                  const uint h, const uint w, const uint ns, const uint nb) {
    size_t x0 = GID(0) * LOG_COLS;
    size_t y = GID(1);
    size_t bs = GID(2);
    if (x0 >= w || y >= h || bs >= (size_t)nb * ns) return;
    uint s = (uint)(bs % ns);
    uint off = meta[2 * s];
    int r = (int)meta[2 * s + 1];
    GLOBAL const ACC* g0 = taps + off;
    GLOBAL const ACC* g2 = taps + off + (uint)r + 1;
    size_t row = bs * h * w + y * w;
    GLOBAL const REAL* r2 = a2 + row;
    GLOBAL const REAL* r0 = a0 + row;
    REAL sig2 = sigma2[s];
#if LOG_COLS > 1
    if ((int)x0 >= r && (long)x0 + (LOG_COLS - 1) + r < (long)w) {
        GLOBAL const REAL* p2 = r2 + x0;
        GLOBAL const REAL* p0 = r0 + x0;
        ACC ly[LOG_COLS], lx[LOG_COLS], u2[LOG_COLS], d2[LOG_COLS], u0[LOG_COLS], d0[LOG_COLS];
        for (int k = 0; k < LOG_COLS; ++k) {
            ly[k] = MUL_RN((ACC)p2[k], g0[0]);
            lx[k] = MUL_RN((ACC)p0[k], g2[0]);
            u2[k] = (ACC)p2[k - r];
            d2[k] = (ACC)p2[k + r];
            u0[k] = (ACC)p0[k - r];
            d0[k] = (ACC)p0[k + r];
        }
        for (int j = r; j >= 1; --j) {
            ACC t0 = g0[j];
            ACC t2 = g2[j];
            for (int k = 0; k < LOG_COLS; ++k) {
                ly[k] = ADD_RN(ly[k], MUL_RN(ADD_RN(u2[k], d2[k]), t0));
                lx[k] = ADD_RN(lx[k], MUL_RN(ADD_RN(u0[k], d0[k]), t2));
            }
            if (j > 1) {
                for (int k = 0; k + 1 < LOG_COLS; ++k) {
                    u2[k] = u2[k + 1];
                    u0[k] = u0[k + 1];
                }
                u2[LOG_COLS - 1] = (ACC)p2[LOG_COLS - j];
                u0[LOG_COLS - 1] = (ACC)p0[LOG_COLS - j];
                for (int k = LOG_COLS - 1; k > 0; --k) {
                    d2[k] = d2[k - 1];
                    d0[k] = d0[k - 1];
                }
                d2[0] = (ACC)p2[j - 1];
                d0[0] = (ACC)p0[j - 1];
            }
        }
        for (int k = 0; k < LOG_COLS; ++k) {
            REAL lyy = (REAL)ly[k];
            REAL lxx = (REAL)lx[k];
            REAL sum = lyy + lxx;
            cube[row + x0 + (size_t)k] = (-sum) * sig2;
        }
        return;
    }
#endif
    for (int k = 0; k < LOG_COLS && x0 + (size_t)k < w; ++k) {
        cube[row + x0 + (size_t)k] = pass_x_one(r2, r0, g0, g2, r, (int)(x0 + (size_t)k), w, sig2);
    }
}

/* Partial extrema: launched with global (groups * MINMAX_WG, nb), local (MINMAX_WG, 1);
   part[2 * (b * groups + g)] = min, part[... + 1] = max. */
KERNEL cube_minmax(GLOBAL const REAL* RESTRICT cube, GLOBAL REAL* RESTRICT part,
                   const uint n_per_frame, const uint groups) {
    LOCAL REAL lo[MINMAX_WG];
    LOCAL REAL hi[MINMAX_WG];
    size_t l = LID(0);
    size_t g = GROUP_ID(0);
    size_t b = GID(1);
    GLOBAL const REAL* c = cube + b * n_per_frame;
    REAL a = c[0];
    REAL z = c[0];
    for (size_t i = g * MINMAX_WG + l; i < n_per_frame; i += (size_t)groups * MINMAX_WG) {
        REAL v = c[i];
        a = v < a ? v : a;
        z = v > z ? v : z;
    }
    lo[l] = a;
    hi[l] = z;
    BARRIER();
    for (size_t s = MINMAX_WG / 2; s > 0; s >>= 1) {
        if (l < s) {
            lo[l] = lo[l + s] < lo[l] ? lo[l + s] : lo[l];
            hi[l] = hi[l + s] > hi[l] ? hi[l + s] : hi[l];
        }
        BARRIER();
    }
    if (l == 0) {
        part[2 * (b * groups + g)] = lo[0];
        part[2 * (b * groups + g) + 1] = hi[0];
    }
}

/* 3x3x3 maxima above thr[frame], 'nearest' edges, spatial border exclusion; appends
   (flat index in the batch cube, value) through the counter; writes only below cap. */
KERNEL log_peaks(GLOBAL const REAL* RESTRICT cube, GLOBAL const REAL* RESTRICT thr,
                 const uint h, const uint w, const uint ns, const uint nb,
                 const uint by, const uint bx, GLOBAL int* count,
                 GLOBAL uint* RESTRICT cand_idx, GLOBAL REAL* RESTRICT cand_val,
                 const uint cap) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t bs = GID(2);
    if (x >= w || y >= h || bs >= (size_t)nb * ns) return;
    if (y < by || y + by >= h || x < bx || x + bx >= w) return;
    uint b = (uint)(bs / ns);
    int s = (int)(bs % ns);
    size_t plane = (size_t)h * w;
    size_t o = bs * plane + y * w + x;
    REAL v = cube[o];
    if (!(v > thr[b])) return;
    for (int ds = -1; ds <= 1; ++ds) {
        int sn = s + ds;
        if (sn < 0 || sn >= (int)ns) continue;
        GLOBAL const REAL* pl = cube + ((size_t)b * ns + (size_t)sn) * plane;
        for (int dy = -1; dy <= 1; ++dy) {
            int yn = (int)y + dy;
            if (yn < 0 || yn >= (int)h) continue;
            for (int dx = -1; dx <= 1; ++dx) {
                int xn = (int)x + dx;
                if (xn < 0 || xn >= (int)w) continue;
                if (pl[(size_t)yn * w + (size_t)xn] > v) return;
            }
        }
    }
    int k = ATOMIC_ADD_INT(count, 1);
    if (k < (int)cap) {
        cand_idx[k] = (uint)o;
        cand_val[k] = v;
    }
}
"#;

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
/// | `locate_scale` | frame | the frame maximum and the rescale factor `int_max / max` |
/// | `locate_rescale` | pixel | the image in the integer gamut (truncated) and the histogram of its non-zero values |
/// | `locate_percentile` | frame | NumPy's linear-interpolation percentile of the non-zero values, as the smallest integer above it |
/// | `locate_dilate_x`, `locate_maxima` | pixel | grey dilation (row maxima, then column maxima) and the maxima above the percentile outside the margin, appended through an atomic counter |
/// | `locate_refine` | candidate | the iterated centre of mass on the circular mask, then mass, size, eccentricity, signal and raw mass |
/// | `locate_row_dist`, `locate_noise_rows`, `locate_noise_frame` | pixel / row / frame | the raw pixels not covered by the mask dilation of the non-zero image (flagged in the first pass, over the integer image, which is no longer needed): count, mean and squared deviations |
///
/// Integer quantities (the integer image, its sums and moments) are integers on the device
/// too; the floating-point steps follow the CPU's order with contraction (FMA) disabled.
pub const LOCATE: KernelSource = KernelSource {
    name: "detect_locate",
    source: LOCATE_SRC,
    entry_points: &[
        "locate_load_u8",
        "locate_load_u16",
        "locate_load_f32",
        "locate_load_f64",
        "locate_lowpass_y",
        "locate_lowpass_x",
        "locate_box_cols",
        "locate_box_int_y",
        "locate_box_rows",
        "locate_scale",
        "locate_rescale",
        "locate_percentile",
        "locate_dilate_x",
        "locate_maxima",
        "locate_refine",
        "locate_row_dist",
        "locate_noise_rows",
        "locate_noise_frame",
    ],
    option_sets: &[LOCATE_OPTS_F64, LOCATE_OPTS_F32],
};

const LOCATE_SRC: &str = r#"
#ifndef REAL
#define REAL double
#endif
#ifndef ACC_DOUBLE
#define ACC_DOUBLE 1
#endif

#if defined(__CUDACC__)
#if ACC_DOUBLE
#define MUL_RN(a, b) __dmul_rn((a), (b))
#define ADD_RN(a, b) __dadd_rn((a), (b))
#define DIV_RN(a, b) __ddiv_rn((a), (b))
#define SQRT_RN(a) __dsqrt_rn(a)
#else
#define MUL_RN(a, b) __fmul_rn((a), (b))
#define ADD_RN(a, b) __fadd_rn((a), (b))
#define DIV_RN(a, b) __fdiv_rn((a), (b))
#define SQRT_RN(a) __fsqrt_rn(a)
#endif
#else
#pragma OPENCL FP_CONTRACT OFF
#define MUL_RN(a, b) ((a) * (b))
#define ADD_RN(a, b) ((a) + (b))
#define DIV_RN(a, b) ((a) / (b))
#define SQRT_RN(a) sqrt(a)
#endif
#define SUB_RN(a, b) ADD_RN((a), -(b))

/* float64 frames: read as double where the device has doubles; without doubles the host
   hands them over as float32 (this kernel is then compiled on floats). */
#if ACC_DOUBLE
#define F64_T double
#else
#define F64_T REAL
#endif

/* Per-run settings, prm[]: 0 threshold of the bandpass, 1 int_max (255 or 65535),
   2 percentile / 100. */
#define P_THR 0
#define P_INTMAX 1
#define P_Q100 2

DEVICE_FN int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* The frame to REAL: raw[f][i] from frame f0 + f of the input, inverted when inv != 0
   (integers: int_max - v; float32: 1 - v in float; float64: 1 - v). */
#define LOAD_KERNEL(NAME, T, INVERT)                                                       \
KERNEL NAME(GLOBAL const T* RESTRICT in, GLOBAL REAL* RESTRICT raw, const uint plane,      \
            const uint nf, const uint inv, const uint f0) {                                \
    size_t i = GID(0);                                                                     \
    size_t f = GID(1);                                                                     \
    if (i >= plane || f >= nf) return;                                                     \
    T v = in[((size_t)f0 + f) * plane + i];                                                \
    raw[f * plane + i] = inv ? (REAL)(INVERT) : (REAL)v;                                   \
}
LOAD_KERNEL(locate_load_u8, uchar, (uchar)(255 - v))
LOAD_KERNEL(locate_load_u16, ushort, (ushort)(65535 - v))
LOAD_KERNEL(locate_load_f32, float, 1.0f - v)
LOAD_KERNEL(locate_load_f64, F64_T, (F64_T)1 - v)

/* Lowpass along y (zero padding), half kernel g[0..=r]: the centre tap, then the mirrored
   pairs from the outermost inwards; a pair entirely outside the frame adds nothing. */
KERNEL locate_lowpass_y(GLOBAL const REAL* RESTRICT src, GLOBAL REAL* RESTRICT dst,
                        GLOBAL const REAL* RESTRICT g, const uint r, const uint h,
                        const uint w, const uint nf) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t f = GID(2);
    if (x >= w || y >= h || f >= nf) return;
    GLOBAL const REAL* im = src + f * h * w;
    REAL acc = MUL_RN(im[y * w + x], g[0]);
    for (int j = (int)r; j >= 1; --j) {
        int u = (int)y - j;
        int d = (int)y + j;
        int uu = u >= 0;
        int dd = d < (int)h;
        if (!uu && !dd) continue;
        REAL vu = uu ? im[(size_t)u * w + x] : (REAL)0;
        REAL vd = dd ? im[(size_t)d * w + x] : (REAL)0;
        acc = ADD_RN(acc, MUL_RN(ADD_RN(vu, vd), g[j]));
    }
    dst[f * h * w + y * w + x] = acc;
}

/* Lowpass along x (zero padding): every pair is added, zeros outside the frame. */
KERNEL locate_lowpass_x(GLOBAL const REAL* RESTRICT src, GLOBAL REAL* RESTRICT dst,
                        GLOBAL const REAL* RESTRICT g, const uint r, const uint h,
                        const uint w, const uint nf) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t f = GID(2);
    if (x >= w || y >= h || f >= nf) return;
    GLOBAL const REAL* row = src + f * h * w + y * w;
    REAL acc = MUL_RN(row[x], g[0]);
    for (int j = (int)r; j >= 1; --j) {
        int l = (int)x - j;
        int q = (int)x + j;
        REAL vl = l >= 0 ? row[l] : (REAL)0;
        REAL vr = q < (int)w ? row[q] : (REAL)0;
        acc = ADD_RN(acc, MUL_RN(ADD_RN(vl, vr), g[j]));
    }
    dst[f * h * w + y * w + x] = acc;
}

/* One boxcar line (SciPy uniform_filter1d, 'nearest' edges) as the CPU's running sum:
   n samples at src[k * stride], window `size`; out[k * stride] = the mean, stored per mode
   (0: as is; 1: rounded to float; 2: integer pixels, integer sums and truncated means). */
DEVICE_FN REAL box_at(GLOBAL const REAL* src, int k, int n, int stride) {
    return src[(size_t)clampi(k, 0, n - 1) * stride];
}

/* The background along columns for float frames (mode 0 or 1): one work item per
   (column, frame). */
KERNEL locate_box_cols(GLOBAL const REAL* RESTRICT src, GLOBAL REAL* RESTRICT dst,
                       const uint h, const uint w, const uint nf, const uint size,
                       const uint mode) {
    size_t x = GID(0);
    size_t f = GID(1);
    if (x >= w || f >= nf) return;
    GLOBAL const REAL* s = src + f * h * w + x;
    GLOBAL REAL* o = dst + f * h * w + x;
    int n = (int)h;
    int sw = (int)w;
    int s1 = (int)size / 2;
    REAL fs = (REAL)size;
    REAL t = (REAL)0;
    for (int k = 0; k < (int)size; ++k) t = ADD_RN(t, box_at(s, k - s1, n, sw));
    REAL m = DIV_RN(t, fs);
    o[0] = mode == 1 ? (REAL)(float)m : m;
    for (int k = 1; k < n; ++k) {
        t = ADD_RN(t, SUB_RN(box_at(s, k + (int)size - 1 - s1, n, sw), box_at(s, k - 1 - s1, n, sw)));
        m = DIV_RN(t, fs);
        o[(size_t)k * w] = mode == 1 ? (REAL)(float)m : m;
    }
}

/* The background along columns for integer frames: one work item per pixel, the exact
   integer window sum (the CPU's running sum of integers has the same value), truncated mean. */
KERNEL locate_box_int_y(GLOBAL const REAL* RESTRICT src, GLOBAL REAL* RESTRICT dst,
                        const uint h, const uint w, const uint nf, const uint size) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t f = GID(2);
    if (x >= w || y >= h || f >= nf) return;
    GLOBAL const REAL* s = src + f * h * w + x;
    int s1 = (int)size / 2;
    uint t = 0;
    for (int k = 0; k < (int)size; ++k) {
        t += (uint)s[(size_t)clampi((int)y - s1 + k, 0, (int)h - 1) * w];
    }
    dst[f * h * w + y * w + x] = (REAL)(t / size);
}

/* The background along rows and the bandpass: one work item per (row, frame).
   pre == 1: bp = low - bg, kept where >= threshold, else 0; bg is the boxcar of src (the
   column pass) or, with mode 3, src itself (smoothing size 1). pre == 0: bp = src.
   rowmax[f * h + y] = the row's maximum of bp. */
KERNEL locate_box_rows(GLOBAL const REAL* RESTRICT src, GLOBAL const REAL* RESTRICT low,
                       GLOBAL REAL* RESTRICT bp, GLOBAL REAL* RESTRICT rowmax,
                       GLOBAL const REAL* RESTRICT prm, const uint h, const uint w,
                       const uint nf, const uint size, const uint mode, const uint pre) {
    size_t y = GID(0);
    size_t f = GID(1);
    if (y >= h || f >= nf) return;
    size_t row = f * h * w + y * w;
    GLOBAL const REAL* s = src + row;
    GLOBAL const REAL* l = low + row;
    GLOBAL REAL* o = bp + row;
    REAL thr = prm[P_THR];
    REAL mx = -(REAL)1 / (REAL)0;
    int n = (int)w;
    int s1 = (int)size / 2;
    if (pre == 0 || mode == 3) {
        for (int k = 0; k < n; ++k) {
            REAL v = s[k];
            if (pre != 0) {
                v = SUB_RN(l[k], v);
                v = v >= thr ? v : (REAL)0;
            }
            o[k] = v;
            mx = v > mx ? v : mx;
        }
        rowmax[f * h + y] = mx;
        return;
    }
    if (mode == 2) {
        uint t = 0;
        for (int k = 0; k < (int)size; ++k) t += (uint)box_at(s, k - s1, n, 1);
        for (int k = 0; k < n; ++k) {
            if (k > 0) t = t + (uint)box_at(s, k + (int)size - 1 - s1, n, 1) - (uint)box_at(s, k - 1 - s1, n, 1);
            REAL v = SUB_RN(l[k], (REAL)(t / size));
            v = v >= thr ? v : (REAL)0;
            o[k] = v;
            mx = v > mx ? v : mx;
        }
    } else {
        REAL fs = (REAL)size;
        REAL t = (REAL)0;
        for (int k = 0; k < (int)size; ++k) t = ADD_RN(t, box_at(s, k - s1, n, 1));
        for (int k = 0; k < n; ++k) {
            if (k > 0) t = ADD_RN(t, SUB_RN(box_at(s, k + (int)size - 1 - s1, n, 1), box_at(s, k - 1 - s1, n, 1)));
            REAL m = DIV_RN(t, fs);
            if (mode == 1) m = (REAL)(float)m;
            REAL v = SUB_RN(l[k], m);
            v = v >= thr ? v : (REAL)0;
            o[k] = v;
            mx = v > mx ? v : mx;
        }
    }
    rowmax[f * h + y] = mx;
}

/* The frame's maximum and the rescale factor: scale[f] = int_max / max when max is positive
   and finite, else 1; identity != 0 (integer frames without preprocessing): 1. */
KERNEL locate_scale(GLOBAL const REAL* RESTRICT rowmax, GLOBAL REAL* RESTRICT scale,
                    GLOBAL const REAL* RESTRICT prm, const uint h, const uint nf,
                    const uint identity) {
    size_t f = GID(0);
    if (f >= nf) return;
    REAL mx = -(REAL)1 / (REAL)0;
    for (uint y = 0; y < h; ++y) {
        REAL v = rowmax[f * h + y];
        mx = v > mx ? v : mx;
    }
    REAL finite = SUB_RN(mx, mx);
    scale[f] = (identity == 0 && mx > (REAL)0 && finite == (REAL)0) ? DIV_RN(prm[P_INTMAX], mx)
                                                                    : (REAL)1;
}

/* img = trunc(min(scale * max(bp, 0), int_max)) (identity: the raw integer pixel), and the
   histogram of the non-zero values (nbins = int_max + 1 per frame). */
KERNEL locate_rescale(GLOBAL const REAL* RESTRICT bp, GLOBAL const REAL* RESTRICT scale,
                      GLOBAL const REAL* RESTRICT prm, GLOBAL uint* RESTRICT img,
                      GLOBAL int* hist, const uint plane, const uint nf, const uint nbins,
                      const uint identity) {
    size_t i = GID(0);
    size_t f = GID(1);
    if (i >= plane || f >= nf) return;
    REAL v = bp[f * plane + i];
    uint q;
    if (identity) {
        q = (uint)v;
    } else {
        REAL a = v > (REAL)0 ? v : (REAL)0;
        REAL s = MUL_RN(scale[f], a);
        REAL top = prm[P_INTMAX];
        s = s < top ? s : top;
        q = (uint)(int)s;
    }
    img[f * plane + i] = q;
    if (q != 0) ATOMIC_ADD_INT(hist + f * (size_t)nbins + q, 1);
}

/* NumPy percentile(img[img != 0], q) with linear interpolation, from the histogram; vmin[f] =
   the smallest integer above it (a maximum must satisfy v > percentile), or 0xFFFFFFFF when
   every pixel is 0 (no feature). */
KERNEL locate_percentile(GLOBAL const int* RESTRICT hist, GLOBAL const REAL* RESTRICT prm,
                         GLOBAL uint* RESTRICT vmin, const uint nbins, const uint nf) {
    size_t f = GID(0);
    if (f >= nf) return;
    GLOBAL const int* hs = hist + f * (size_t)nbins;
    ulong n = 0;
    for (uint v = 1; v < nbins; ++v) n += (ulong)hs[v];
    if (n == 0) {
        vmin[f] = 0xFFFFFFFFu;
        return;
    }
    REAL vi = MUL_RN((REAL)(n - 1), prm[P_Q100]);
    ulong prev = (ulong)vi;
    REAL gamma = SUB_RN(vi, (REAL)prev);
    ulong pi = prev < n - 1 ? prev : n - 1;
    ulong ni = pi + 1 < n - 1 ? pi + 1 : n - 1;
    REAL a = (REAL)(nbins - 1);
    REAL b = a;
    int found_a = 0;
    ulong acc = 0;
    for (uint v = 1; v < nbins; ++v) {
        acc += (ulong)hs[v];
        if (!found_a && acc > pi) {
            a = (REAL)v;
            found_a = 1;
        }
        if (acc > ni) {
            b = (REAL)v;
            break;
        }
    }
    REAL diff = SUB_RN(b, a);
    REAL thr = gamma >= (REAL)0.5 ? SUB_RN(b, MUL_RN(diff, SUB_RN((REAL)1, gamma)))
                                  : ADD_RN(a, MUL_RN(diff, gamma));
    vmin[f] = (uint)thr + 1u;
}

/* Grey dilation, first half: the maximum along each row over x - lo ..= x + hi (zero
   padding: values are non-negative, so the part outside the frame is ignored). */
KERNEL locate_dilate_x(GLOBAL const uint* RESTRICT img, GLOBAL uint* RESTRICT dil,
                       const uint lo, const uint hi, const uint h, const uint w,
                       const uint nf) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t f = GID(2);
    if (x >= w || y >= h || f >= nf) return;
    GLOBAL const uint* row = img + f * h * w + y * w;
    int a = (int)x - (int)lo;
    int b = (int)x + (int)hi;
    a = a < 0 ? 0 : a;
    b = b > (int)w - 1 ? (int)w - 1 : b;
    uint m = 0;
    for (int k = a; k <= b; ++k) m = row[k] > m ? row[k] : m;
    dil[f * h * w + y * w + x] = m;
}

/* Pixels outside the margin equal to the grey dilation and >= vmin[f]; appended as
   f * h * w + y * w + x through the counter (written only below cap). */
KERNEL locate_maxima(GLOBAL const uint* RESTRICT img, GLOBAL const uint* RESTRICT dil,
                     GLOBAL const uint* RESTRICT vmin, const uint lo, const uint hi,
                     const uint margin, const uint h, const uint w, const uint nf,
                     GLOBAL int* count, GLOBAL uint* RESTRICT cand, const uint cap) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t f = GID(2);
    if (x >= w || y >= h || f >= nf) return;
    if (y < margin || y + margin >= h || x < margin || x + margin >= w) return;
    size_t base = f * h * w;
    uint v = img[base + y * w + x];
    if (v < vmin[f]) return;
    int a = (int)y - (int)lo;
    int b = (int)y + (int)hi;
    a = a < 0 ? 0 : a;
    b = b > (int)h - 1 ? (int)h - 1 : b;
    uint m = 0;
    for (int k = a; k <= b; ++k) {
        uint d = dil[base + (size_t)k * w + x];
        m = d > m ? d : m;
    }
    if (v != m) return;
    int k = ATOMIC_ADD_INT(count, 1);
    if (k < (int)cap) cand[k] = (uint)(base + y * w + x);
}

/* Iterated centre of mass on the circular mask (trackpy's numba engine), then the
   characterisation: out[7k ..] = y, x, mass, size, ecc, signal, raw_mass of candidate k.
   mask[2m], mask[2m + 1]: offsets (i, j) in 0..=2r in raster order; r2[m] the squared radius,
   c2[m], s2[m] the cosine and sine of twice the angle (computed on the host). */
KERNEL locate_refine(GLOBAL const uint* RESTRICT img, GLOBAL const REAL* RESTRICT raw,
                     GLOBAL const uint* RESTRICT cand, GLOBAL const uint* RESTRICT mask,
                     GLOBAL const uint* RESTRICT r2, GLOBAL const REAL* RESTRICT c2,
                     GLOBAL const REAL* RESTRICT s2, GLOBAL REAL* RESTRICT out,
                     const uint nmask, const uint r, const uint h, const uint w,
                     const uint ncand, const uint max_iter) {
    size_t k = GID(0);
    if (k >= ncand) return;
    size_t plane = (size_t)h * w;
    size_t c = cand[k];
    size_t f = c / plane;
    size_t yx = c % plane;
    GLOBAL const uint* im = img + f * plane;
    GLOBAL const REAL* rw = raw + f * plane;
    int cy = (int)(yx / w);
    int cx = (int)(yx % w);
    int ri = (int)r;
    REAL rf = (REAL)r;
    int sy = cy - ri;
    int sx = cx - ri;
    ulong my = 0, mx = 0, m = 0;
    for (uint q = 0; q < nmask; ++q) {
        ulong px = im[(size_t)(sy + (int)mask[2 * q]) * w + (size_t)(sx + (int)mask[2 * q + 1])];
        my += px * mask[2 * q];
        mx += px * mask[2 * q + 1];
        m += px;
    }
    REAL cmy = DIV_RN((REAL)my, (REAL)m);
    REAL cmx = DIV_RN((REAL)mx, (REAL)m);
    REAL py = ADD_RN(SUB_RN(cmy, rf), (REAL)cy);
    REAL pxx = ADD_RN(SUB_RN(cmx, rf), (REAL)cx);
    int zero = m == 0;
    for (uint it = 0; it < max_iter; ++it) {
        if (zero) break;
        REAL oy = SUB_RN(cmy, rf);
        REAL ox = SUB_RN(cmx, rf);
        REAL ay = oy < (REAL)0 ? -oy : oy;
        REAL ax = ox < (REAL)0 ? -ox : ox;
        if (ay < (REAL)0.01 && ax < (REAL)0.01) break;
        if (!(ay > (REAL)0.6 || ax > (REAL)0.6)) break;
        int ny = cy;
        int nx = cx;
        if (oy > (REAL)0.6) ny += 1;
        else if (oy < -(REAL)0.6) ny -= 1;
        if (ox > (REAL)0.6) nx += 1;
        else if (ox < -(REAL)0.6) nx -= 1;
        cy = clampi(ny, ri, (int)h - ri - 1);
        cx = clampi(nx, ri, (int)w - ri - 1);
        sy = cy - ri;
        sx = cx - ri;
        my = 0;
        mx = 0;
        m = 0;
        for (uint q = 0; q < nmask; ++q) {
            ulong px = im[(size_t)(sy + (int)mask[2 * q]) * w + (size_t)(sx + (int)mask[2 * q + 1])];
            my += px * mask[2 * q];
            mx += px * mask[2 * q + 1];
            m += px;
        }
        zero = m == 0;
        cmy = DIV_RN((REAL)my, (REAL)m);
        cmx = DIV_RN((REAL)mx, (REAL)m);
        py = ADD_RN(SUB_RN(cmy, rf), (REAL)cy);
        pxx = ADD_RN(SUB_RN(cmx, rf), (REAL)cx);
    }
    if (zero) {
        py = (REAL)cy;
        pxx = (REAL)cx;
    }
    ulong mass = 0, rg = 0;
    uint sig = 0;
    REAL e1 = (REAL)0, e2 = (REAL)0, raw_mass = (REAL)0;
    for (uint q = 0; q < nmask; ++q) {
        size_t idx = (size_t)(sy + (int)mask[2 * q]) * w + (size_t)(sx + (int)mask[2 * q + 1]);
        uint px = im[idx];
        REAL pr = (REAL)px;
        mass += px;
        rg += (ulong)r2[q] * px;
        e1 = ADD_RN(e1, MUL_RN(c2[q], pr));
        e2 = ADD_RN(e2, MUL_RN(s2[q], pr));
        raw_mass = ADD_RN(raw_mass, rw[idx]);
        sig = px > sig ? px : sig;
    }
    REAL centre = (REAL)im[(size_t)(sy + ri) * w + (size_t)(sx + ri)];
    REAL fm = (REAL)mass;
    REAL size = mass > 0 ? SQRT_RN(DIV_RN((REAL)rg, fm)) : (REAL)0;
    REAL ecc = DIV_RN(SQRT_RN(ADD_RN(MUL_RN(e1, e1), MUL_RN(e2, e2))),
                      ADD_RN(SUB_RN(fm, centre), (REAL)1e-6));
    GLOBAL REAL* o = out + 7 * k;
    o[0] = py;
    o[1] = pxx;
    o[2] = fm;
    o[3] = size;
    o[4] = ecc;
    o[5] = (REAL)sig;
    o[6] = raw_mass;
}

/* Distance along the row to the nearest non-zero pixel of img, capped at r + 1. */
KERNEL locate_row_dist(GLOBAL const uint* RESTRICT img, GLOBAL uint* RESTRICT dist,
                       const uint r, const uint h, const uint w, const uint nf) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t f = GID(2);
    if (x >= w || y >= h || f >= nf) return;
    GLOBAL const uint* row = img + f * h * w + y * w;
    uint best = r + 1;
    for (uint d = 0; d <= r && d < best; ++d) {
        if ((x >= d && row[x - d] != 0) || (x + d < w && row[x + d] != 0)) best = d;
    }
    dist[f * h * w + y * w + x] = best;
}

/* Whether pixel (y, x) is covered by the mask dilation of the non-zero image: some row offset
   i of the mask (half-width hw[i], -1 when the row is empty) has a non-zero pixel within it. */
DEVICE_FN int covered(GLOBAL const uint* dist, GLOBAL const int* hw, int r, int y, int x,
                      int h, int w) {
    for (int i = 0; i <= 2 * r; ++i) {
        int yy = y + i - r;
        if (hw[i] < 0 || yy < 0 || yy >= h) continue;
        if ((int)dist[(size_t)yy * w + x] <= hw[i]) return 1;
    }
    return 0;
}

/* Per (row, frame) over the uncovered pixels, in raster order: pass 0 flags them (flag[],
   the integer image's buffer) counts them and sums their raw values (rows[3 (f h + y)],
   [+1]); pass 1 sums (v - mean)^2 with the frame's mean stats[4 f + 1] (into [+2]). */
KERNEL locate_noise_rows(GLOBAL const uint* RESTRICT dist, GLOBAL const int* RESTRICT hw,
                         GLOBAL const REAL* RESTRICT raw, GLOBAL const REAL* RESTRICT stats,
                         GLOBAL REAL* RESTRICT rows, GLOBAL uint* RESTRICT flag, const uint r,
                         const uint h, const uint w, const uint nf, const uint pass) {
    size_t y = GID(0);
    size_t f = GID(1);
    if (y >= h || f >= nf) return;
    GLOBAL const uint* ds = dist + f * h * w;
    GLOBAL const REAL* rw = raw + f * h * w + y * w;
    GLOBAL uint* fl = flag + f * h * w + y * w;
    GLOBAL REAL* o = rows + 3 * (f * h + y);
    if (pass == 0) {
        uint n = 0;
        REAL s = (REAL)0;
        for (int x = 0; x < (int)w; ++x) {
            uint c = (uint)covered(ds, hw, (int)r, (int)y, x, (int)h, (int)w);
            fl[x] = c;
            if (c) continue;
            n += 1;
            s = ADD_RN(s, rw[x]);
        }
        o[0] = (REAL)n;
        o[1] = s;
    } else {
        REAL mean = stats[4 * f + 1];
        REAL s = (REAL)0;
        for (int x = 0; x < (int)w; ++x) {
            if (fl[x]) continue;
            REAL d = SUB_RN(rw[x], mean);
            s = ADD_RN(s, MUL_RN(d, d));
        }
        o[2] = s;
    }
}

/* Per frame, the rows' sums in row order: pass 0: stats[4f] = n, [4f + 1] = sum / n (the
   mean), [4f + 3] = sum; pass 1: [4f + 2] = the sum of squared deviations. */
KERNEL locate_noise_frame(GLOBAL const REAL* RESTRICT rows, GLOBAL REAL* RESTRICT stats,
                          const uint h, const uint nf, const uint pass) {
    size_t f = GID(0);
    if (f >= nf) return;
    GLOBAL const REAL* rs = rows + 3 * f * h;
    if (pass == 0) {
        REAL n = (REAL)0;
        REAL s = (REAL)0;
        for (uint y = 0; y < h; ++y) {
            n = ADD_RN(n, rs[3 * y]);
            s = ADD_RN(s, rs[3 * y + 1]);
        }
        stats[4 * f] = n;
        stats[4 * f + 1] = DIV_RN(s, n);
        stats[4 * f + 3] = s;
    } else {
        REAL s = (REAL)0;
        for (uint y = 0; y < h; ++y) s = ADD_RN(s, rs[3 * y + 2]);
        stats[4 * f + 2] = s;
    }
}
"#;
