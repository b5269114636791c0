
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

/* One multiply-add of a LoG pass, acc + x * w: rounded twice (the CPU's order: exact with ACC =
   double), or with -DPASS_FMA=1 (the knob ARRAYBRIDGE_DETECT_PASS_FMA) fused, rounded once: the
   certified search's float32 passes only, whose error bound holds either way
   (blob_log/certified.rs). */
#ifndef PASS_FMA
#define PASS_FMA 0
#endif
#if PASS_FMA && ACC_DOUBLE
#error "PASS_FMA is for the float32 passes of the certified search"
#endif
#if PASS_FMA
#if defined(__CUDACC__)
#define MAC(acc, x, w) __fmaf_rn((x), (w), (acc))
#else
#define MAC(acc, x, w) fma((x), (w), (acc))
#endif
#else
#define MAC(acc, x, w) ADD_RN((acc), MUL_RN((x), (w)))
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
/* -DLOG_X_INTERIOR=1 (the knob ARRAYBRIDGE_DETECT_X_INTERIOR, the pipeline's default): with one
   column per work-item too, log_pass_x takes the sliding-window path (no edge handling) where
   the column's taps are inside the row; the same operations in the same order as pass_x_one. */
#ifndef LOG_X_INTERIOR
#define LOG_X_INTERIOR 1
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
        s2 = MAC(s2, t, g2[j]);
        s0 = MAC(s0, t, g0[j]);
    }
    *s2out = s2;
    *s0out = s0;
}

/* log_pass_y's sliding window: the g2 and g0 passes along the column at col (rows 0 ..
   LOG_ROWS - 1 of it, every tap inside the frame; rows lw apart) into s2[k], s0[k], two loads
   a tap for all LOG_ROWS outputs (up[k] = row k - j, dn[k] = row k + j), each converted to ACC
   once; for each output the centre tap, then the mirrored pairs from the outermost in. */
DEVICE_FN void y_window(GLOBAL const REAL* RESTRICT col, long lw, GLOBAL const ACC* RESTRICT g0,
                        GLOBAL const ACC* RESTRICT g2, int r, ACC* s2, ACC* s0) {
    ACC up[LOG_ROWS], dn[LOG_ROWS];
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
            s2[k] = MAC(s2[k], t, t2);
            s0[k] = MAC(s0[k], t, t0);
        }
        if (j > 1) {
            for (int k = 0; k + 1 < LOG_ROWS; ++k) up[k] = up[k + 1];
            up[LOG_ROWS - 1] = (ACC)col[(LOG_ROWS - j) * lw];
            for (int k = LOG_ROWS - 1; k > 0; --k) dn[k] = dn[k - 1];
            dn[0] = (ACC)col[(j - 1) * lw];
        }
    }
}

/* log_pass_x's sliding window, for N consecutive outputs of a row whose taps are all inside it:
   ly[k] = corr_x(g0, p2)[k], lx[k] = corr_x(g2, p0)[k] (centre tap, then the mirrored pairs from
   the outermost in), four loads a tap for the N outputs. One definition per address space of
   the rows (OpenCL 1.2 has no generic one): x_window_global (log_pass_x, N = LOG_COLS),
   x_window_local (log_pass_block, N = BLOCK_COLS). */
#define X_WINDOW_FN(NAME, AS, N)                                                              \
DEVICE_FN void NAME(AS const REAL* p2, AS const REAL* p0, GLOBAL const ACC* RESTRICT g0,     \
                    GLOBAL const ACC* RESTRICT g2, int r, ACC* ly, ACC* lx) {                \
    ACC u2[N], d2[N], u0[N], d0[N];                                                          \
    for (int k = 0; k < N; ++k) {                                                            \
        ly[k] = MUL_RN((ACC)p2[k], g0[0]);                                                   \
        lx[k] = MUL_RN((ACC)p0[k], g2[0]);                                                   \
        u2[k] = (ACC)p2[k - r];                                                              \
        d2[k] = (ACC)p2[k + r];                                                              \
        u0[k] = (ACC)p0[k - r];                                                              \
        d0[k] = (ACC)p0[k + r];                                                              \
    }                                                                                        \
    for (int j = r; j >= 1; --j) {                                                           \
        ACC t0 = g0[j];                                                                      \
        ACC t2 = g2[j];                                                                      \
        for (int k = 0; k < N; ++k) {                                                        \
            ly[k] = MAC(ly[k], ADD_RN(u2[k], d2[k]), t0);                                    \
            lx[k] = MAC(lx[k], ADD_RN(u0[k], d0[k]), t2);                                    \
        }                                                                                    \
        if (j > 1) {                                                                         \
            for (int k = 0; k + 1 < N; ++k) {                                                \
                u2[k] = u2[k + 1];                                                           \
                u0[k] = u0[k + 1];                                                           \
            }                                                                                \
            u2[N - 1] = (ACC)p2[N - j];                                                      \
            u0[N - 1] = (ACC)p0[N - j];                                                      \
            for (int k = N - 1; k > 0; --k) {                                                \
                d2[k] = d2[k - 1];                                                           \
                d0[k] = d0[k - 1];                                                           \
            }                                                                                \
            d2[0] = (ACC)p2[j - 1];                                                          \
            d0[0] = (ACC)p0[j - 1];                                                          \
        }                                                                                    \
    }                                                                                        \
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
        ACC s2[LOG_ROWS], s0[LOG_ROWS];
        y_window(im + y0 * w + x, (long)w, g0, g2, r, s2, s0);
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
        ly = MAC(ly, ADD_RN((ACC)r2[lft], (ACC)r2[rgt]), g0[j]);
        lx = MAC(lx, ADD_RN((ACC)r0[lft], (ACC)r0[rgt]), g2[j]);
    }
    REAL lyy = (REAL)ly;
    REAL lxx = (REAL)lx;
    REAL sum = lyy + lxx;
    return (-sum) * sig2;
}

