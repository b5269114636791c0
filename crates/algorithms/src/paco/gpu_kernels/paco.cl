
#ifndef REAL
#define REAL double
#endif
#ifndef KMAX
#define KMAX 64
#endif

#if defined(__CUDACC__)
#define REAL_NAN ((REAL)__longlong_as_double(0x7ff8000000000000LL))
#else
#pragma OPENCL FP_CONTRACT OFF
#define REAL_NAN ((REAL)NAN)
#endif

/* Where paco_stats keeps the K x K matrix of its pixel: local (shared) memory by default,
   or a slice of the global scratch buffer `scr` with COV_GLOBAL (patches larger than the
   local-memory KMAX); the group's barriers then also fence global memory. */
#if defined(COV_GLOBAL)
#define SMEM GLOBAL
#if defined(__CUDACC__)
#define SBARRIER() __syncthreads()
#else
#define SBARRIER() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#endif
#else
#define SMEM LOCAL_PTR
#define SBARRIER() BARRIER()
#endif

/* The K x K matrix of a pixel is kept as its upper triangle, packed by rows (K(K+1)/2 values:
   half the shared memory, so twice the groups fit on a multiprocessor): element (i, j), j >= i,
   at PK(i, j); row i is contiguous from PK(i, i). Every access of the kernel is to j >= i. */
#define PK(i, j) ((i) * (2 * k - (i) - 1) / 2 + (j))

/* a*b rounded (no fused multiply-add). */
#if defined(__CUDACC__)
DEVICE_FN double pmul(double a, double b) { return __dmul_rn(a, b); }
DEVICE_FN float pmul(float a, float b) { return __fmul_rn(a, b); }
#define MUL(a, b) pmul((a), (b))
#else
#define MUL(a, b) ((a) * (b))
#endif

/* finite and > 0 without library calls */
#define POS_FINITE(d) ((d) > (REAL)0 && ((d) - (d)) == (REAL)0)

/* CPU `dot`: four accumulators over blocks of 4, then the remainder (one definition per pair
   of address spaces: OpenCL C has no overloading). */
#define DEF_DOT4(NAME, QA, QB)                                                              \
    DEVICE_FN REAL NAME(QA const REAL* a, QB const REAL* b, uint n) {                       \
        REAL s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                \
        uint n4 = n & ~3u;                                                                  \
        for (uint i = 0; i < n4; i += 4) {                                                  \
            s0 += MUL(a[i], b[i]);                                                          \
            s1 += MUL(a[i + 1], b[i + 1]);                                                  \
            s2 += MUL(a[i + 2], b[i + 2]);                                                  \
            s3 += MUL(a[i + 3], b[i + 3]);                                                  \
        }                                                                                   \
        REAL s = (s0 + s1) + (s2 + s3);                                                     \
        for (uint i = n4; i < n; ++i) s += MUL(a[i], b[i]);                                 \
        return s;                                                                           \
    }
DEF_DOT4(dot4_g, GLOBAL, GLOBAL)
DEF_DOT4(dot4_ss, SMEM, SMEM)
DEF_DOT4(dot4_ll, LOCAL_PTR, LOCAL_PTR)

/* cube [t][p] -> cen [p][t], centred per pixel; the cube is centred in place too (frame-major,
   the input of paco_lag). */
KERNEL paco_centre(GLOBAL REAL* RESTRICT cube, GLOBAL REAL* RESTRICT cen, const uint npix,
                   const uint t) {
    size_t p = GID(0);
    if (p >= npix) return;
    REAL s = 0;
    for (uint f = 0; f < t; ++f) s += cube[(size_t)f * npix + p];
    REAL mean = s / (REAL)t;
    for (uint f = 0; f < t; ++f) {
        REAL c = cube[(size_t)f * npix + p] - mean;
        cen[p * t + f] = c;
        cube[(size_t)f * npix + p] = c;
    }
}

