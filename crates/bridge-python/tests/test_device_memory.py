"""Device memory from Python: memory_stats (the pool's figures), set_memory_limit(device,
fraction_or_bytes), free_pools; detection under a pool limit far below what it would hold
completes by splitting its batches, with the same rows."""

import numpy as np
import pytest

import arraybridge as ab


def has(device):
    return any(d["device"] == device for d in ab.devices())


def movie(frames, h, w, seed=3):
    """Gaussian spots on a noisy background, u16 (real-like, never all zeros)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    out = rng.integers(200, 400, size=(frames, h, w)).astype(np.float64)
    for t in range(frames):
        for _ in range(12):
            y0, x0 = rng.uniform(8, h - 8), rng.uniform(8, w - 8)
            out[t] += 5000 * np.exp(-((yy - y0) ** 2 + (xx - x0) ** 2) / 6.0)
    return out.astype(np.uint16)


@pytest.fixture
def opencl0():
    if not has("opencl:0"):
        pytest.skip("no opencl:0 here")
    ab.set_memory_limit("opencl:0", None)
    yield "opencl:0"
    ab.set_memory_limit("opencl:0", None)


def test_cpu_stats():
    s = ab.memory_stats("cpu")
    assert s["device"] == "cpu" and s["total"] > 0
    assert s["pool_reserved"] == 0 and s["allocations"] == 0
    assert ab.free_pools("cpu") == 0


def test_bad_devices_and_limits_are_typed_errors(opencl0):
    with pytest.raises(ab.InvalidInput):
        ab.memory_stats("gpu7")
    with pytest.raises((ab.BackendUnavailable, ab.InvalidInput)):
        ab.memory_stats("opencl:99")
    with pytest.raises((ab.BackendUnavailable, ab.InvalidInput)):
        ab.free_pools("opencl:99")
    for bad in [0, -1, 1.5, 0.0, 1e-300, float("nan"), True, "half"]:
        with pytest.raises(ab.InvalidInput):
            ab.set_memory_limit(opencl0, bad)
    with pytest.raises(ab.InvalidInput, match="host"):
        ab.set_memory_limit("cpu", 0.5)


def test_limits_in_bytes_and_fractions(opencl0):
    ab.set_memory_limit(opencl0, 4 << 20)
    assert ab.memory_stats(opencl0)["pool_limit"] == 4 << 20
    ab.set_memory_limit(opencl0, 0.5)
    s = ab.memory_stats(opencl0)
    assert s["pool_limit"] == s["total"] // 2
    ab.set_memory_limit(opencl0, None)
    assert ab.memory_stats(opencl0)["pool_limit"] is None


def test_detection_under_a_small_pool_limit_splits_and_gives_the_same_rows(opencl0):
    # a 64 MiB movie (2048 frames of 128x128: 64 generated, shifted 32 ways); a batch of 32
    # frames would hold ~6 MiB on the device unlimited
    base = movie(64, 128, 128)
    m = np.concatenate([np.roll(base, 3 * k, axis=2) for k in range(32)])
    assert m.nbytes == 64 << 20
    kw = dict(max_sigma=3, num_sigma=5, threshold=None, threshold_rel=0.2, device=opencl0)
    free = ab.batch_blob_log(m, batch_size=32, **kw)
    ab.free_pools(opencl0)
    limit = 4 << 20
    ab.set_memory_limit(opencl0, limit)
    before = ab.memory_stats(opencl0)
    assert before["pool_reserved"] == 0
    limited = ab.batch_blob_log(m, batch_size=32, **kw)
    np.testing.assert_array_equal(limited, free)
    s = ab.memory_stats(opencl0)
    assert s["pool_limit"] == limit
    assert 0 < s["pool_peak"] <= limit, s
    assert s["pool_in_use"] == 0, s
    released = ab.free_pools(opencl0)
    assert released == s["pool_cached"]
    after = ab.memory_stats(opencl0)
    assert after["pool_reserved"] == 0 and after["pool_cached"] == 0, after
