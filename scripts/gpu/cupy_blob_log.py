#!/usr/bin/env python3
"""The peers of `arraybridge bench detect`, timed end to end on the same kind of movie:

- `--impl cupy` (default): scikit-image's blob_log written with CuPy, the way cuCIM runs it
  (cupyx.scipy.ndimage.gaussian_laplace per scale, a 3x3x3 maximum filter, the relative
  threshold, then scikit-image's own overlap pruning on the host), upload included;
- `--impl cucim`: cuCIM's own `cucim.skimage.feature.blob_log`, frame by frame, upload included
  (the package travels slimmed: `gpu-check.sh build` keeps its pure-Python `skimage` part);
- `--impl skimage`: scikit-image's `blob_log` on the host's CPU, frame by frame in `--workers`
  processes (1: one core, the usual call; 0: every core), the denominator of "x scikit-image"
  on the same host.

`--movie PATH.npy` reads the u16 movie `arraybridge bench detect --movie-cache` saved (the very
frames arraybridge times; its first `--frames` frames); without it a movie of the same size
and density is generated here (frames of spots of sigma 1.5-2.5 on a background of 10 photons,
Poisson noise).

    cupy_blob_log.py [--impl cupy|cucim|skimage] [--movie M.npy] --frames 1000 --size 512
                     [--particles 100] [--min-sigma 1 --max-sigma 3 --num-sigma 10
                     --threshold-rel 0.2 --overlap 0.5] [--workers 1]
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
    ap.add_argument("--impl", choices=["cupy", "cucim", "skimage"], default="cupy")
    ap.add_argument("--movie", help="a (T, H, W) u16 .npy movie (its first --frames frames)")
    ap.add_argument("--workers", type=int, default=1, help="skimage: processes (0: every core)")
    a = ap.parse_args()
    if a.impl != "cupy":
        return other_peer(a)
    try:
        import cupy as cp
        from cupyx.scipy import ndimage as cnd
        from skimage.feature.blob import _prune_blobs
    except ImportError as e:
        print(f"peer unavailable: {e}", file=sys.stderr)
        return 1
    host = load(a) if a.movie else movie(a.frames, a.size, a.particles, a.seed)
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
    report(f"CuPy blob_log ({a.num_sigma} scales)", a, host, dt, n)
    return 0


def load(a):
    m = np.load(a.movie, mmap_mode="r")
    if m.ndim != 3 or m.shape[0] < a.frames:
        raise SystemExit(f"{a.movie}: shape {m.shape}, need at least {a.frames} frames")
    return np.ascontiguousarray(m[: a.frames])


def report(name, a, host, dt, n):
    t, h, w = host.shape
    print("| peer | frames | total s | ms/frame | detections |")
    print("|---|---|---|---|---|")
    print(f"| {name} {h}x{w} {host.dtype} | {t} | {dt:.3f} | {1e3 * dt / t:.2f} | {n} |")


def _skimage_frames(args):
    from skimage.feature import blob_log

    frames, kw = args
    return sum(len(blob_log(f, **kw)) for f in frames)


def other_peer(a):
    host = load(a) if a.movie else None
    kw = dict(min_sigma=a.min_sigma, max_sigma=a.max_sigma, num_sigma=a.num_sigma,
              threshold=None, threshold_rel=a.threshold_rel, overlap=a.overlap)
    if a.impl == "cucim":
        try:
            import cupy as cp
            from cucim.skimage.feature import blob_log
        except ImportError as e:
            print(f"peer unavailable: {e}", file=sys.stderr)
            return 1
        if host is None:
            host = movie(a.frames, a.size, a.particles, a.seed)
        for f in range(min(3, len(host))):  # warm-up (kernel compilation)
            blob_log(cp.asarray(host[f]), **kw)
        cp.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        n = 0
        for f in host:
            n += len(blob_log(cp.asarray(f), **kw))  # the result is on the device: len syncs
        cp.cuda.runtime.deviceSynchronize()
        report(f"cuCIM blob_log ({a.num_sigma} scales)", a, host, time.perf_counter() - t0, n)
        return 0
    if host is None:
        raise SystemExit("--impl skimage needs --movie (no GPU generator on the CPU path)")
    import os
    from concurrent.futures import ProcessPoolExecutor

    workers = a.workers or os.cpu_count() or 1
    _skimage_frames((host[:1], kw))  # warm-up (imports)
    t0 = time.perf_counter()
    if workers == 1:
        n = _skimage_frames((host, kw))
    else:
        parts = [(host[i::workers], kw) for i in range(workers)]
        with ProcessPoolExecutor(workers) as ex:
            n = sum(ex.map(_skimage_frames, parts))
    report(f"scikit-image blob_log, {workers} process(es)", a, host, time.perf_counter() - t0, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