/* The lag table of the pixels [p0, p0 + np): g[l gl + (p - p0) gp] = sum_t c_t[p] c_t[p + lag_l]
   in the CPU's `dot` order (four accumulators over blocks of 4, then the remainder), NaN where
   p + lag_l leaves the frame (the CPU's `Prepared::lag_table`; lag-major with gl = np, gp = 1,
   pixel-major with gl = 1, gp = nl). One thread per pixel and run of `lpi` lags from
   lag_group * lpi: the pixel on dimension 0 and the lag group on dimension 1, or the other
   way round with lag_first (ARRAYBRIDGE_PACO_LAG_ORDER). c_t[p] is read at
   src[p ps + t fs]: the frame-major centred cube (ps = 1, fs = H W: neighbouring threads read
   neighbouring pixels, for GPUs) or the pixel-major one (ps = T, fs = 1: a thread reads
   contiguous columns and keeps its own in cache over all its lags, for CPU devices). */
KERNEL paco_lag(GLOBAL const REAL* RESTRICT src, GLOBAL const int* RESTRICT lags,
                GLOBAL REAL* RESTRICT g, const uint h, const uint w, const uint t,
                const uint nl, const uint p0, const uint np, const uint ps, const uint fs,
                const uint lpi, const uint gl, const uint gp, const uint lag_first) {
    /* lag_first: the grid's first dimension runs over the lags (a group is 1 x LINE_WG work
       items of one lag), so the groups in flight share their pixels' frames in the cache */
    size_t i = lag_first ? GID(1) : GID(0);
    if (i >= np) return;
    size_t p = (size_t)p0 + i;
    long y = (long)(p / w);
    long x = (long)(p % w);
    uint l0 = (uint)(lag_first ? GID(0) : GID(1)) * lpi;
    uint l1 = l0 + lpi < nl ? l0 + lpi : nl;
    GLOBAL const REAL* a = src + p * ps;
    uint t4 = t & ~3u;
    for (uint l = l0; l < l1; ++l) {
        long qy = y + lags[2 * l];
        long qx = x + lags[2 * l + 1];
        REAL out = REAL_NAN;
        if (qy >= 0 && qx >= 0 && qy < (long)h && qx < (long)w) {
            GLOBAL const REAL* b = src + ((size_t)qy * w + (size_t)qx) * ps;
            REAL s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            size_t o = 0;
            for (uint f = 0; f < t4; f += 4) {
                s0 += MUL(a[o], b[o]);
                s1 += MUL(a[o + fs], b[o + fs]);
                s2 += MUL(a[o + 2 * (size_t)fs], b[o + 2 * (size_t)fs]);
                s3 += MUL(a[o + 3 * (size_t)fs], b[o + 3 * (size_t)fs]);
                o += 4 * (size_t)fs;
            }
            REAL sum = (s0 + s1) + (s2 + s3);
            for (uint f = t4; f < t; ++f) {
                sum += MUL(a[o], b[o]);
                o += fs;
            }
            out = sum;
        }
        g[(size_t)l * gl + i * gp] = out;
    }
}

/* One work group per pixel theta: with sub == 0 the statistics pixels of rows
   [y0, y0 + ngroups / nx), columns [x_lo, x_lo + nx); with sub != 0 the pixels plist[g]. */