X_WINDOW_FN(x_window_global, GLOBAL, LOG_COLS)

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
#if LOG_COLS > 1 || LOG_X_INTERIOR
    if ((int)x0 >= r && (long)x0 + (LOG_COLS - 1) + r < (long)w) {
        GLOBAL const REAL* p2 = r2 + x0;
        GLOBAL const REAL* p0 = r0 + x0;
        ACC ly[LOG_COLS], lx[LOG_COLS];
        x_window_global(p2, p0, g0, g2, r, ly, lx);
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

/* The regions whose extrema the fused passes (log_pass_tile, log_pass_block) fold, as build
   options (divisions by constants): REGION_ROWS rows by REGION_COLS columns; 0: the two passes
   (cube_minmax's partials are not regions). REGION_DIV is REGION_ROWS, or 1 where it is 0 (the
   kernels compile whichever pass runs). */
#ifndef REGION_ROWS
#define REGION_ROWS 0
#endif
#ifndef REGION_COLS
#define REGION_COLS 1
#endif
#define REGION_DIV (REGION_ROWS ? REGION_ROWS : 1)

/* The index of the (min, max) pair in part of the region holding voxel (y, x) of plane bs
   (frame * ns + scale): ((frame * ns + scale) * ry + y / REGION_ROWS) * rx + x / REGION_COLS
   with ry, rx the regions down and across a frame. */
DEVICE_FN size_t region_at(size_t bs, uint y, uint x, uint h, uint w) {
    uint ry = (h + REGION_DIV - 1) / REGION_DIV;
    uint rx = (w + REGION_COLS - 1) / REGION_COLS;
    return (bs * ry + y / REGION_DIV) * rx + x / REGION_COLS;
}

/* The extrema of a fused pass's regions, REGION_ROWS by REGION_COLS voxels: each of the
   lx * ly work items of the group (t = LID(0) + lx * LID(1)) gives lo[q], hi[q], the extrema of
   its outputs in row part q (of parts: rows y0 + q * REGION_ROWS ..); the region of row part q
   and column strip sx (strip work items across, its columns from x0 + sx * REGION_COLS) is
   folded in order by work item q * (lx / strip) + sx out of local memory (2 * parts * lx * ly
   values at tile, free once every work item has passed the barrier this begins with) and
   written at region_at's index, which the thresholds and the peaks read, where the region
   starts inside the frame. Every work item calls it (barriers). */
DEVICE_FN void fold_regions(LOCAL_PTR REAL* tile, const REAL* lo, const REAL* hi, uint parts,
                            uint strip, uint lx, uint ly, uint y0, uint x0, uint bs, uint h,
                            uint w, REAL inf, GLOBAL REAL* RESTRICT part) {
    uint t = (uint)LID(0) + lx * (uint)LID(1);
    BARRIER();
    for (uint q = 0; q < parts; ++q) {
        tile[2 * (t * parts + q)] = lo[q];
        tile[2 * (t * parts + q) + 1] = hi[q];
    }
    BARRIER();
    uint strips = lx / strip;
    if (t >= parts * strips) return;
    uint q = t / strips;
    uint sx = t % strips;
    uint ry0 = y0 + q * REGION_DIV;
    uint rx0 = x0 + sx * REGION_COLS;
    if (ry0 >= h || rx0 >= w) return;
    REAL a = inf;
    REAL z = -inf;
    for (uint iy = 0; iy < ly; ++iy) {
        for (uint ix = sx * strip; ix < (sx + 1) * strip; ++ix) {
            uint u = 2 * ((ix + lx * iy) * parts + q);
            a = tile[u] < a ? tile[u] : a;
            z = tile[u + 1] > z ? tile[u + 1] : z;
        }
    }
    size_t at = region_at(bs, ry0, rx0, h, w);
    part[2 * at] = a;
    part[2 * at + 1] = z;
}

/* Rows of a tile of log_pass_tile (build option -DTILE_ROWS=n: the knob ARRAYBRIDGE_DETECT_TILE). */
#ifndef TILE_ROWS
#define TILE_ROWS 8
#endif

/* The two passes fused: one work group of TX = LOCAL_SIZE(0) work items computes the cube of a
   tile of TILE_ROWS rows by TX columns of one (frame, scale) plane. First the y pass (g0, g2) of
   the tile's rows over the columns x0 - r .. x0 + TX + r - 1, each column taken at its SciPy
   'reflect' index, rounded to REAL into local memory exactly as log_pass_y stores a2 and a0;
   then the x pass out of local memory, as log_pass_x computes it. The same operations in the same
   order as the two kernels, so the cube is theirs bit for bit, without the two scratch cubes'
   round trip through global memory. The tile's extrema are folded too (as cube_minmax would
   find them: the cube is not read again): part[2 * (b * G + g)] = min, [... + 1] = max, with
   G = ns * tiles_y * tiles_x tiles per frame and g = (s * tiles_y + ty) * tiles_x + tx, for
   frame_thresholds. Launched over (ceil(w / TX) * TX, ceil(h / TILE_ROWS), nb * ns) with local
   (TX, 1, 1) and 2 * TILE_ROWS * (TX + 2 * rmax) REAL of local memory, rmax the largest radius
   of the scales; inf is +infinity. */
KERNEL log_pass_tile(GLOBAL const REAL* RESTRICT img, const uint frame0,
                     GLOBAL const ACC* RESTRICT taps, GLOBAL const uint* RESTRICT meta,
                     GLOBAL const REAL* RESTRICT sigma2, GLOBAL REAL* RESTRICT cube,
                     GLOBAL REAL* RESTRICT part, const uint h, const uint w, const uint ns,
                     const uint rmax, const REAL inf, LOCAL_ARG(REAL, tile)) {
    DYN_LOCAL(REAL, tile);
    size_t tx = LID(0);
    size_t lw = LOCAL_SIZE(0);
    size_t x0 = GROUP_ID(0) * lw;
    size_t y0 = GROUP_ID(1) * TILE_ROWS;
    size_t bs = GID(2);
    uint b = (uint)(bs / ns);
    uint s = (uint)(bs % ns);
    uint off = meta[2 * s];
    int r = (int)meta[2 * s + 1];
    GLOBAL const ACC* g0 = taps + off;
    GLOBAL const ACC* g2 = taps + off + (uint)r + 1;
    GLOBAL const REAL* im = img + (size_t)(frame0 + b) * h * w;
    size_t span = lw + 2 * (size_t)r;
    size_t stride = lw + 2 * (size_t)rmax;
    LOCAL_PTR REAL* l2 = tile;
    LOCAL_PTR REAL* l0 = tile + (size_t)TILE_ROWS * stride;
    for (size_t i = tx; i < (size_t)TILE_ROWS * span; i += lw) {
        size_t ty = i / span;
        size_t c = i % span;
        size_t y = y0 + ty;
        if (y < h) {
            int xr = reflect_index((int)((long)x0 + (long)c - r), (int)w);
            ACC s2, s0;
            if ((int)y >= r && (long)y + r < (long)h) {
                /* the rows of every tap inside the frame: pass_y_one without edge handling */
                GLOBAL const REAL* col = im + y * w + (size_t)xr;
                long lw2 = (long)w;
                ACC cv = (ACC)col[0];
                s2 = MUL_RN(cv, g2[0]);
                s0 = MUL_RN(cv, g0[0]);
                for (int j = r; j >= 1; --j) {
                    ACC t = ADD_RN((ACC)col[-j * lw2], (ACC)col[j * lw2]);
                    s2 = MAC(s2, t, g2[j]);
                    s0 = MAC(s0, t, g0[j]);
                }
            } else {
                pass_y_one(im, g0, g2, r, (int)y, h, w, (size_t)xr, &s2, &s0);
            }
            l2[ty * stride + c] = (REAL)s2;
            l0[ty * stride + c] = (REAL)s0;
        }
    }
    BARRIER();
    size_t x = x0 + tx;
    REAL sig2 = sigma2[s];
    REAL lo = inf;
    REAL hi = -inf;
    for (size_t ty = 0; ty < TILE_ROWS && y0 + ty < h && x < w; ++ty) {
        LOCAL_PTR const REAL* p2 = l2 + ty * stride + tx + (size_t)r;
        LOCAL_PTR const REAL* p0 = l0 + ty * stride + tx + (size_t)r;
        ACC ly = MUL_RN((ACC)p2[0], g0[0]);
        ACC lx = MUL_RN((ACC)p0[0], g2[0]);
        for (int j = r; j >= 1; --j) {
            ly = MAC(ly, ADD_RN((ACC)p2[-j], (ACC)p2[j]), g0[j]);
            lx = MAC(lx, ADD_RN((ACC)p0[-j], (ACC)p0[j]), g2[j]);
        }
        REAL lyy = (REAL)ly;
        REAL lxx = (REAL)lx;
        REAL sum = lyy + lxx;
        REAL v = (-sum) * sig2;
        cube[bs * h * w + (y0 + ty) * w + x] = v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    /* the tile's extrema: one region (REGION_ROWS = TILE_ROWS, REGION_COLS = the group's width) */
    fold_regions(tile, &lo, &hi, 1, (uint)lw, (uint)lw, 1, (uint)y0, (uint)x0, (uint)bs, h, w, inf,
                 part);
}

/* Rows of a block of log_pass_block (build option -DBLOCK_ROWS=n: the knob
   ARRAYBRIDGE_DETECT_BLOCK) and the consecutive columns of one work item in its x pass
   (-DBLOCK_COLS=n: ARRAYBRIDGE_DETECT_BLOCK_COLS; odd, so that the work items of a warp read
   local memory at a stride prime to the banks' count: no bank conflicts). */
#ifndef BLOCK_ROWS
#define BLOCK_ROWS 16
#endif
#ifndef BLOCK_COLS
#define BLOCK_COLS 3
#endif
/* The regions whose extrema log_pass_block folds for the thresholds and the peaks: BLOCK_PARTS
   (1 or 2) row parts of REGION_ROWS rows (BLOCK_ROWS = BLOCK_PARTS * REGION_ROWS), and column
   strips of BLOCK_STRIP work items, REGION_COLS = BLOCK_STRIP * BLOCK_COLS columns: finer than
   the block, so that the peaks skip more of the cube (a 16 × 192 block of a sparse 512² movie
   holds a voxel above the threshold three times in four, an 8 × 48 region about once in four). */
#ifndef BLOCK_PARTS
#define BLOCK_PARTS 1
#endif
#ifndef BLOCK_STRIP
#define BLOCK_STRIP 1
#endif

X_WINDOW_FN(x_window_local, LOCAL_PTR, BLOCK_COLS)

/* The two passes fused, both register-blocked (issue 29: log_pass_x loads four values per tap
   and output, and was half the LoG's kernel time on the H200). One work group of (LX, LY) work
   items computes the cube of a block of BLOCK_ROWS rows by TW = LX * BLOCK_COLS columns of one
   (frame, scale) plane. The y pass first: work item t of the group (t = LID(0) + LX * LID(1))
   takes columns c = t, t + LX * LY, ... of the block's span (its TW columns, or the frame's last
   ones, plus r on either side, each at its SciPy 'reflect' index) and, per column, the block's
   rows in runs of LOG_ROWS with log_pass_y's sliding window (two loads a tap for LOG_ROWS
   outputs), rounded to REAL into local memory exactly as log_pass_y stores a2 and a0. Then the
   x pass out of local memory: work item (i, j) computes columns i * BLOCK_COLS ..
   i * BLOCK_COLS + BLOCK_COLS - 1 of rows j, j + LY, ... with log_pass_x's sliding window (four
   loads a tap for BLOCK_COLS outputs). The same operations in the same order as log_pass_y +
   log_pass_x, so the cube is theirs bit for bit; no scratch cube is written or read. The
   extrema are folded per region of the block (BLOCK_PARTS row parts by LX / BLOCK_STRIP column
   strips: fold_regions) into part. Launched over (blocks_x * LX, blocks_y * LY, nb * ns) with
   local (LX, LY, 1) and 2 * BLOCK_ROWS * (TW + 2 * rmax) REAL of local memory (at least
   2 * BLOCK_PARTS * LX * LY), rmax the largest radius of the scales; inf is +infinity. */
KERNEL log_pass_block(GLOBAL const REAL* RESTRICT img, const uint frame0,
                      GLOBAL const ACC* RESTRICT taps, GLOBAL const uint* RESTRICT meta,
                      GLOBAL const REAL* RESTRICT sigma2, GLOBAL REAL* RESTRICT cube,
                      GLOBAL REAL* RESTRICT part, const uint h, const uint w, const uint ns,
                      const uint rmax, const REAL inf, LOCAL_ARG(REAL, tile)) {
    DYN_LOCAL(REAL, tile);
    /* indices in uint: the host keeps a batch's cube below 2^32 values */
    uint lx = (uint)LOCAL_SIZE(0);
    uint ly = (uint)LOCAL_SIZE(1);
    uint t = (uint)LID(0) + lx * (uint)LID(1);
    uint nt = lx * ly;
    uint tw = lx * BLOCK_COLS;
    uint x0 = (uint)GROUP_ID(0) * tw;
    uint y0 = (uint)GROUP_ID(1) * BLOCK_ROWS;
    uint bs = (uint)GROUP_ID(2);
    uint b = bs / ns;
    uint s = bs % ns;
    uint off = meta[2 * s];
    int r = (int)meta[2 * s + 1];
    GLOBAL const ACC* g0 = taps + off;
    GLOBAL const ACC* g2 = taps + off + (uint)r + 1;
    GLOBAL const REAL* im = img + (size_t)(frame0 + b) * h * w;
    /* the block's columns inside the frame, and its rows */
    uint nx = x0 < w ? (w - x0 < tw ? w - x0 : tw) : 0;
    uint ny = y0 < h ? (h - y0 < BLOCK_ROWS ? h - y0 : BLOCK_ROWS) : 0;
    uint span = nx + 2 * (uint)r;
    uint stride = tw + 2 * rmax;
    LOCAL_PTR REAL* l2 = tile;
    LOCAL_PTR REAL* l0 = tile + BLOCK_ROWS * stride;
    uint runs = (ny + LOG_ROWS - 1) / LOG_ROWS;
    for (uint i = t; i < span * runs; i += nt) {
        uint c = i % span;
        uint ya = y0 + (i / span) * LOG_ROWS;
        uint n = y0 + ny - ya < LOG_ROWS ? y0 + ny - ya : LOG_ROWS;
        int xr = reflect_index((int)((long)x0 + (long)c - r), (int)w);
        LOCAL_PTR REAL* o2 = l2 + (ya - y0) * stride + c;
        LOCAL_PTR REAL* o0 = l0 + (ya - y0) * stride + c;
        if (n == LOG_ROWS && (int)ya >= r && (long)ya + (LOG_ROWS - 1) + r < (long)h) {
            /* log_pass_y's interior block */
            ACC s2[LOG_ROWS], s0[LOG_ROWS];
            y_window(im + ((size_t)ya * w + (uint)xr), (long)w, g0, g2, r, s2, s0);
            for (int k = 0; k < LOG_ROWS; ++k) {
                o2[(uint)k * stride] = (REAL)s2[k];
                o0[(uint)k * stride] = (REAL)s0[k];
            }
        } else {
            for (uint k = 0; k < n; ++k) {
                ACC s2, s0;
                pass_y_one(im, g0, g2, r, (int)(ya + k), h, w, (size_t)xr, &s2, &s0);
                o2[k * stride] = (REAL)s2;
                o0[k * stride] = (REAL)s0;
            }
        }
    }
    BARRIER();
    REAL sig2 = sigma2[s];
    /* the extrema of this work item's outputs in each of the block's row parts */
    REAL lo[BLOCK_PARTS], hi[BLOCK_PARTS];
    for (int q = 0; q < BLOCK_PARTS; ++q) {
        lo[q] = inf;
        hi[q] = -inf;
    }
    uint cx = (uint)LID(0) * BLOCK_COLS;
    for (uint t0 = 0; t0 < ny; t0 += ly) {
        /* a work item past the block's rows or columns computes its first output, stores
           nothing (no branch around the taps' loop: PoCL 3.1 hangs on one here) */
        uint ty = t0 + (uint)LID(1);
        int in = cx < nx && ty < ny;
        {
            LOCAL_PTR const REAL* p2 = l2 + ((in ? ty : 0) * stride + (uint)r + (in ? cx : 0));
            LOCAL_PTR const REAL* p0 = l0 + ((in ? ty : 0) * stride + (uint)r + (in ? cx : 0));
            ACC cy[BLOCK_COLS], cxx[BLOCK_COLS];
            x_window_local(p2, p0, g0, g2, r, cy, cxx);
            uint out = (bs * h + y0 + ty) * w + x0 + cx;
            for (int k = 0; k < BLOCK_COLS; ++k) {
                if (in && cx + (uint)k < nx) {
                    REAL lyy = (REAL)cy[k];
                    REAL lxx = (REAL)cxx[k];
                    REAL sum = lyy + lxx;
                    REAL v = (-sum) * sig2;
                    cube[out + (uint)k] = v;
                    for (int q = 0; q < BLOCK_PARTS; ++q) {
                        if ((uint)q == ty / REGION_DIV) {
                            lo[q] = v < lo[q] ? v : lo[q];
                            hi[q] = v > hi[q] ? v : hi[q];
                        }
                    }
                }
            }
        }
    }
    /* the extrema of the block's regions: BLOCK_PARTS row parts by lx / BLOCK_STRIP strips */
    fold_regions(tile, lo, hi, BLOCK_PARTS, BLOCK_STRIP, lx, ly, y0, x0, bs, h, w, inf, part);
}

/* The work group's (min, max) pairs lo[l], hi[l] (MINMAX_WG of them, one a work item) folded
   into lo[0], hi[0]: a tree of comparisons, each taking the other side only where it is
   smaller (larger), so a NaN is never taken over a number; every work item calls it. */
DEVICE_FN void fold_minmax_local(LOCAL_PTR REAL* lo, LOCAL_PTR REAL* hi, size_t l) {
    BARRIER();
    for (size_t s = MINMAX_WG / 2; s > 0; s >>= 1) {
        if (l < s) {
            lo[l] = lo[l + s] < lo[l] ? lo[l + s] : lo[l];
            hi[l] = hi[l + s] > hi[l] ? hi[l + s] : hi[l];
        }
        BARRIER();
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
    fold_minmax_local(lo, hi, l);
    if (l == 0) {
        part[2 * (b * groups + g)] = lo[0];
        part[2 * (b * groups + g) + 1] = hi[0];
    }
}

/* Each frame's threshold (spec 1.5) from the partial extrema (cube_minmax's, or the fused
   passes' regions), as the CPU computes it in the cube's type: one work group of MINMAX_WG per
   frame folds the frame's groups (min, max) pairs into (lo, hi), each work item from the
   frame's first pair (so a NaN there makes lo or hi NaN, as a fold in order would: NaN pairs
   after it are passed over); a constant (or NaN) cube gets inf (no peak); otherwise thr =
   abs_thr (has_abs) or lo, raised to rel * hi (has_rel) where that is larger. Launched over
   (nb * MINMAX_WG) with local MINMAX_WG. */
KERNEL frame_thresholds(GLOBAL const REAL* RESTRICT part, GLOBAL REAL* RESTRICT thr,
                        const uint groups, const uint has_abs, const REAL abs_thr,
                        const uint has_rel, const REAL rel, const REAL inf) {
    LOCAL REAL lw[MINMAX_WG];
    LOCAL REAL hw[MINMAX_WG];
    size_t l = LID(0);
    size_t b = GROUP_ID(0);
    GLOBAL const REAL* f = part + 2 * (size_t)groups * b;
    REAL lo = f[0];
    REAL hi = f[1];
    for (size_t g = l; g < groups; g += MINMAX_WG) {
        REAL a = f[2 * g];
        REAL z = f[2 * g + 1];
        lo = a < lo ? a : lo;
        hi = z > hi ? z : hi;
    }
    lw[l] = lo;
    hw[l] = hi;
    fold_minmax_local(lw, hw, l);
    if (l != 0) return;
    lo = lw[0];
    hi = hw[0];
    REAL t;
    if (lo == hi || lo != lo || hi != hi) {
        t = inf;
    } else {
        t = has_abs ? abs_thr : lo;
        if (has_rel) {
            REAL r = (REAL)MUL_RN(rel, hi);
            t = r > t ? r : t;
        }
    }
    thr[b] = t;
}

/* One work item's part of a scan for the largest |pixel|: im[i] for i = from, from +
   MINMAX_WG, ... below to, folded into *m; *bad set where one is NaN or infinite. */
DEVICE_FN void absmax_scan(GLOBAL const REAL* im, size_t from, size_t to, REAL inf, REAL* m,
                           int* bad) {
    for (size_t i = from; i < to; i += MINMAX_WG) {
        REAL v = im[i];
        REAL a = v < 0 ? -v : v;
        *bad |= (a != a) | (a == inf);
        *m = a > *m ? a : *m;
    }
}

/* The largest |pixel| of each frame of img (from frame frame0), in groups parts a frame for
   cert_frames (ARRAYBRIDGE_DETECT_SCAN_GROUPS): launched over (groups * MINMAX_WG, nb) with
   local (MINMAX_WG, 1); group g of frame b scans the g-th of groups consecutive slices of the
   frame and writes amax[b * groups + g] = the largest |pixel| there (0 for none), +inf where
   one is NaN or infinite. */
KERNEL frame_absmax(GLOBAL const REAL* RESTRICT img, const uint frame0,
                    GLOBAL REAL* RESTRICT amax, const uint plane, const uint groups,
                    const REAL inf) {
    LOCAL REAL mx[MINMAX_WG];
    size_t l = LID(0);
    size_t g = GROUP_ID(0);
    size_t b = GID(1);
    size_t slice = ((size_t)plane + groups - 1) / groups;
    size_t start = g * slice;
    size_t end = start + slice < (size_t)plane ? start + slice : (size_t)plane;
    GLOBAL const REAL* im = img + ((size_t)frame0 + b) * plane;
    REAL m = 0;
    int bad = 0;
    absmax_scan(im, start + l, end, inf, &m, &bad);
    mx[l] = bad ? inf : m;
    BARRIER();
    for (size_t st = MINMAX_WG / 2; st > 0; st >>= 1) {
        if (l < st) mx[l] = mx[l + st] > mx[l] ? mx[l + st] : mx[l];
        BARRIER();
    }
    if (l == 0) amax[b * groups + g] = mx[0];
}

/* 3x3x3 maxima above thr[frame], 'nearest' edges, spatial border exclusion; appends
   (flat index in the batch cube, value) through the counter; writes only below cap. Where
   REGION_ROWS > 0, part holds the fused passes' extrema of its regions (region_at): a voxel
   whose region's maximum is not above the threshold is not read (none of the region's voxels
   is above it). */
KERNEL log_peaks(GLOBAL const REAL* RESTRICT cube, GLOBAL const REAL* RESTRICT thr,
                 const uint h, const uint w, const uint ns, const uint nb,
                 const uint by, const uint bx, GLOBAL int* count,
                 GLOBAL uint* RESTRICT cand_idx, GLOBAL REAL* RESTRICT cand_val,
                 const uint cap, GLOBAL const REAL* RESTRICT part) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t bs = GID(2);
    if (x >= w || y >= h || bs >= (size_t)nb * ns) return;
    if (y < by || y + by >= h || x < bx || x + bx >= w) return;
    uint b = (uint)(bs / ns);
    int s = (int)(bs % ns);
#if REGION_ROWS
    if (!(part[2 * region_at(bs, (uint)y, (uint)x, h, w) + 1] > thr[b])) return;
#else
    (void)part;
#endif
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
    if (k >= 0 && (uint)k < cap) {
        cand_idx[k] = (uint)o;
        cand_val[k] = v;
    }
}

/* The certified search (issue 29; blob_log/certified.rs, whose DevicePlan and settle_device
   hold the proof): an f32 cube (REAL = ACC = float) searched with a margin e per frame, the
   host settling every decision the margin leaves open with exact float64 voxels.
   cert_frames: one work group of MINMAX_WG per frame of the batch. m = the largest |pixel| of
   the frame's f32 image (+inf where a pixel or a partial extremum is NaN, or a pixel is
   infinite): scanned here, or with scan_groups > 0 folded from frame_absmax's scan_groups
   parts of the frame in amax (the same value), e = e1 * m + e0, the partial extrema (as frame_thresholds reads them) folded in
   parallel into (lo, hi), and thr_c, a lower bound of
   every exact threshold the frame can have, less e: max(abs_thr, rel * (hi - e)) - e, lowered
   by 2^-20 of its magnitude for the roundings. fr[4b .. 4b + 4] = (lo, hi, e, thr_c); thr_c
   = +inf where anything is not finite (the host then computes the frame itself). */
KERNEL cert_frames(GLOBAL const REAL* RESTRICT img, const uint frame0,
                   GLOBAL const REAL* RESTRICT part, GLOBAL REAL* RESTRICT fr,
                   const uint plane, const uint groups, const REAL e1, const REAL e0,
                   const uint has_abs, const REAL abs_thr, const uint has_rel, const REAL rel,
                   const REAL inf, GLOBAL const REAL* RESTRICT amax, const uint scan_groups) {
    LOCAL REAL mx[MINMAX_WG];
    LOCAL REAL lw[MINMAX_WG];
    LOCAL REAL hw[MINMAX_WG];
    size_t l = LID(0);
    size_t b = GROUP_ID(0);
    REAL m = 0;
    int bad = 0;
    if (scan_groups > 0) {
        /* frame_absmax's parts of the frame (+inf where one saw a NaN or an infinity) */
        GLOBAL const REAL* am = amax + (size_t)scan_groups * b;
        for (size_t g = l; g < scan_groups; g += MINMAX_WG) {
            REAL a = am[g];
            bad |= (a != a) | (a == inf);
            m = a > m ? a : m;
        }
    } else {
        absmax_scan(img + ((size_t)frame0 + b) * plane, l, plane, inf, &m, &bad);
    }
    /* the partial extrema, folded by every work item (a NaN makes the frame unsearched) */
    GLOBAL const REAL* f = part + 2 * (size_t)groups * b;
    REAL lo = inf;
    REAL hi = -inf;
    for (size_t g = l; g < groups; g += MINMAX_WG) {
        REAL a = f[2 * g];
        REAL z = f[2 * g + 1];
        bad |= (a != a) | (z != z);
        lo = a < lo ? a : lo;
        hi = z > hi ? z : hi;
    }
    mx[l] = bad ? inf : m;
    lw[l] = lo;
    hw[l] = hi;
    BARRIER();
    for (size_t st = MINMAX_WG / 2; st > 0; st >>= 1) {
        if (l < st) {
            mx[l] = mx[l + st] > mx[l] ? mx[l + st] : mx[l];
            lw[l] = lw[l + st] < lw[l] ? lw[l + st] : lw[l];
            hw[l] = hw[l + st] > hw[l] ? hw[l + st] : hw[l];
        }
        BARRIER();
    }
    if (l != 0) return;
    lo = lw[0];
    hi = hw[0];
    m = mx[0];
    REAL e = e1 * m + e0;
    REAL base = has_abs ? abs_thr : -inf;
    if (has_rel) {
        REAL t = rel * (hi - e);
        base = t > base ? t : base;
    }
    REAL mag = base < 0 ? -base : base;
    REAL t = base - e - mag * (REAL)9.5367431640625e-07;
    /* frames the host cannot certify anyway (blank, or magnitudes beyond 10^+-20: every
       voxel would be a candidate) are not searched */
    int ok = m < inf && e < inf && lo > -inf && hi < inf && lo == lo && hi == hi && t == t &&
             m >= (REAL)0.99e-20 && m <= (REAL)1.01e20;
    fr[4 * b] = lo;
    fr[4 * b + 1] = hi;
    fr[4 * b + 2] = e;
    fr[4 * b + 3] = ok ? t : inf;
}

/* The relaxed search of the f32 cube, one work item per voxel, with the margins of cert_frames
   (fr). Every voxel with v <= lo + e (kind 1) or v >= hi - e (kind 2) may hold the exact cube's
   minimum or maximum: counted per frame in ncount[1 + b] and, while that count is below
   near_cap, appended through ncount[0] as (cube index, kind) to near (written below ncap).
   Outside the spatial border (when peaks), every voxel above thr_c that is within e of the
   largest of its 3x3x3 neighbourhood ('nearest' edges: the neighbours clamped to the cube) may
   be an exact maximum above the threshold: counted per frame in ncount[1 + nb + b] and, while
   that count is below cand_cap, appended through count[0] as (cube index, value, near) below
   cap, bit 9 * (ds + 1) + 3 * (dy + 1) + (dx + 1) of near set where that clamped
   neighbour (never the voxel itself) is within e of the voxel's value or above it. Frames
   with thr_c = +inf are skipped. Where REGION_ROWS > 0, part holds the fused passes' extrema
   of its regions (region_at): a voxel is not read where its region's extrema show that no
   voxel of the region can be either (its minimum above lo + e, its maximum below hi - e and,
   when peaks, not above thr_c). */
KERNEL cert_peaks(GLOBAL const REAL* RESTRICT cube, GLOBAL const REAL* RESTRICT fr,
                  const uint h, const uint w, const uint ns, const uint nb, const uint by,
                  const uint bx, const uint peaks, GLOBAL int* count,
                  GLOBAL uint* RESTRICT cand_idx, GLOBAL REAL* RESTRICT cand_val,
                  GLOBAL uint* RESTRICT cand_near, const uint cap, const uint cand_cap,
                  GLOBAL int* ncount, GLOBAL uint* RESTRICT near, const uint ncap,
                  const uint near_cap,
                  const REAL inf, GLOBAL const REAL* RESTRICT part) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t bs = GID(2);
    if (x >= w || y >= h || bs >= (size_t)nb * ns) return;
    uint b = (uint)(bs / ns);
    int s = (int)(bs % ns);
    REAL lo = fr[4 * b];
    REAL hi = fr[4 * b + 1];
    REAL e = fr[4 * b + 2];
    REAL thr = fr[4 * b + 3];
    if (!(thr < inf)) return;
#if REGION_ROWS
    {
        size_t at = region_at(bs, (uint)y, (uint)x, h, w);
        REAL rlo = part[2 * at];
        REAL rhi = part[2 * at + 1];
        if (!(rlo <= lo + e) && !(rhi >= hi - e) && !(peaks && rhi > thr)) return;
    }
#else
    (void)part;
#endif
    size_t plane = (size_t)h * w;
    size_t o = bs * plane + y * w + x;
    REAL v = cube[o];
    uint kind = (v <= lo + e ? 1u : 0u) | (v >= hi - e ? 2u : 0u);
    if (kind != 0) {
        int kf = ATOMIC_ADD_INT(&ncount[1 + b], 1);
        if (kf >= 0 && (uint)kf < near_cap) {
            int k = ATOMIC_ADD_INT(&ncount[0], 1);
            if (k >= 0 && (uint)k < ncap) {
                near[2 * (size_t)k] = (uint)o;
                near[2 * (size_t)k + 1] = kind;
            }
        }
    }
    if (!peaks || y < by || y + by >= h || x < bx || x + bx >= w) return;
    if (!(v > thr)) return;
    REAL ve = v + e;
    uint bits = 0;
    for (int a = 0; a < 3; ++a) {
        int sn = s + a - 1;
        sn = sn < 0 ? 0 : (sn >= (int)ns ? (int)ns - 1 : sn);
        GLOBAL const REAL* pl = cube + ((size_t)b * ns + (size_t)sn) * plane;
        for (int c = 0; c < 3; ++c) {
            int yn = (int)y + c - 1;
            yn = yn < 0 ? 0 : (yn >= (int)h ? (int)h - 1 : yn);
            for (int d = 0; d < 3; ++d) {
                int xn = (int)x + d - 1;
                xn = xn < 0 ? 0 : (xn >= (int)w ? (int)w - 1 : xn);
                if (sn == s && yn == (int)y && xn == (int)x) continue;
                REAL q = pl[(size_t)yn * w + (size_t)xn];
                if (q > ve) return;
                if (q + e > v) bits |= 1u << (9 * a + 3 * c + d);
            }
        }
    }
    int kf = ATOMIC_ADD_INT(&ncount[1 + nb + b], 1);
    if (kf < 0 || (uint)kf >= cand_cap) return;
    int k = ATOMIC_ADD_INT(count, 1);
    if (k >= 0 && (uint)k < cap) {
        cand_idx[k] = (uint)o;
        cand_val[k] = v;
        cand_near[k] = bits;
    }
}

/* Volumes: the n-D scale space of blob_log (blob_log/nd/laplace.rs on the device). One
   correlation pass with the symmetric kernel taps[0..=r] along one axis of a C-order array seen
   as (outer, len, inner): SciPy 'reflect' edges, the centre tap, then the mirrored pairs from the
   outermost inwards, summed in ACC (the CPU's order; contraction off). mode 0 stores the sum
   rounded to REAL; mode 1 adds the rounded sum to dst in REAL (generic_laplace's `output +=`).
   One work item per output; n = outer * len * inner. */
KERNEL nd_pass(GLOBAL const REAL* RESTRICT src, GLOBAL REAL* RESTRICT dst,
               GLOBAL const ACC* RESTRICT taps, const uint r, const uint len, const uint inner,
               const ulong n, const uint mode) {
    size_t i = GID(0);
    if (i >= n) return;
    size_t k = i % inner;
    size_t rest = i / inner;
    int t = (int)(rest % len);
    size_t base = (rest / len) * (size_t)len * inner + k;
    ACC a = MUL_RN((ACC)src[base + (size_t)t * inner], taps[0]);
    for (int j = (int)r; j >= 1; --j) {
        ACC u = (ACC)src[base + (size_t)reflect_index(t - j, (int)len) * inner];
        ACC d = (ACC)src[base + (size_t)reflect_index(t + j, (int)len) * inner];
        a = ADD_RN(a, MUL_RN(ADD_RN(u, d), taps[j]));
    }
    if (mode == 0) {
        dst[i] = (REAL)a;
    } else {
        dst[i] = dst[i] + (REAL)a;
    }
}

/* Volumes: a plane of the cube times -scale (`-L * mean(sigma)**2`; the negation is exact). */
KERNEL nd_scale(GLOBAL REAL* RESTRICT plane, const REAL scale, const ulong n) {
    size_t i = GID(0);
    if (i >= n) return;
    plane[i] = -plane[i] * scale;
}
