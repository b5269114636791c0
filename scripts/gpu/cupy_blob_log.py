#!/usr/bin/env python3
"""The peer to beat for `arraybridge bench detect`: scikit-image's blob_log written with CuPy,
the way cuCIM runs it (cupyx.scipy.ndimage.gaussian_laplace per scale, a 3x3x3 maximum filter,
the relative threshold, then scikit-image's own overlap pruning on the host), timed end to end
on a synthetic u16 movie of the same size and density as arraybridge's (frames of spots of
sigma 1.5-2.5 on a background of 10 photons, Poisson noise), upload included.

    cupy_blob_log.py --frames 1000 --size 512 [--particles 100] [--min-sigma 1 --max-sigma 3
                     --num-sigma 10 --threshold-rel 0.2 --overlap 0.5]
"""
import argparse
import sys
import time

import numpy as np


def movie(frames, size, particles, seed):
    import cupy as cp
    from cupyx.scipy import ndimage as cnd

    rng = cp.random.default_rng(seed)
    out = np.empty((frames, size, size), dtype=np.uint16)
    for f in range(frames):
        img = cp.zeros((size, size), dtype=cp.float32)
        ys = rng.integers(8, size - 8, particles)
        xs = rng.integers(8, size - 8, particles)
        amp = rng.uniform(50, 150, particles).astype(cp.float32) * 2 * np.pi * 2.0**2
        img[ys, xs] += amp
        img = cnd.gaussian_filter(img, 2.0) + 10.0
        out[f] = cp.random.poisson(img).astype(cp.uint16).get()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--particles", type=int, default=100)
    ap.add_argument("--min-sigma", type=float, default=1.0)
    ap.add_argument("--max-sigma", type=float, default=3.0)
    ap.add_argument("--num-sigma", type=int, default=10)
    ap.add_argument("--threshold-rel", type=float, default=0.2)
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    try:
        import cupy as cp
        from cupyx.scipy import ndimage as cnd
        from skimage.feature.blob import _prune_blobs
    except ImportError as e:
        print(f"peer unavailable: {e}", file=sys.stderr)
        return 1
    host = movie(a.frames, a.size, a.particles, a.seed)
    sigmas = np.linspace(a.min_sigma, a.max_sigma, a.num_sigma)
    fp = cp.ones((3, 3, 3), dtype=bool)

    def one(frame):
        img = cp.asarray(frame).astype(cp.float32)
        img = img / img.max()  # skimage's img_as_float of u16 divides by 65535; rel threshold is scale-free
        cube = cp.stack([-cnd.gaussian_laplace(img, s) * s**2 for s in sigmas], axis=-1)
        mx = cnd.maximum_filter(cube, footprint=fp, mode="constant")
        thr = a.threshold_rel * cube.max()
        peaks = cp.argwhere((cube == mx) & (cube > thr))
        # exclude_border=False as blob_log: keep all; radius sigma*sqrt(2)
        p = peaks.get().astype(np.float64)
        if len(p) == 0:
            return np.zeros((0, 3))
        blobs = np.column_stack([p[:, 0], p[:, 1], sigmas[p[:, 2].astype(int)]])
        return _prune_blobs(blobs, a.overlap)

    for f in range(min(3, a.frames)):  # warm-up (kernel compilation)
        one(host[f])
    cp.cuda.runtime.deviceSynchronize()
    t0 = time.perf_counter()
    n = 0
    for f in range(a.frames):
        n += len(one(host[f]))
    cp.cuda.runtime.deviceSynchronize()
    dt = time.perf_counter() - t0
    print("| peer | frames | total s | ms/frame | detections |")
    print("|---|---|---|---|---|")
    print(f"| CuPy blob_log ({a.num_sigma} scales) {a.size}x{a.size} u16 | {a.frames} | {dt:.3f} | {1e3 * dt / a.frames:.2f} | {n} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