KERNEL paco_stats(GLOBAL const REAL* RESTRICT cen, GLOBAL const int* RESTRICT offs,
                  GLOBAL const REAL* RESTRICT h0, GLOBAL REAL* RESTRICT q,
                  GLOBAL REAL* RESTRICT wb, GLOBAL REAL* RESTRICT scr, const uint w,
                  const uint t, const uint k, const uint y0, const uint x_lo, const uint nx,
                  const uint ngroups, const uint variant, const uint sub,
                  GLOBAL const uint* RESTRICT plist, GLOBAL const uint* RESTRICT pstart,
                  GLOBAL const uint* RESTRICT pfr, GLOBAL const REAL* RESTRICT pfy,
                  GLOBAL const REAL* RESTRICT pfx, GLOBAL const REAL* RESTRICT tbl,
                  const uint tq, const uint nearest, GLOBAL REAL* RESTRICT cab,
                  GLOBAL const REAL* RESTRICT lagt, GLOBAL const uint* RESTRICT lidx,
                  const uint nl, const uint lbase, const uint gl, const uint gp,
                  const uint chol_cols, LOCAL_ARG(REAL, sdyn)) {
    DYN_LOCAL(REAL, sdyn);
#if defined(COV_GLOBAL)
    GLOBAL REAL* S = scr + (size_t)GROUP_ID(0) * (k * (k + 1) / 2);
#else
    /* K(K+1)/2 values of local memory sized by the launch */
    SMEM REAL* S = sdyn;
#endif
    LOCAL REAL v[KMAX];
    LOCAL REAL hl[KMAX];
    LOCAL REAL invd[KMAX];
    LOCAL REAL xs[KMAX];
    LOCAL REAL part[4];
    LOCAL int ol[KMAX];
    LOCAL int flag[1];
    size_t g = GROUP_ID(0);
    uint tid = (uint)LID(0);
    uint nt = (uint)LOCAL_SIZE(0);
    if (g >= ngroups) return; /* uniform per group */
    size_t theta = sub ? (size_t)plist[g]
                       : (size_t)(y0 + (uint)(g / nx)) * w + x_lo + (uint)(g % nx);
    for (uint i = tid; i < k; i += nt) {
        ol[i] = offs[i];
        hl[i] = h0[i];
    }
    SBARRIER();
    /* 1. sample covariance, upper triangle: from the lag table of paco_lag when nl != 0
       (S_ij = G[lidx[i k + j]][theta + d_i - lbase] / T, at lagt[l gl + p gp], the CPU's
       `load_cov`), else the
       same dot products computed here */
    REAL inv_t = (REAL)1 / (REAL)t;
    if (nl != 0u) {
        for (uint i = 0; i < k; ++i) {
            GLOBAL const REAL* gi = lagt + ((size_t)((long)theta + ol[i]) - lbase) * gp;
            for (uint j = i + tid; j < k; j += nt) {
                S[PK(i, j)] = MUL(gi[(size_t)lidx[i * k + j] * gl], inv_t);
            }
        }
    } else {
        for (uint i = 0; i < k; ++i) {
            GLOBAL const REAL* ci = cen + (size_t)((long)theta + ol[i]) * t;
            for (uint j = i + tid; j < k; j += nt) {
                GLOBAL const REAL* cj = cen + (size_t)((long)theta + ol[j]) * t;
                S[PK(i, j)] = MUL(dot4_g(ci, cj, t), inv_t);
            }
        }
    }
    SBARRIER();
    /* 2. validity and shrinkage: the squared norms of the rows' off-diagonal parts in
       parallel (one row per thread), then one thread sums them in the CPU's order */
    for (uint i = tid; i < k; i += nt) {
        xs[i] = dot4_ss(S + PK(i, i) + 1, S + PK(i, i) + 1, k - i - 1);
    }
    SBARRIER();
    if (tid == 0) {
        int ok = 1;
        for (uint i = 0; i < k; ++i) {
            REAL d = S[PK(i, i)];
            if (!POS_FINITE(d)) ok = 0;
        }
        if (ok) {
            REAL tr = 0, dsq = 0, off = 0;
            for (uint i = 0; i < k; ++i) {
                REAL d = S[PK(i, i)];
                tr += d;
                dsq += MUL(d, d);
                off += xs[i];
            }
            REAL tr2 = dsq + MUL((REAL)2, off);
            REAL num = variant == 0u ? (tr2 + MUL(tr, tr)) - MUL((REAL)2, dsq)
                                     : (tr2 + MUL(tr, tr)) - MUL((REAL)2, tr2);
            REAL den = MUL((REAL)t + (REAL)1, tr2 - dsq);
            REAL rho = (REAL)1;
            if (den != (REAL)0) {
                /* the CPU's clamp: NaN stays NaN */
                rho = num / den;
                if (rho < (REAL)0) rho = (REAL)0;
                if (rho > (REAL)1) rho = (REAL)1;
            }
            REAL scale = variant == 0u ? (REAL)1 : (REAL)0.5;
            v[0] = scale;
            v[1] = MUL((REAL)1 - rho, scale);
        }
        flag[0] = ok;
    }
    SBARRIER();
    int ok = flag[0];
    if (ok) {
        REAL dg = v[0];
        REAL of = v[1];
        for (uint i = 0; i < k; ++i) {
            for (uint j = i + tid; j < k; j += nt) S[PK(i, j)] = MUL(S[PK(i, j)], j == i ? dg : of);
        }
    }
    SBARRIER();
    /* 3. right-looking Cholesky, R = L^T in the upper triangle, two barriers a column: every
       thread reads the pivot and computes the same L_jj and 1/L_jj (so `ok` stays the same in
       every thread), the group scales row j; then thread 0 stores the pivot (no thread reads
       S_jj any more) while the group updates the trailing triangle, each element once with
       the CPU's operation S_kc -= S_jk * S_jc: with chol_cols != 0 a thread owns columns c
       (c = K - 1 - tid, step the group's size down to j + 1: the first warp the longest) and
       walks down each from row j + 1 to its diagonal (about K - j steps for the first warp,
       none for a warp whose columns are all done: the row-wise update cost every warp a
       pass per row, and the third H200 run's ncu put the kernel at 56 % of its issue
       slots with half the lanes idle); else row by row, the
       columns c >= kk over the group (a lone work item, as on a CPU device, then walks rows,
       which are contiguous). Every barrier is reached by the whole group (no early exit): `ok`
       only guards the work. */
    for (uint j = 0; j < k; ++j) {
        REAL ljj = (REAL)1;
        REAL inv = (REAL)1;
        if (ok) {
            REAL d = S[PK(j, j)];
            if (!POS_FINITE(d)) {
                ok = 0;
            } else {
                ljj = sqrt(d);
                inv = (REAL)1 / ljj;
                for (uint n = j + 1 + tid; n < k; n += nt) {
                    S[PK(j, n)] = MUL(S[PK(j, n)], inv);
                }
            }
        }
        SBARRIER();
        if (ok) {
            if (tid == 0) {
                S[PK(j, j)] = ljj;
                invd[j] = inv;
            }
            if (chol_cols) {
                /* row j from column 0 (PK(j, c) = PK(j, 0) + c); PK(kk + 1, c) = PK(kk, c) +
                   k - kk - 1 */
                SMEM const REAL* rj = S + PK(j, 0u);
                for (uint cc = tid; j + 1 + cc < k; cc += nt) {
                    uint c = k - 1 - cc;
                    REAL sjc = rj[c];
                    uint o = PK(j + 1, c);
                    for (uint kk = j + 1; kk <= c; ++kk) {
                        S[o] -= MUL(rj[kk], sjc);
                        o += k - kk - 1;
                    }
                }
            } else {
                for (uint kk = j + 1; kk < k; ++kk) {
                    REAL f = S[PK(j, kk)];
                    for (uint c = kk + tid; c < k; c += nt) S[PK(kk, c)] -= MUL(f, S[PK(j, c)]);
                }
            }
        }
        SBARRIER();
    }
    if (sub) {
        /* 4'. sub-pixel templates: the pairs of slots [pstart[g], pstart[g + 1]) land on theta,
           one per thread (frame pfr[p]). h_l is blended from the (tq+1)^2 template table tbl
           like the CPU (sub == 1, offsets pfy[p], pfx[p]) or read from tbl[p k ..] (sub == 2,
           per-pair templates computed on the host); then L^-1 [h_l | c_l(theta)] in the CPU's
           forward_multi order, a_c = |L^-1 h|^2, b_c = (L^-1 h).(L^-1 c) into cab[2 p],
           cab[2 p + 1] */
        uint p1 = pstart[g + 1];
        for (uint p = pstart[g] + tid; p < p1; p += nt) {
            uint l = pfr[p];
            REAL ca = REAL_NAN;
            REAL cb = REAL_NAN;
            if (ok) {
                REAL hv[KMAX];
                REAL xv[KMAX];
                if (sub == 1u) {
                    REAL qf = (REAL)tq;
                    REAL lo = nearest ? (REAL)(-0.5) : (REAL)0;
                    REAL uy = MUL(pfy[p] - lo, qf);
                    REAL ux = MUL(pfx[p] - lo, qf);
                    uy = uy < (REAL)0 ? (REAL)0 : (uy > qf ? qf : uy);
                    ux = ux < (REAL)0 ? (REAL)0 : (ux > qf ? qf : ux);
                    uint iy = (uint)uy;
                    uint ix = (uint)ux;
                    iy = iy > tq - 1 ? tq - 1 : iy;
                    ix = ix > tq - 1 ? tq - 1 : ix;
                    REAL ty = uy - (REAL)iy;
                    REAL tx = ux - (REAL)ix;
                    REAL w00 = MUL((REAL)1 - ty, (REAL)1 - tx);
                    REAL w01 = MUL((REAL)1 - ty, tx);
                    REAL w10 = MUL(ty, (REAL)1 - tx);
                    REAL w11 = MUL(ty, tx);
                    uint n = tq + 1;
                    GLOBAL const REAL* t00 = tbl + (size_t)(iy * n + ix) * k;
                    GLOBAL const REAL* t01 = tbl + (size_t)(iy * n + ix + 1) * k;
                    GLOBAL const REAL* t10 = tbl + (size_t)((iy + 1) * n + ix) * k;
                    GLOBAL const REAL* t11 = tbl + (size_t)((iy + 1) * n + ix + 1) * k;
                    for (uint i = 0; i < k; ++i) {
                        hv[i] = ((MUL(w00, t00[i]) + MUL(w01, t01[i])) + MUL(w10, t10[i]))
                                + MUL(w11, t11[i]);
                    }
                } else {
                    GLOBAL const REAL* tp = tbl + (size_t)p * k;
                    for (uint i = 0; i < k; ++i) hv[i] = tp[i];
                }
                for (uint i = 0; i < k; ++i) {
                    xv[i] = cen[(size_t)((long)theta + ol[i]) * t + l];
                }
                /* L[i][j] is stored at S[PK(j, i)]; PK(j + 1, i) = PK(j, i) + k - j - 1, so
                   the column of L is walked with a running offset `o` */
                for (uint i = 0; i < k; ++i) {
                    REAL rh = hv[i];
                    REAL rx = xv[i];
                    uint j = 0;
                    uint o = i; /* PK(0, i) */
                    for (; j + 4 <= i; j += 4) {
                        REAL l0 = S[o];
                        o += k - j - 1;
                        REAL l1 = S[o];
                        o += k - j - 2;
                        REAL l2 = S[o];
                        o += k - j - 3;
                        REAL l3 = S[o];
                        o += k - j - 4;
                        rh -= (MUL(l0, hv[j]) + MUL(l1, hv[j + 1]))
                              + (MUL(l2, hv[j + 2]) + MUL(l3, hv[j + 3]));
                        rx -= (MUL(l0, xv[j]) + MUL(l1, xv[j + 1]))
                              + (MUL(l2, xv[j + 2]) + MUL(l3, xv[j + 3]));
                    }
                    for (; j < i; ++j) {
                        REAL lj = S[o];
                        o += k - j - 1;
                        rh -= MUL(lj, hv[j]);
                        rx -= MUL(lj, xv[j]);
                    }
                    hv[i] = MUL(rh, invd[i]);
                    xv[i] = MUL(rx, invd[i]);
                }
                REAL sa = 0;
                REAL sb = 0;
                for (uint i = 0; i < k; ++i) {
                    sa += MUL(hv[i], hv[i]);
                    sb += MUL(hv[i], xv[i]);
                }
                ca = sa;
                cb = sb;
            }
            cab[2 * (size_t)p] = ca;
            cab[2 * (size_t)p + 1] = cb;
        }
        return;
    }
    /* 4. w = C^-1 h0, q = h0.w; w goes to wb[g] for paco_z (NaN for a degenerate pixel).
       Spread over the group with the CPU's rounding sequence kept element by element:
       forward substitution column by column (every thread reads the final v[j], the updates
       of v[n], n > j, are split over the threads; the solution goes to xs); backward
       substitution row by row with the four accumulators of the CPU's dot product each
       summed by one thread, combined by thread 0. */
    /* Every barrier is reached by the whole group (no early exit): `ok` only guards work. */
    GLOBAL REAL* wg = wb + g * k;
    for (uint i = tid; i < k; i += nt) v[i] = hl[i];
    SBARRIER();
    for (uint j = 0; j < k; ++j) {
        if (ok) {
            REAL vj = MUL(v[j], invd[j]);
            if (tid == 0) xs[j] = vj;
            for (uint n = j + 1 + tid; n < k; n += nt) v[n] -= MUL(vj, S[PK(j, n)]);
        }
        SBARRIER();
    }
    for (uint ii = k; ii > 0; --ii) {
        uint i = ii - 1;
        uint n = k - i - 1;
        uint n4 = n & ~3u;
        SMEM const REAL* a = S + PK(i, i) + 1;
        LOCAL_PTR const REAL* b = xs + i + 1;
        if (ok) {
            for (uint r = tid; r < 4u; r += nt) {
                REAL sr = 0;
                for (uint m = r; m < n4; m += 4) sr += MUL(a[m], b[m]);
                part[r] = sr;
            }
        }
        SBARRIER();
        if (ok && tid == 0) {
            REAL sum = (part[0] + part[1]) + (part[2] + part[3]);
            for (uint m = n4; m < n; ++m) sum += MUL(a[m], b[m]);
            xs[i] = MUL(xs[i] - sum, invd[i]);
        }
        SBARRIER();
    }
    for (uint i = tid; i < k; i += nt) wg[i] = ok ? xs[i] : REAL_NAN;
    if (tid == 0) q[theta] = ok ? dot4_ll(hl, xs, k) : REAL_NAN;
}

