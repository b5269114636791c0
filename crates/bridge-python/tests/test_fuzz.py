"""A fuzz harness over the Python entry points (issue 32): seeded random calls of every binding
with hostile inputs (empty, 1-D and 4-D arrays, NaN and infinities, every dtype, broadcast and
strided views, device arrays, bogus devices) and hostile parameters (zero, negative, NaN, huge,
wrong types). Every call must return or raise a typed error: an ``arraybridge`` error
(``InvalidInput``, ``OutOfMemory``, ``BackendUnavailable``) or a ``TypeError`` for an argument
of the wrong Python type; never another exception, a crash or a hang. The host budget is capped
so that no case allocates much.

``ARRAYBRIDGE_PY_FUZZ_CASES`` sets the number of cases (default 400 in the test suite; the
harness is also a script: ``python tests/test_fuzz.py 20000``)."""

import math
import os
import sys

import numpy as np
import pytest

import arraybridge as ab

ALLOWED = (ab.ArrayBridgeError, TypeError)

DTYPES = [np.uint8, np.uint16, np.int8, np.int16, np.int32, np.int64, np.uint32, np.uint64,
          np.float16, np.float32, np.float64, np.bool_, np.complex64]
NUMBERS = [0, 1, -1, 2, 3, 7, 0.5, -0.5, 1e-300, 1e300, math.nan, math.inf, -math.inf,
           2**31, 2**63 - 1, 2**64 - 1, True, None, "3", [1, 2]]
DEVICES = ["cpu", "auto", "opencl:0", "opencl:99", "cuda:0", "gpu", "", "cpu,cpu",
           "cpu,opencl:0", "all", " CPU ", "torch:cpu"]


def has(device):
    return any(d["device"] == device for d in ab.devices())


class Gen:
    def __init__(self, seed):
        self.r = np.random.default_rng(seed)

    def pick(self, xs):
        return xs[int(self.r.integers(len(xs)))]

    def array(self):
        kind = int(self.r.integers(10))
        shapes = [(0,), (5,), (0, 4), (3, 0), (1, 1), (16, 16), (3, 20, 24), (2, 9, 9),
                  (2, 2, 8, 8), (1, 31, 17), (0, 8, 8)]
        shape = self.pick(shapes)
        dt = self.pick(DTYPES)
        if kind == 0:
            return np.broadcast_to(np.asarray(1, dtype=dt), (2**14, 2**14))
        with np.errstate(all="ignore"):
            x = (self.r.random(shape) * 300).astype(dt)
            if np.issubdtype(dt, np.floating) and x.size and kind in (1, 2):
                x.flat[int(self.r.integers(x.size))] = self.pick([np.nan, np.inf, -np.inf])
        if kind == 3 and x.ndim >= 2:
            x = x[..., ::2]
        if kind == 4 and x.ndim >= 2:
            x = np.swapaxes(x, -1, -2)
        if kind == 5 and has("opencl:0") and x.dtype in (np.uint8, np.uint16, np.float32):
            try:
                return ab.convert(x, "opencl:0")
            except ALLOWED:
                return x
        return x

    def num(self):
        return self.pick(NUMBERS)


