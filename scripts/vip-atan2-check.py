#!/usr/bin/env python3
"""Why 62 pixels of the VIP PACO goldens depend on the CPU that made them.

A NumPy re-implementation of VIP 2.1.1's FastPACO (no sub-pixel templates, VIP's operation order
for the trajectories) is run on the fixture twice: once with NumPy's trigonometry (`np.arctan2`
etc.) and once with Python's `math` module (glibc, the libm Rust's `f64::atan2` calls). It prints
how many of the golden's finite pixels each reproduces to 1e-9, and how many (dy, dx) of the grid
get a different `arctan2` from NumPy and from glibc.

On a CPU with AVX-512, NumPy dispatches `arctan2` (float64) to a SIMD routine that is within 1 ulp
but not always equal to glibc; the goldens were made that way, so the NumPy run matches them
everywhere and the glibc run differs at 62 pixels, all in the angle-0 frame where the exact
trajectory coordinate is an integer. Disable the dispatch and NumPy equals glibc:

    python3 -m venv /tmp/np && /tmp/np/bin/pip install numpy
    /tmp/np/bin/python scripts/vip-atan2-check.py
    NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" /tmp/np/bin/python scripts/vip-atan2-check.py

(Older NumPy releases name the features AVX512F, AVX512_SKX, ...; `np.show_runtime()` lists them.)
Measured on 2026-11-21 with NumPy 2.4.6: 0 and 62 mismatches with AVX-512; 62 and 62 without.

Usage: vip-atan2-check.py [FIXTURE_DIR]   (default: the repository's fixtures/paco)
"""
import math
import os
import sys

import numpy as np


def read_fits(path):
    """Primary-HDU image of a FITS file as float64 (BITPIX -32/-64 only, as in the fixtures)."""
    data = open(path, "rb").read()
    hdr, off = {}, 0
    while True:
        block = data[off:off + 2880]
        off += 2880
        cards = [block[i:i + 80].decode("ascii") for i in range(0, 2880, 80)]
        done = False
        for card in cards:
            key = card[:8].strip()
            if key == "END":
                done = True
                break
            if card[8:10] == "= ":
                hdr[key] = card[10:].split("/")[0].strip()
        if done:
            break
    naxis = int(hdr["NAXIS"])
    shape = [int(hdr["NAXIS%d" % (i + 1)]) for i in range(naxis)][::-1]
    dtype = {-32: ">f4", -64: ">f8"}[int(hdr["BITPIX"])]
    n = int(np.prod(shape))
    return np.frombuffer(data[off:off + n * np.dtype(dtype).itemsize], dtype=dtype).reshape(shape).astype(np.float64)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    fix = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "fixtures", "paco")
    cube = read_fits(os.path.join(fix, "synth_adi40_64_cube.fits"))
    angles = read_fits(os.path.join(fix, "synth_adi40_64_angles.fits")).ravel()
    psf = read_fits(os.path.join(fix, "synth_adi40_64_psf.fits"))
    ga = read_fits(os.path.join(fix, "golden", "vip211_fastpaco_synth_nosubpix_a.fits"))
    gb = read_fits(os.path.join(fix, "golden", "vip211_fastpaco_synth_nosubpix_b.fits"))
    t, n, _ = cube.shape
    r = 4
    offs = [(dy, dx) for dy in range(-r, r + 1) for dx in range(-r, r + 1) if dy * dy + dx * dx <= r * r]
    psf_n = psf / 9.540355072844195
    c = psf.shape[0] // 2
    h0 = np.array([psf_n[c + dy, c + dx] for dy, dx in offs])

    # Per-pixel statistics, VIP variant (half covariance, VIP's shrinkage numerator), box rule.
    q = np.full((n, n), np.nan)
    z = np.full((n, n, t), np.nan)
    for y in range(r + 1, n - r - 1):
        for x in range(r + 1, n - r - 1):
            p = np.array([[cube[f, y + dy, x + dx] for dy, dx in offs] for f in range(t)])
            m = p.mean(0)
            d = p - m
            s = 0.5 * (d.T @ d) / t
            tr, tr2 = np.trace(s), np.sum(s * s)
            num = tr2 + tr * tr - 2 * np.sum(s ** 2)
            den = (t + 1) * (tr2 - np.sum(np.diag(s) ** 2))
            rho = min(max(num / den, 0.0), 1.0)
            cov = (1 - rho) * s + rho * np.diag(np.diag(s))
            w = np.linalg.inv(cov) @ h0
            q[y, x] = h0 @ w
            z[y, x] = d @ w

    def traj_numpy(y0, x0):
        # VIP: cart_to_pol / pol_to_cart with NumPy ufuncs.
        px, py = float(x0 - n // 2), float(y0 - n // 2)
        rad = np.sqrt(np.power(0 - py, 2) + np.power(0 - px, 2))
        th = np.rad2deg(np.arctan2(py, px))
        a = np.deg2rad(-1 * angles + th)
        return rad * np.sin(a) + n // 2, rad * np.cos(a) + n // 2

    def traj_libm(y0, x0):
        dx, dy = float(x0 - n // 2), float(y0 - n // 2)
        rad = math.sqrt(dx * dx + dy * dy)
        th = math.atan2(dy, dx) * (180 / math.pi)
        a = [(-ang + th) * (math.pi / 180) for ang in angles]
        return (np.array([rad * math.sin(v) for v in a]) + n // 2,
                np.array([rad * math.cos(v) for v in a]) + n // 2)

    def mismatches(traj):
        bad = 0
        maxb = np.nanmax(np.abs(gb))
        for y0 in range(n):
            for x0 in range(n):
                ny, nx = traj(y0, x0)
                if int(max(nx.max(), ny.max())) >= n or int(min(nx.min(), ny.min())) < 0:
                    continue
                iy, ix = ny.astype(int), nx.astype(int)
                a = np.sum(q[iy, ix])
                b = np.sum(z[iy, ix, np.arange(t)])
                if not np.isfinite(ga[y0, x0]):
                    continue
                if abs(a - ga[y0, x0]) > 1e-9 * abs(ga[y0, x0]) or abs(b - gb[y0, x0]) > 1e-9 * maxb:
                    bad += 1
        return bad

    grid = np.arange(-n // 2, n // 2, dtype=np.float64)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    differ = int(np.sum(np.arctan2(yy.ravel(), xx.ravel())
                        != np.array([math.atan2(a, b) for a, b in zip(yy.ravel(), xx.ravel())])))
    print("numpy", np.__version__)
    print(f"np.arctan2 != libm atan2 on {differ} of {n * n} grid offsets")
    print(f"golden pixels (of {int(np.isfinite(ga).sum())}) not reproduced to 1e-9:")
    print(f"  NumPy trigonometry: {mismatches(traj_numpy)}")
    print(f"  libm trigonometry:  {mismatches(traj_libm)}")


if __name__ == "__main__":
    main()
