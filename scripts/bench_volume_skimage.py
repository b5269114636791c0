#!/usr/bin/env python3
"""The peer of `arraybridge bench detect --volume Z`: scikit-image's `blob_log` on the very
volumes arraybridge timed (the 4-D `.npy` that `--movie-cache DIR` wrote), with the same
parameters (sigma 1..5, 9 scales, threshold_rel 0.1, overlap 0.5), one volume at a time in this
process (one core, the usual call). Prints ms per volume and, when `--arraybridge CSV` is given
(`arraybridge detect DIR/volumes_….npy -o CSV --min-sigma 1 --max-sigma 5 --num-sigma 9
--threshold none --threshold-rel 0.1`), whether the rows are the same.

    bench_volume_skimage.py DIR/volumes_t4_z32_n128_p40_s1.npy [--arraybridge CSV] [--reps 1]
"""

import argparse
import sys
import time

import numpy as np
from skimage.feature import blob_log


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("volumes", help="the (T, Z, Y, X) .npy of `bench detect --volume`")
    ap.add_argument("--arraybridge", help="arraybridge detect's CSV of the same file")
    ap.add_argument("--reps", type=int, default=1, help="timed passes (the best is kept)")
    a = ap.parse_args()
    vols = np.load(a.volumes, mmap_mode="r")
    if vols.ndim != 4:
        print(f"{a.volumes}: expected (T, Z, Y, X), got shape {vols.shape}", file=sys.stderr)
        return 2
    kw = dict(min_sigma=1, max_sigma=5, num_sigma=9, threshold=None, threshold_rel=0.1)
    best, rows = float("inf"), []
    for _ in range(max(1, a.reps)):
        rows = []
        start = time.perf_counter()
        for t, v in enumerate(vols):
            r = blob_log(np.asarray(v), **kw)
            rows.append(np.column_stack([np.full(len(r), float(t)), r]))
        best = min(best, time.perf_counter() - start)
    sk = np.concatenate(rows) if rows else np.empty((0, 5))
    per = best / len(vols) * 1e3
    print(f"scikit-image blob_log: {len(vols)} volumes of {vols.shape[1:]}, {len(sk)} blobs, "
          f"{per:.1f} ms/volume")
    if a.arraybridge:
        ab = np.loadtxt(a.arraybridge, delimiter=",", skiprows=1, ndmin=2)
        key = lambda m: m[np.lexsort(m.T[::-1])] if len(m) else m  # noqa: E731
        same = ab.shape == sk.shape and np.array_equal(key(ab), key(sk))
        print(f"arraybridge rows: {len(ab)}; the same as scikit-image's: {same}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
