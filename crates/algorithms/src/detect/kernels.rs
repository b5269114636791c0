//! Portable device kernels of the LoG blob detector (one source for OpenCL and CUDA).
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

use bridge_core::kernel::KernelSource;

/// Build options: float32 cube, passes accumulated in float64 (the default where the device has
/// doubles).
pub const OPTS_F32_ACC64: &[&str] = &["-DREAL=float", "-DACC=double", "-DACC_DOUBLE=1"];
/// Build options: float32 cube and float32 accumulation (devices without doubles).
pub const OPTS_F32_ACC32: &[&str] = &["-DREAL=float", "-DACC=float", "-DACC_DOUBLE=0"];
/// Build options: float64 cube (matches the CPU's f64 working type bit for bit).
pub const OPTS_F64: &[&str] = &["-DREAL=double", "-DACC=double", "-DACC_DOUBLE=1"];

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
    option_sets: &[OPTS_F32_ACC64, OPTS_F32_ACC32, OPTS_F64],
};

/// Every kernel source of the detection module (each is compiled through NVRTC in CI).
pub const ALL: &[KernelSource] = &[BLOB_LOG];

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

/* meta[2s] = offset of scale s in taps (g0 half, then g2 half), meta[2s+1] = radius r. */
KERNEL log_pass_y(GLOBAL const REAL* RESTRICT img, const uint frame0,
                  GLOBAL const ACC* RESTRICT taps, GLOBAL const uint* RESTRICT meta,
                  GLOBAL REAL* RESTRICT a2, GLOBAL REAL* RESTRICT a0,
                  const uint h, const uint w, const uint ns, const uint nb) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t bs = GID(2);
    if (x >= w || y >= h || bs >= (size_t)nb * ns) return;
    uint b = (uint)(bs / ns);
    uint s = (uint)(bs % ns);
    uint off = meta[2 * s];
    int r = (int)meta[2 * s + 1];
    GLOBAL const ACC* g0 = taps + off;
    GLOBAL const ACC* g2 = taps + off + (uint)r + 1;
    GLOBAL const REAL* im = img + (size_t)(frame0 + b) * h * w;
    ACC c = (ACC)im[y * w + x];
    ACC s2 = MUL_RN(c, g2[0]);
    ACC s0 = MUL_RN(c, g0[0]);
    if ((int)y >= r && (int)y + r < (int)h) {
        /* interior rows (uniform over a work group): no boundary handling */
        GLOBAL const REAL* col = im + y * w + x;
        for (int j = r; j >= 1; --j) {
            size_t dj = (size_t)j * w;
            ACC t = ADD_RN((ACC)col[-(long)dj], (ACC)col[dj]);
            s2 = ADD_RN(s2, MUL_RN(t, g2[j]));
            s0 = ADD_RN(s0, MUL_RN(t, g0[j]));
        }
    } else {
        for (int j = r; j >= 1; --j) {
            int u = reflect_index((int)y - j, (int)h);
            int d = reflect_index((int)y + j, (int)h);
            ACC t = ADD_RN((ACC)im[(size_t)u * w + x], (ACC)im[(size_t)d * w + x]);
            s2 = ADD_RN(s2, MUL_RN(t, g2[j]));
            s0 = ADD_RN(s0, MUL_RN(t, g0[j]));
        }
    }
    size_t o = bs * h * w + y * w + x;
    a2[o] = (REAL)s2;
    a0[o] = (REAL)s0;
}

/* cube = -(REAL(corr_x(g0, a2)) + REAL(corr_x(g2, a0))) * sigma2[s] */
KERNEL log_pass_x(GLOBAL const REAL* RESTRICT a2, GLOBAL const REAL* RESTRICT a0,
                  GLOBAL const ACC* RESTRICT taps, GLOBAL const uint* RESTRICT meta,
                  GLOBAL const REAL* RESTRICT sigma2, GLOBAL REAL* RESTRICT cube,
                  const uint h, const uint w, const uint ns, const uint nb) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t bs = GID(2);
    if (x >= w || y >= h || bs >= (size_t)nb * ns) return;
    uint s = (uint)(bs % ns);
    uint off = meta[2 * s];
    int r = (int)meta[2 * s + 1];
    GLOBAL const ACC* g0 = taps + off;
    GLOBAL const ACC* g2 = taps + off + (uint)r + 1;
    size_t row = bs * h * w + y * w;
    GLOBAL const REAL* r2 = a2 + row;
    GLOBAL const REAL* r0 = a0 + row;
    ACC ly = MUL_RN((ACC)r2[x], g0[0]);
    ACC lx = MUL_RN((ACC)r0[x], g2[0]);
    int near = r <= (int)w;
    for (int j = r; j >= 1; --j) {
        int lft = near ? reflect_near((int)x - j, (int)w) : reflect_index((int)x - j, (int)w);
        int rgt = near ? reflect_near((int)x + j, (int)w) : reflect_index((int)x + j, (int)w);
        ly = ADD_RN(ly, MUL_RN(ADD_RN((ACC)r2[lft], (ACC)r2[rgt]), g0[j]));
        lx = ADD_RN(lx, MUL_RN(ADD_RN((ACC)r0[lft], (ACC)r0[rgt]), g2[j]));
    }
    REAL lyy = (REAL)ly;
    REAL lxx = (REAL)lx;
    REAL sum = lyy + lxx;
    cube[row + x] = (-sum) * sigma2[s];
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
