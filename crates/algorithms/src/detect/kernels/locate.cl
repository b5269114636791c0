
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
#define PCT_WG 256
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

/* locate_box_rows one work item per pixel (x, y, f), where the row's boxcar is exact in any
   order: integer frames (mode 2: the integer window sum, the value of the CPU's running sum of
   integers, truncated mean), no boxcar (mode 3) or no preprocessing (pre == 0). Neighbouring
   work items read neighbouring pixels; the rows' maxima come from locate_row_max. */
KERNEL locate_box_rows_px(GLOBAL const REAL* RESTRICT src, GLOBAL const REAL* RESTRICT low,
                          GLOBAL REAL* RESTRICT bp, GLOBAL const REAL* RESTRICT prm,
                          const uint h, const uint w, const uint nf, const uint size,
                          const uint mode, const uint pre) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t f = GID(2);
    if (x >= w || y >= h || f >= nf) return;
    size_t row = f * h * w + y * w;
    GLOBAL const REAL* s = src + row;
    REAL v = s[x];
    if (pre != 0) {
        if (mode == 2) {
            int s1 = (int)size / 2;
            uint t = 0;
            for (int k = 0; k < (int)size; ++k) t += (uint)box_at(s, (int)x - s1 + k, (int)w, 1);
            v = (REAL)(t / size);
        }
        v = SUB_RN(low[row + x], v);
        v = v >= prm[P_THR] ? v : (REAL)0;
    }
    bp[row + x] = v;
}

/* rowmax[g] = the maximum of bp over row g (of all frames' rows), as locate_box_rows computes
   it (a NaN is never taken), one work group per row; LOCAL_SIZE(0) a power of two. The maximum
   does not depend on the order (up to the sign of a zero maximum, which locate_scale does not
   see: it only takes a positive maximum). */
KERNEL locate_row_max(GLOBAL const REAL* RESTRICT bp, GLOBAL REAL* RESTRICT rowmax,
                      const uint w, const uint rows, LOCAL_ARG(REAL, red)) {
    DYN_LOCAL(REAL, red);
    size_t g = GROUP_ID(0);
    uint tid = (uint)LID(0);
    uint nt = (uint)LOCAL_SIZE(0);
    if (g >= rows) return; /* uniform per group */
    GLOBAL const REAL* r = bp + g * w;
    REAL mx = -(REAL)1 / (REAL)0;
    for (uint x = tid; x < w; x += nt) {
        REAL v = r[x];
        mx = v > mx ? v : mx;
    }
    red[tid] = mx;
    BARRIER();
    for (uint span = nt / 2; span > 0; span >>= 1) {
        if (tid < span) {
            REAL o = red[tid + span];
            red[tid] = o > red[tid] ? o : red[tid];
        }
        BARRIER();
    }
    if (tid == 0) rowmax[g] = red[0];
}

/* Work items of the per-frame kernels locate_scale and locate_noise_frame: one work group of
   FRAME_WG a frame (their loads coalesced and in flight together, not one row after the other
   in one work item). */
#define FRAME_WG 256

/* The frame's maximum and the rescale factor: scale[f] = int_max / max when max is positive
   and finite, else 1; identity != 0 (integer frames without preprocessing): 1. The maximum
   never takes a NaN (v > mx is false), so the work group's fold of the rows' maxima is the
   fold in row order's. Launched over (nf * FRAME_WG) with local FRAME_WG. */