/* z_t(theta) = w(theta) . cen_t(theta) in disk order, one thread per (pixel of the band,
   frame); the pixels are those of the paco_stats launch with the same arguments. */
KERNEL paco_z(GLOBAL const REAL* RESTRICT cen, GLOBAL const int* RESTRICT offs,
              GLOBAL const REAL* RESTRICT wb, GLOBAL REAL* RESTRICT z, const uint w,
              const uint t, const uint k, const uint y0, const uint x_lo, const uint nx,
              const uint ngroups) {
    size_t id = GID(0);
    if (id >= (size_t)ngroups * t) return;
    size_t g = id / t;
    uint f = (uint)(id % t);
    size_t theta = (size_t)(y0 + (uint)(g / nx)) * w + x_lo + (uint)(g % nx);
    GLOBAL const REAL* wg = wb + g * k;
    REAL acc = 0;
    for (uint i = 0; i < k; ++i) {
        acc += MUL(wg[i], cen[(size_t)((long)theta + offs[i]) * t + f]);
    }
    z[theta * t + f] = acc;
}

/* a, b of n positions; traj[i * t + l] = theta of frame l or -1. */
KERNEL paco_accumulate(GLOBAL const int* RESTRICT traj, GLOBAL const REAL* RESTRICT q,
                       GLOBAL const REAL* RESTRICT z, GLOBAL REAL* RESTRICT a,
                       GLOBAL REAL* RESTRICT b, const uint n, const uint t) {
    size_t i = GID(0);
    if (i >= n) return;
    REAL sa = 0, sb = 0;
    int ok = 1;
    for (uint l = 0; l < t; ++l) {
        int th = traj[i * t + l];
        if (th < 0) {
            ok = 0;
            break;
        }
        sa += q[th];
        sb += z[(size_t)th * t + l];
    }
    a[i] = ok ? sa : REAL_NAN;
    b[i] = ok ? sb : REAL_NAN;
}