def case(g):
    """One random call; returns its name (for messages)."""
    which = int(g.r.integers(12))
    x = g.array()
    dev = g.pick(DEVICES)
    if which == 0:
        g.last = "convert"
        ab.convert(x, dev, to=g.pick(["array", "numpy", "same", "jax", "bogus"]),
                   copy=g.pick([None, True, False]))
        return "convert"
    if which == 1:
        g.last = "blob_log"
        ab.blob_log(x, min_sigma=g.num(), max_sigma=g.num(), num_sigma=g.num(),
                    threshold=g.num(), overlap=g.num(), threshold_rel=g.num(),
                    exclude_border=g.pick([False, 0, 1, (1, 2), (1, 2, 3), -1, True]),
                    prescale=g.pick(["legacy", "none", "minmax", "range:0,1", "range:x", ""]),
                    device=dev, batch_size=g.num())
        return "blob_log"
    if which == 2:
        g.last = "locate"
        ab.locate(x, g.num(), minmass=g.num(), maxsize=g.num(), separation=g.num(),
                  noise_size=g.num(), smoothing_size=g.num(), threshold=g.num(),
                  percentile=g.num(), topn=g.num(), characterize=g.pick([True, False]),
                  device=dev, batch_size=g.num())
        return "locate"
    if which == 3:
        g.last = "link"
        n = int(g.r.integers(0, 30))
        table = {"frame": g.r.integers(0, 5, n).astype(g.pick([np.int64, np.float64, np.int32])),
                 "y": g.r.random(n) * 50, "x": g.r.random(n) * 50}
        if n and g.r.random() < 0.3:
            table["y"][0] = g.pick([np.nan, np.inf])
        ab.link(table, g.num(), memory=g.num(), max_subnet=g.pick([None, 0, 1, 5]),
                adaptive_stop=g.pick([None, 0.5, -1.0, math.nan]),
                adaptive_step=g.pick([0.95, 0.0, 1.5]),
                link_strategy=g.pick([None, "auto", "drop", "x"]))
        return "link"
    if which == 4:
        g.last = "paco"
        t = int(g.r.integers(0, 6))
        cube = g.r.normal(size=(t, 16, 16)) * g.pick([1.0, 1e-200, 1e200, math.nan])
        ab.paco(cube, g.r.random(max(t + int(g.r.integers(-1, 2)), 0)) * 90,
                g.pick([np.ones((5, 5)), np.ones((4, 4)), np.zeros((5, 5)), np.ones(5)]),
                radius=g.pick([1, 2, 0, 40]), fwhm=g.pick([None, 2.0, 0.0, -1.0, math.nan]),
                subpixel=g.pick(["off", "table", "table:0", "fft", "spline5", "x"]),
                top=g.pick([1, 0, 5]), device=g.pick(["cpu", "auto", "opencl:0", "opencl:9"]))
        return "paco"
    if which == 5:
        g.last = "batch_blob_log"
        ab.batch_blob_log(x, chunk_frames=g.pick([None, 1, 0, -3]), max_sigma=g.num(),
                          device=g.pick(["cpu", "auto"]))
        return "batch_blob_log"
    if which == 6:
        g.last = "memory"
        ab.memory_stats(dev)
        ab.free_pools(dev)
        return "memory"
    if which == 7:
        g.last = "set_memory_limit"
        ab.set_memory_limit(g.pick(["opencl:0", "cuda:0", "cpu", "opencl:5"]),
                            g.pick([None, 0.5, 1 << 20, 0, -1, 1.5, math.nan, True]))
        ab.set_memory_limit("opencl:0", None) if has("opencl:0") else None
        return "set_memory_limit"
    if which == 8:
        g.last = "copyto"
        dst = g.array()
        if isinstance(dst, np.ndarray) and dst.flags.writeable:
            ab.copyto(dst, g.array())
        return "copyto"
    if which == 9:
        g.last = "on"
        f = ab.on(dev, to=g.pick(["same", "numpy", "array"]),
                  output=g.pick(["same", "numpy", None]))(lambda *a, **k: a[0] if a else None)
        f(x, [x, 1], k={"a": x})
        return "on"
    if which == 10:
        g.last = "unbiased_flux"
        ab.unbiased_flux(g.r.normal(size=(4, 12, 12)), g.r.random(4) * 40, np.ones((5, 5)),
                         [(g.num(), g.num())], radius=g.pick([1, 2]), fwhm=2.0,
                         eps=g.num(), max_iter=g.num(), alpha0=g.num())
        return "unbiased_flux"
    g.last = "ParticleDetector"
    ab.ParticleDetector(min_sigma=g.num(), max_sigma=g.num(), threshold_rel=g.num(),
                        batch_size=g.num(), device=dev).detect_movie(x)
    return "ParticleDetector"


def run(n, seed=12345):
    saved = ab.memory_limit()
    ab.set_memory_limit(256)
    failures = []
    try:
        g = Gen(seed)
        for i in range(n):
            g.last = "?"
            try:
                case(g)
            except ALLOWED:
                pass
            except Exception as e:  # noqa: BLE001 - the harness reports every other kind
                failures.append(f"case {i} ({g.last}): {type(e).__name__}: {e}")
    finally:
        ab.set_memory_limit(saved)
        if has("opencl:0"):
            ab.set_memory_limit("opencl:0", None)
    return failures


def test_every_entry_point_raises_only_typed_errors():
    n = int(os.environ.get("ARRAYBRIDGE_PY_FUZZ_CASES", "400"))
    failures = run(n)
    assert not failures, "\n".join(failures[:20])


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    bad = run(count, seed=int(sys.argv[2]) if len(sys.argv) > 2 else 12345)
    print("\n".join(bad) if bad else f"{count} cases: only typed errors")
    sys.exit(1 if bad else 0)
