"""The seed's particle-analysis names as thin wrappers: :class:`ParticleDetector` (and its GPU
spelling), :func:`benchmark` / :func:`print_benchmark_results`, :func:`is_gpu_available`."""

from __future__ import annotations

import operator
import time
from typing import Any, Optional, Sequence

import numpy as np

from . import _native
from ._native import InvalidInput


def is_gpu_available() -> bool:
    """Whether a GPU (a CUDA device, or an OpenCL device that is not a CPU) is usable: what
    ``device="all"`` would run on."""
    return bool(_native.gpus())


class ParticleDetector:
    """The seed's detector: ``ParticleDetector(min_sigma=1, max_sigma=3, threshold_rel=0.2,
    batch_size=4)`` then ``detect_movie(movie)``: scikit-image's ``blob_log`` on every frame
    (no absolute threshold, 10 scales: the seed's preset), on ``device`` (``"auto"``, a
    device, a list or ``"all"``, as everywhere). Returns the particles as a table with columns
    ``frame, y, x, sigma`` (a DataFrame when pandas is installed)."""

    def __init__(
        self,
        min_sigma: float = 1.0,
        max_sigma: float = 3.0,
        threshold_rel: Optional[float] = 0.2,
        batch_size: int = 4,
        device: str = "auto",
        *,
        num_sigma: int = 10,
        threshold: Optional[float] = None,
        overlap: float = 0.5,
    ):
        self.min_sigma = min_sigma
        self.max_sigma = max_sigma
        self.threshold_rel = threshold_rel
        self.batch_size = batch_size
        self.device = device
        self.num_sigma = num_sigma
        self.threshold = threshold
        self.overlap = overlap

    def __repr__(self) -> str:
        return (
            f"ParticleDetector(min_sigma={self.min_sigma}, max_sigma={self.max_sigma}, "
            f"threshold_rel={self.threshold_rel}, batch_size={self.batch_size}, "
            f"device={self.device!r})"
        )

    def detect_movie(self, movie: Any):
        """The particles of every frame of ``movie`` (``(T, H, W)``; a 2-D image is one
        frame). A ``dask.array`` movie is computed a chunk of frames at a time, as
        :func:`arraybridge.batch_blob_log` streams it."""
        from . import _blob_log_frames, _dask, _table, batch_blob_log  # noqa: PLC0415

        kw = dict(
            min_sigma=self.min_sigma,
            max_sigma=self.max_sigma,
            num_sigma=self.num_sigma,
            threshold=self.threshold,
            threshold_rel=self.threshold_rel,
            overlap=self.overlap,
            device=self.device,
            batch_size=self.batch_size,
        )
        if _dask.is_dask(movie):
            rows = batch_blob_log(_dask.movie(movie, "detect_movie"), **kw)
        else:
            rows, _ = _blob_log_frames(movie, **kw)
        return _table(
            {
                "frame": rows[:, 0].astype(np.int64),
                "y": rows[:, 1],
                "x": rows[:, 2],
                "sigma": rows[:, 3],
            }
        )


#: The seed's GPU spelling: the same detector (its device is ``"auto"``: a GPU where the
#: offload model says so).
ParticleDetectorGPU = ParticleDetector