/* The trajectories of n positions, computed here (launched with REAL = double only), in
   paco_accumulate's layout: traj[i * t + l] is the pixel of position i in frame l, -1 at the
   first frame outside the edge rule's box [ylo, yhi) x [xlo, xhi) (the entries after it are
   not written: paco_accumulate stops there). Position i is at the polar radius pol[2i] and
   angle pol[2i+1] (degrees: the host's Geometry::polar); in frame l,
   rad = (-ang[l] + theta0) * geo[2] and the raw-frame position is
   (r * sin(rad) + geo[0], r * cos(rad) + geo[1]): the CPU's Geometry::position_polar operation
   for operation, but with the device's sine and cosine, which may differ from the host's in
   their last bits (OpenCL allows 4 ulp, CUDA's are within 2). So each rounding is certified:
   where the coordinate v lies farther than E = geo[3] * (r + |v| + |add| + 1) + geo[4] from a
   rounding boundary (integers for trunc, half-integers for nearest), the host's coordinate,
   within r * 2^-49 + |v| * 2^-51 of v, rounds to the same pixel (geo[3] = 2^-40: 512 times
   that bound). A frame with a coordinate the device cannot decide (the identity rotation puts
   every coordinate there: angle 0 with an integer centre) is left to the host: its entry gets
   -2 and its index i * t + l goes to undec[k] (count[0] counts them; only it is zeroed); the
   host computes those entries and paco_traj_fix writes them. */