KERNEL locate_scale(GLOBAL const REAL* RESTRICT rowmax, GLOBAL REAL* RESTRICT scale,
                    GLOBAL const REAL* RESTRICT prm, const uint h, const uint identity) {
    LOCAL REAL red[FRAME_WG];
    size_t l = LID(0);
    size_t f = GROUP_ID(0);
    REAL mx = -(REAL)1 / (REAL)0;
    for (size_t y = l; y < h; y += FRAME_WG) {
        REAL v = rowmax[f * h + y];
        mx = v > mx ? v : mx;
    }
    red[l] = mx;
    BARRIER();
    for (size_t st = FRAME_WG / 2; st > 0; st >>= 1) {
        if (l < st) red[l] = red[l + st] > red[l] ? red[l + st] : red[l];
        BARRIER();
    }
    if (l != 0) return;
    mx = red[0];
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
   every pixel is 0 (no feature). One work group of PCT_WG items per frame (global
   (nf * PCT_WG), local (PCT_WG)): item l sums the bins of its run 1 + l * per .. + per, then
   item 0 finds the runs that hold ranks pi and ni from the runs' counts and scans only those
   (at most 2 * per bins instead of 2 * nbins): integer counts, so a and b are the serial
   scan's. */
KERNEL locate_percentile(GLOBAL const int* RESTRICT hist, GLOBAL const REAL* RESTRICT prm,
                         GLOBAL uint* RESTRICT vmin, const uint nbins, const uint nf) {
    LOCAL ulong part[PCT_WG];
    size_t l = LID(0);
    size_t f = GROUP_ID(0);
    if (f >= nf) return; /* the whole group: before any barrier */
    GLOBAL const int* hs = hist + f * (size_t)nbins;
    uint per = (nbins - 1u + PCT_WG - 1u) / PCT_WG;
    uint lo = 1u + (uint)l * per;
    uint hi = lo + per < nbins ? lo + per : nbins;
    ulong s = 0;
    for (uint v = lo; v < hi; ++v) s += (ulong)hs[v];
    part[l] = s;
    BARRIER();
    if (l != 0) return;
    ulong n = 0;
    for (uint k = 0; k < PCT_WG; ++k) n += part[k];
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
    /* the first bin whose cumulative count passes pi, then ni (pi <= ni < n: both exist) */
    ulong before = 0;
    uint k = 0;
    while (before + part[k] <= pi) before += part[k++];
    ulong acc = before;
    uint v = 1u + k * per;
    for (;; ++v) {
        acc += (ulong)hs[v];
        if (acc > pi) break;
    }
    a = (REAL)v;
    if (acc > ni) {
        b = (REAL)v;
    } else {
        /* ni lies further on: in the rest of this run or in a later one */
        uint end = 1u + (k + 1u) * per;
        end = end < nbins ? end : nbins;
        for (++v; v < end; ++v) {
            acc += (ulong)hs[v];
            if (acc > ni) break;
        }
        if (v < end) {
            b = (REAL)v;
        } else {
            before = acc;
            ++k;
            while (before + part[k] <= ni) before += part[k++];
            acc = before;
            for (v = 1u + k * per;; ++v) {
                acc += (ulong)hs[v];
                if (acc > ni) break;
            }
            b = (REAL)v;
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

/* The candidates of locate_refine that can pass minmass, compacted for the read back:
   candidate k (batch-local flat index cand[k], values res[7k ..]) is dropped only when its
   mass in the input's units, res[7k + 2] / scale[f], is below thr, which the host sets a
   little under minmass (it applies minmass exactly to what is kept; a NaN mass is kept). A
   dropped candidate changes nothing else: trackpy's duplicate removal drops the dimmer member
   of each close pair, and every feature that passes minmass is brighter than it. The kept
   ones are in the atomic counter's order (count[0]): the host sorts each frame's candidates
   into raster order anyway. */
KERNEL locate_keep(GLOBAL const uint* RESTRICT cand, GLOBAL const REAL* RESTRICT res,
                   GLOBAL const REAL* RESTRICT scale, GLOBAL int* RESTRICT count,
                   GLOBAL uint* RESTRICT kcand, GLOBAL REAL* RESTRICT kres, const REAL thr,
                   const uint plane, const uint ncand) {
    size_t k = GID(0);
    if (k >= ncand) return;
    uint c = cand[k];
    REAL m = res[7 * k + 2] / scale[c / plane];
    if (m < thr) return;
    size_t s = (size_t)ATOMIC_ADD_INT(count, 1);
    kcand[s] = c;
    for (uint j = 0; j < 7u; ++j) kres[7 * s + j] = res[7 * k + j];
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

/* locate_noise_rows' pass 0 flags, one work item per pixel (the tiled per-pixel grid (x, y,
   frame)): flag = whether (y, x) is covered; the mask rows' distances read by neighbouring
   work items from neighbouring columns (locate_noise_rows reads them a row a work item). */
KERNEL locate_noise_flag(GLOBAL const uint* RESTRICT dist, GLOBAL const int* RESTRICT hw,
                         GLOBAL uint* RESTRICT flag, const uint r, const uint h, const uint w,
                         const uint nf) {
    size_t x = GID(0);
    size_t y = GID(1);
    size_t f = GID(2);
    if (x >= w || y >= h || f >= nf) return;
    size_t plane = (size_t)h * w;
    flag[f * plane + y * w + x] =
        (uint)covered(dist + f * plane, hw, (int)r, (int)y, (int)x, (int)h, (int)w);
}

/* locate_noise_rows' sums over the pixels locate_noise_flag left unflagged, the same sums in
   the same order, with coalesced reads: a work group of NOISE_T work items takes NOISE_T rows
   of a frame, NOISE_T columns at a time into local memory (work item l loads column l of each
   row), then work item l adds its row's columns in order. Launched over
   (ceil(h / NOISE_T) * NOISE_T, nf) with local (NOISE_T, 1). */
#define NOISE_T 32
KERNEL locate_noise_tiles(GLOBAL const REAL* RESTRICT raw, GLOBAL const REAL* RESTRICT stats,
                          GLOBAL REAL* RESTRICT rows, GLOBAL const uint* RESTRICT flag,
                          const uint h, const uint w, const uint nf, const uint pass) {
    LOCAL REAL tv[NOISE_T * (NOISE_T + 1)];
    LOCAL uint tf[NOISE_T * (NOISE_T + 1)];
    size_t l = LID(0);
    size_t y0 = GROUP_ID(0) * NOISE_T;
    size_t f = GID(1);
    if (f >= nf) return;
    size_t y = y0 + l;
    size_t plane = (size_t)h * w;
    GLOBAL const REAL* rw = raw + f * plane;
    GLOBAL const uint* fl = flag + f * plane;
    REAL mean = pass == 0 ? (REAL)0 : stats[4 * f + 1];
    uint n = 0;
    REAL s = (REAL)0;
    for (size_t x0 = 0; x0 < w; x0 += NOISE_T) {
        size_t x = x0 + l;
        for (size_t j = 0; j < NOISE_T; ++j) {
            size_t yy = y0 + j;
            if (yy < h && x < w) {
                tv[j * (NOISE_T + 1) + l] = rw[yy * w + x];
                tf[j * (NOISE_T + 1) + l] = fl[yy * w + x];
            }
        }
        BARRIER();
        size_t nc = w - x0 < NOISE_T ? w - x0 : NOISE_T;
        if (y < h) {
            for (size_t c = 0; c < nc; ++c) {
                if (tf[l * (NOISE_T + 1) + c]) continue;
                REAL v = tv[l * (NOISE_T + 1) + c];
                if (pass == 0) {
                    n += 1;
                    s = ADD_RN(s, v);
                } else {
                    REAL d = SUB_RN(v, mean);
                    s = ADD_RN(s, MUL_RN(d, d));
                }
            }
        }
        BARRIER();
    }
    if (y >= h) return;
    GLOBAL REAL* o = rows + 3 * (f * h + y);
    if (pass == 0) {
        o[0] = (REAL)n;
        o[1] = s;
    } else {
        o[2] = s;
    }
}

/* Per frame, the rows' sums in row order: pass 0: stats[4f] = n, [4f + 1] = sum / n (the
   mean), [4f + 3] = sum; pass 1: [4f + 2] = the sum of squared deviations. A work group of
   FRAME_WG a frame loads FRAME_WG rows' sums at a time into local memory, and its first work
   item adds them in row order. Launched over (nf * FRAME_WG) with local FRAME_WG. */
KERNEL locate_noise_frame(GLOBAL const REAL* RESTRICT rows, GLOBAL REAL* RESTRICT stats,
                          const uint h, const uint pass) {
    LOCAL REAL ln[FRAME_WG];
    LOCAL REAL ls[FRAME_WG];
    size_t l = LID(0);
    size_t f = GROUP_ID(0);
    GLOBAL const REAL* rs = rows + 3 * f * h;
    REAL n = (REAL)0;
    REAL s = (REAL)0;
    for (size_t y0 = 0; y0 < h; y0 += FRAME_WG) {
        size_t y = y0 + l;
        if (y < h) {
            if (pass == 0) {
                ln[l] = rs[3 * y];
                ls[l] = rs[3 * y + 1];
            } else {
                ls[l] = rs[3 * y + 2];
            }
        }
        BARRIER();
        if (l == 0) {
            size_t m = h - y0 < FRAME_WG ? h - y0 : FRAME_WG;
            for (size_t j = 0; j < m; ++j) {
                if (pass == 0) n = ADD_RN(n, ln[j]);
                s = ADD_RN(s, ls[j]);
            }
        }
        BARRIER();
    }
    if (l != 0) return;
    if (pass == 0) {
        stats[4 * f] = n;
        stats[4 * f + 1] = DIV_RN(s, n);
        stats[4 * f + 3] = s;
    } else {
        stats[4 * f + 2] = s;
    }
}