def synthetic_movie(
    movie_size: Sequence[int] = (100, 256, 256), n_particles: int = 100, seed: int = 7
) -> np.ndarray:
    """A seeded ``uint16`` movie of Gaussian spots (σ 1.5) on a noisy background."""
    try:
        t, h, w = (operator.index(v) for v in movie_size)
    except (TypeError, ValueError):
        raise InvalidInput(
            f"movie_size is (frames, height, width), three whole numbers, got {movie_size!r}"
        ) from None
    if min(t, h, w) < 1:
        raise InvalidInput(f"movie_size must be positive, got {tuple(movie_size)}")
    n_particles = int(n_particles)
    if n_particles < 0:
        raise InvalidInput(f"n_particles must not be negative, got {n_particles}")
    # the float32 movie, numpy's float64 noise before its cast, and the uint16 result (a
    # product beyond 64 bits is no less refused)
    _native.check_host_allocation(
        min(t * h * w * (4 + 8 + 2), 2**64 - 1), f"a synthetic movie of {t}x{h}x{w} frames"
    )
    # the command line's bound (`bench detect --particles`): each spot is drawn in Python
    if n_particles > 10**7:
        raise InvalidInput(f"n_particles must be at most 10**7, got {n_particles}")
    rng = np.random.default_rng(seed)
    out = rng.normal(200.0, 10.0, size=(t, h, w)).astype(np.float32)
    r = 5
    ky, kx = np.mgrid[-r : r + 1, -r : r + 1]
    for i in range(t):
        ys = rng.uniform(r, h - r - 1, n_particles) if h > 2 * r + 1 else np.full(n_particles, h // 2)
        xs = rng.uniform(r, w - r - 1, n_particles) if w > 2 * r + 1 else np.full(n_particles, w // 2)
        for y0, x0 in zip(ys, xs):
            yi, xi = int(y0), int(x0)
            dy, dx = y0 - yi, x0 - xi
            spot = 2000.0 * np.exp(-((ky - dy) ** 2 + (kx - dx) ** 2) / (2 * 1.5**2))
            y_lo, x_lo = max(yi - r, 0), max(xi - r, 0)
            y_hi, x_hi = min(yi + r + 1, h), min(xi + r + 1, w)
            out[i, y_lo:y_hi, x_lo:x_hi] += spot[
                y_lo - (yi - r) : y_hi - (yi - r), x_lo - (xi - r) : x_hi - (xi - r)
            ]
    return np.clip(out, 0, 65535).astype(np.uint16)


def benchmark(
    movie_size: Sequence[int] = (1000, 512, 512),
    n_particles: int = 100,
    batch_sizes: Sequence[int] = (1, 2, 4, 8),
    device: str = "auto",
    *,
    repeats: int = 1,
    verbose: bool = True,
):
    """The seed's ``benchmark_gpu``: detection (the :class:`ParticleDetector` preset) of a
    synthetic movie of ``movie_size`` with ``n_particles`` per frame, once per batch size on
    ``device``, timed (best of ``repeats``). Returns a table ``batch_size, seconds,
    frames_per_s, particles, device`` and prints it (``verbose``). The default size is the
    seed's (1000 frames of 512×512: about 500 MB and minutes on a CPU)."""
    from . import _table, last_decision  # noqa: PLC0415

    sizes = [int(b) for b in batch_sizes]
    if not sizes or min(sizes) < 1:
        raise InvalidInput(f"batch_sizes must be positive, got {list(batch_sizes)}")
    movie = synthetic_movie(movie_size, n_particles)
    rows = {"batch_size": [], "seconds": [], "frames_per_s": [], "particles": [], "device": []}
    for b in sizes:
        det = ParticleDetector(batch_size=b, device=device)
        best, found = float("inf"), 0
        for _ in range(max(1, int(repeats))):
            t0 = time.perf_counter()
            found = len(det.detect_movie(movie))
            best = min(best, time.perf_counter() - t0)
        used = device
        if str(device).strip().lower() == "auto":
            d = last_decision()
            used = d["device"] if d else "cpu"
        rows["batch_size"].append(b)
        rows["seconds"].append(best)
        rows["frames_per_s"].append(movie.shape[0] / best)
        rows["particles"].append(found)
        rows["device"].append(used)
    table = _table({k: np.asarray(v) for k, v in rows.items()})
    if verbose:
        print_benchmark_results(table)
    return table


def print_benchmark_results(results) -> None:
    """Print a :func:`benchmark` table."""
    cols = ["batch_size", "seconds", "frames_per_s", "particles", "device"]
    print(f"{'batch':>6} {'seconds':>10} {'frames/s':>10} {'particles':>10}  device")
    n = len(results["batch_size"])
    for i in range(n):
        b, s, f, p, d = (results[c][i] for c in cols)
        print(f"{int(b):>6} {float(s):>10.3f} {float(f):>10.1f} {int(p):>10}  {d}")