/* sine and cosine of x with one argument reduction (each within the sin's and cos's own
   error bounds) */
#if defined(__CUDACC__)
DEVICE_FN REAL sin_cos(REAL x, REAL* c) {
    REAL s;
    sincos(x, &s, c);
    return s;
}
#else
#define sin_cos(x, c) sincos((x), (c))
#endif

KERNEL paco_traj(GLOBAL const REAL* RESTRICT pol, GLOBAL const REAL* RESTRICT ang,
                 GLOBAL const REAL* RESTRICT geo, GLOBAL int* RESTRICT traj,
                 GLOBAL int* RESTRICT count, GLOBAL int* RESTRICT undec, const int nearest,
                 const int ylo, const int yhi, const int xlo, const int xhi, const uint w,
                 const uint n, const uint t) {
    size_t i = GID(0);
    if (i >= n) return;
    const REAL r = pol[2 * i], th0 = pol[2 * i + 1];
    const REAL add_y = geo[0], add_x = geo[1], deg = geo[2], rel = geo[3], margin = geo[4];
    const REAL offset = nearest ? (REAL)0.5 : (REAL)0;
    const REAL ey0 = rel * (r + fabs(add_y) + (REAL)1) + margin;
    const REAL ex0 = rel * (r + fabs(add_x) + (REAL)1) + margin;
    GLOBAL int* row = traj + i * t;
    for (uint l = 0; l < t; ++l) {
        const REAL rad = MUL(-ang[l] + th0, deg);
        REAL cs;
        const REAL sn = sin_cos(rad, &cs);
        const REAL y = MUL(r, sn) + add_y;
        const REAL x = MUL(r, cs) + add_x;
        /* the rounding's argument: floor(v + 0.5) for nearest, trunc(v) */
        const REAL vy = y + offset, vx = x + offset;
        /* NaN fails both tests: undecided */
        if (!(fabs(vy - rint(vy)) > ey0 + rel * fabs(y)) ||
            !(fabs(vx - rint(vx)) > ex0 + rel * fabs(x))) {
            int k = ATOMIC_ADD_INT(count, 1);
            undec[k] = (int)(i * t + l);
            row[l] = -2;
            continue;
        }
        const REAL py = nearest ? floor(vy) : trunc(y);
        const REAL px = nearest ? floor(vx) : trunc(x);
        if (!(py >= (REAL)ylo && py < (REAL)yhi && px >= (REAL)xlo && px < (REAL)xhi)) {
            row[l] = -1;
            return;
        }
        row[l] = (int)py * (int)w + (int)px;
    }
}

/* traj[idx[j]] = val[j] for j < k: the entries paco_traj left to the host. */
KERNEL paco_traj_fix(GLOBAL const int* RESTRICT idx, GLOBAL const int* RESTRICT val,
                     GLOBAL int* RESTRICT traj, const uint k) {
    size_t j = GID(0);
    if (j >= k) return;
    traj[idx[j]] = val[j];
}
