"""dask.array inputs: a dask movie is computed a chunk of frames at a time by batch_blob_log,
batch, locate and ParticleDetector, with the rows of the same movie as a NumPy array; a dask
image or volume for blob_log is computed whole after a host budget check (OutOfMemory before
anything is computed); the peak resident memory of streaming a 256 MiB dask movie grows by
much less than the movie. Skipped without dask."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import arraybridge as ab

da = pytest.importorskip("dask.array")


def spots(shape, n, seed, amplitude=3000.0, background=(100, 140), sigma=1.5):
    """A seeded uint16 image of any shape: uniform noise and ``n`` Gaussian spots."""
    rng = np.random.default_rng(seed)
    grid = np.indices(shape).astype(np.float64)
    out = rng.integers(*background, size=shape).astype(np.float64)
    for c in rng.uniform(4, np.array(shape) - 4, size=(n, len(shape))):
        d2 = sum((g - c0) ** 2 for g, c0 in zip(grid, c))
        out += amplitude * rng.uniform(0.5, 1.0) * np.exp(-d2 / (2 * sigma**2))
    return np.clip(out, 0, 65535).astype(np.uint16)


def movie(t=12, h=48, w=64, seed=5):
    return np.stack([spots((h, w), 8, seed + i) for i in range(t)])


KW = dict(max_sigma=2, num_sigma=2, threshold=None, threshold_rel=0.3, device="cpu")


def columns(table):
    names = table.columns if hasattr(table, "columns") else table.dtype.names
    return {k: np.asarray(table[k]) for k in names}


@pytest.fixture(autouse=True)
def restore_limit():
    saved = ab.memory_limit()
    yield
    ab.set_memory_limit(saved)


def test_batch_blob_log_of_a_dask_movie_gives_the_numpy_movies_rows():
    m = movie()
    want = ab.batch_blob_log(m, **KW)
    assert len(want) > 50 and len(np.unique(want[:, 0])) == len(m)
    for dchunks in [(5, -1, -1), (1, 16, 32), (-1, -1, -1)]:
        d = da.from_array(m, chunks=dchunks)
        for chunk_frames in (None, 1, 3, 5, 100):
            got = ab.batch_blob_log(d, chunk_frames=chunk_frames, **KW)
            assert np.array_equal(got, want), (dchunks, chunk_frames)
    # pixels that are converted first (signed integers, float32 with an absolute threshold)
    signed = (m // 2).astype(np.int16)
    assert np.array_equal(
        ab.batch_blob_log(da.from_array(signed, chunks=(4, -1, -1)), chunk_frames=3, **KW),
        ab.batch_blob_log(signed, **KW),
    )
    f32 = m.astype(np.float32) / 4000
    kw = dict(KW, threshold=0.05, threshold_rel=None)
    assert np.array_equal(
        ab.batch_blob_log(da.from_array(f32, chunks=(4, -1, -1)), chunk_frames=3, **kw),
        ab.batch_blob_log(f32, **kw),
    )
    # a 2-D dask image is a movie of one frame, as a 2-D array is
    assert np.array_equal(
        ab.batch_blob_log(da.from_array(m[2], chunks=16), **KW), ab.batch_blob_log(m[2], **KW)
    )
    # the seed's detector streams it too
    det = ab.ParticleDetector(max_sigma=2, num_sigma=2, device="cpu")
    got = columns(det.detect_movie(da.from_array(m, chunks=(5, -1, -1))))
    want_t = columns(det.detect_movie(m))
    assert set(got) == set(want_t)
    for k in want_t:
        assert np.array_equal(got[k], want_t[k]), k


def test_batch_and_locate_of_a_dask_movie_give_the_numpy_movies_table():
    m = movie(t=9)
    d = da.from_array(m, chunks=(4, -1, -1))
    want = columns(ab.batch(m, 5, device="cpu"))
    assert len(want["y"]) > 30
    for got in [
        ab.batch(d, 5, chunk_frames=3, device="cpu"),
        ab.batch(d, 5, device="cpu"),  # streamed 64 frames at a time
    ]:
        got = columns(got)
        assert list(got) == list(want)
        for k in want:
            assert np.array_equal(got[k], want[k]), k
    small = columns(ab.batch(d, 5, characterize=False, device="cpu"))
    assert list(small) == list(columns(ab.batch(m, 5, characterize=False, device="cpu")))
    # a 2-D dask image: trackpy's locate, no frame column
    got2 = columns(ab.locate(d[4], 5, device="cpu"))
    want2 = columns(ab.locate(m[4], 5, device="cpu"))
    assert list(got2) == list(want2) and "frame" not in got2
    for k in want2:
        assert np.array_equal(got2[k], want2[k]), k


def test_blob_log_of_a_dask_volume_is_the_numpy_volumes():
    vol = spots((20, 28, 36), 10, seed=11, sigma=1.6)
    cases = [
        dict(max_sigma=3, num_sigma=3, threshold=None, threshold_rel=0.2),
        dict(max_sigma=3, num_sigma=3, threshold=0.01, exclude_border=2),
        dict(min_sigma=(1, 1, 2), max_sigma=(2, 3, 3), num_sigma=3, threshold=0.01),
    ]
    for kw in cases:
        want = ab.blob_log(vol, **kw)
        assert len(want) > 3, kw
        for dchunks in [(8, 16, 16), (5, -1, 7)]:
            got = ab.blob_log(da.from_array(vol, chunks=dchunks), **kw)
            assert np.array_equal(got, want), (kw, dchunks)
    # a 2-D dask image
    img = spots((40, 56), 12, seed=3)
    assert np.array_equal(
        ab.blob_log(da.from_array(img, chunks=(16, 16)), max_sigma=3, threshold=0.01),
        ab.blob_log(img, max_sigma=3, threshold=0.01),
    )
    # a movie of volumes, computed one volume at a time
    mv = np.stack([vol, np.roll(vol, 4, axis=2), np.roll(vol, -3, axis=0)])
    kw = cases[0]
    want = ab.batch_blob_log(mv, **kw)
    assert len(np.unique(want[:, 0])) == 3
    for dchunks in [(1, 8, 16, 16), (2, -1, -1, -1)]:
        got = ab.batch_blob_log(da.from_array(mv, chunks=dchunks), **kw)
        assert np.array_equal(got, want), dchunks


def test_bad_dask_input_is_invalid_input():
    m = movie(t=4, h=16, w=16)
    d = da.from_array(m, chunks=(2, -1, -1))
    unknown = d[d[:, 0, 0] >= 0]  # boolean indexing: chunks of unknown size
    bad = [
        (da.from_array(np.empty((2, 8, 8), dtype=object), chunks=1), "dtype object"),
        (da.zeros((2, 8, 8), dtype=np.complex64, chunks=4), "dtype complex64"),
        (unknown, "compute_chunk_sizes"),
    ]
    for x, msg in bad:
        for call in [
            lambda: ab.batch_blob_log(x, **KW),
            lambda: ab.batch(x, 5, device="cpu"),
            lambda: ab.locate(x, 5, device="cpu"),
            lambda: ab.blob_log(x, max_sigma=2),
            lambda: ab.ParticleDetector(device="cpu").detect_movie(x),
        ]:
            with pytest.raises(ab.InvalidInput, match=msg):
                call()
    for x in [da.zeros((10,), dtype=np.uint16), da.zeros((1, 2, 8, 8, 8), dtype=np.uint16)]:
        with pytest.raises(ab.InvalidInput, match=r"\(T, H, W\)"):
            ab.batch_blob_log(x, **KW)
        with pytest.raises(ab.InvalidInput, match=r"\(T, H, W\)"):
            ab.batch(x, 5, device="cpu")
    with pytest.raises(ab.InvalidInput, match="chunk_frames"):
        ab.batch_blob_log(d, chunk_frames=0, **KW)


def test_what_is_computed_whole_is_checked_against_the_host_budget_first():
    computed = []

    def mark(x):
        if x.size > 1:  # dask calls it on tiny arrays to learn the result's type
            computed.append(x.shape)
        return x

    ab.set_memory_limit(16)
    vol = da.zeros((64, 512, 512), dtype=np.float32, chunks=(8, 512, 512)).map_blocks(mark)
    with pytest.raises(ab.OutOfMemory) as e:
        ab.blob_log(vol, max_sigma=2, num_sigma=2)  # 64 MiB
    msg = str(e.value)
    for part in ["blob_log", "dask array of shape (64, 512, 512) (float32)", "only 16.0 MiB fit"]:
        assert part in msg, msg
    # a movie: a piece of chunk_frames frames is checked before it is computed
    mv = da.zeros((32, 512, 512), dtype=np.float64, chunks=(4, 512, 512)).map_blocks(mark)
    with pytest.raises(ab.OutOfMemory, match=r"frames 0\.\.32 of a dask array"):
        ab.batch_blob_log(mv, chunk_frames=32, **KW)  # 64 MiB at once
    with pytest.raises(ab.OutOfMemory, match="paco: cube"):
        ab.paco(vol, np.linspace(0, 90, 64), np.ones((5, 5)), fwhm=4)
    assert computed == []
    # a piece that fits is computed and detected
    rows = ab.batch_blob_log(mv[:4], chunk_frames=2, **KW)
    assert rows.shape[1] == 4 and computed


CHILD = textwrap.dedent(
    """
    import resource, sys, numpy as np, dask.array as da, arraybridge as ab
    T, H, W, C = 128, 512, 512, 8  # float64: 256 MiB, never materialized
    yy, xx = np.mgrid[0:H, 0:W]

    def block(block_info=None):
        info = block_info[None]
        t0 = info["array-location"][0][0]
        out = np.random.default_rng(t0).normal(100.0, 5.0, size=info["chunk-shape"])
        for i in range(out.shape[0]):
            rng = np.random.default_rng(1000 + t0 + i)
            for y0, x0 in rng.uniform(10, H - 10, size=(6, 2)):
                y, x = int(y0), int(x0)
                win = (slice(y - 6, y + 7), slice(x - 6, x + 7))
                out[i][win] += 3000 * np.exp(-((yy[win] - y0) ** 2 + (xx[win] - x0) ** 2) / 4.0)
        return out

    movie = da.map_blocks(block, chunks=((C,) * (T // C), (H,), (W,)), dtype=np.float64)
    kw = dict(max_sigma=2, num_sigma=2, threshold=None, threshold_rel=0.3, device="cpu")
    ab.batch_blob_log(movie[:2], **kw)  # warm up: pools, threads, dask's scheduler
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = ab.batch_blob_log(movie, chunk_frames=C, **kw)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((peak - base) * 1024, len(rows), len(np.unique(rows[:, 0])), movie.nbytes)
    """
)


def test_a_dask_movie_is_streamed_in_bounded_memory():
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    grew, n, frames, size = (int(v) for v in out.stdout.split())
    assert size == 256 << 20
    assert n > 0 and frames == 128
    print(f"streaming a {size >> 20} MiB dask movie: peak RSS grew by {grew / 2**20:.1f} MiB")
    assert grew < 48 << 20, f"peak resident memory grew by {grew >> 20} MiB"


def test_convert_computes_a_dask_array_after_the_budget_check():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got = ab.convert(da.from_array(x, chunks=(1, 2, 2)), "cpu", to="numpy")
    assert isinstance(got, np.ndarray) and np.array_equal(got, x)
    ab.set_memory_limit(1)
    with pytest.raises(ab.OutOfMemory, match="convert"):
        ab.convert(da.zeros((1024, 1024), dtype=np.float64, chunks=256), "cpu")
