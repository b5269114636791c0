"""Movies larger than memory from Python: batch_blob_log and batch read a .npy path chunk by
chunk from the file, a memory-mapped array chunk by chunk (its pages given back), or any
iterable of frames; the rows are those of the whole movie, and the peak resident memory of a
child interpreter grows by much less than the movie."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import arraybridge as ab


def write_movie(path, frames=128, h=512, w=512, seed=4):
    rng = np.random.default_rng(seed)
    m = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=(frames, h, w))
    yy, xx = np.mgrid[0:h, 0:w]
    spots = np.zeros((h, w))
    for y0, x0 in rng.uniform(10, min(h, w) - 10, size=(20, 2)):
        spots += 3000 * np.exp(-((yy - y0) ** 2 + (xx - x0) ** 2) / 4.0)
    for t in range(frames):
        m[t] = (rng.integers(100, 140, size=(h, w)) + np.roll(spots, t, axis=1)).astype(np.uint16)
    m.flush()
    del m


KW = dict(max_sigma=2, num_sigma=2, threshold=None, threshold_rel=0.3, device="cpu")


def test_iterables_paths_and_arrays_give_the_whole_movies_rows(tmp_path):
    path = tmp_path / "m.npy"
    write_movie(path, frames=10, h=48, w=64)
    whole = np.load(path)
    want = ab.batch_blob_log(whole, **KW)
    for src in (str(path), path, np.load(path, mmap_mode="r"), whole, (f for f in whole),
                list(whole)):
        got = ab.batch_blob_log(src, chunk_frames=3, **KW)
        np.testing.assert_array_equal(got, want)
    f_want = ab.batch(whole, 5, device="cpu")
    f_got = ab.batch(str(path), 5, chunk_frames=4, device="cpu")
    for c in ["frame", "y", "x", "mass"]:
        np.testing.assert_array_equal(np.asarray(f_got[c]), np.asarray(f_want[c]), c)
    with pytest.raises(ab.InvalidInput, match="npy"):
        ab.batch_blob_log(str(tmp_path / "m.tif"), **KW)
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not a numpy file at all")
    with pytest.raises(ab.InvalidInput, match="not a .npy"):
        ab.batch_blob_log(str(bad), **KW)
    with pytest.raises(ab.InvalidInput, match="chunk_frames"):
        ab.batch_blob_log(whole, chunk_frames=0, **KW)


CHILD = textwrap.dedent(
    """
    import resource, sys, numpy as np, arraybridge as ab
    path, mode = sys.argv[1], sys.argv[2]
    kw = dict(max_sigma=2, num_sigma=2, threshold=None, threshold_rel=0.3, device="cpu")
    ab.blob_log(np.zeros((2, 512, 512), np.uint16) + 100, **kw)  # warm up: pools, threads
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    src = path if mode == "path" else np.load(path, mmap_mode="r")
    rows = ab.batch_blob_log(src, chunk_frames=8, **kw)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((peak - base) * 1024, len(rows))
    """
)


@pytest.mark.parametrize("mode", ["path", "memmap"])
def test_a_movie_is_streamed_in_bounded_memory(tmp_path, mode):
    path = tmp_path / "big.npy"
    write_movie(path)  # 128 frames of 512x512 u16: 64 MiB
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), mode], capture_output=True, text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    grew, n = (int(v) for v in out.stdout.split())
    assert n > 0
    assert grew < 40 << 20, f"{mode}: peak resident memory grew by {grew >> 20} MiB"


def test_progress_shows_the_frames_done_and_changes_nothing(capsys):
    rng = np.random.default_rng(2)
    movie = rng.normal(100, 5, (10, 48, 48)).astype(np.float32)
    movie[:, 20:23, 20:23] += 400
    kw = dict(max_sigma=3, threshold=None, threshold_rel=0.2, device="cpu")
    want = ab.batch_blob_log(movie, chunk_frames=4, **kw)
    got = ab.batch_blob_log(movie, chunk_frames=4, progress=True, **kw)
    assert np.array_equal(got, want)
    err = capsys.readouterr().err
    try:
        import tqdm  # noqa: F401
    except ImportError:
        assert "batch_blob_log: 10/10 frames" in err, err
    else:
        assert "10/10" in err, err


def test_batch_progress_and_warnings_point_at_the_caller(capsys):
    import warnings

    rng = np.random.default_rng(5)
    movie = rng.normal(20, 2, (6, 40, 44)).clip(0, 255).astype(np.uint8)
    movie[:, 18:21, 20:23] += 150
    movie[3] = 0  # a black frame: trackpy's warning, pointing here
    want = ab.batch(movie, 5, chunk_frames=4)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = ab.batch(movie, 5, chunk_frames=4, progress=True)
    assert list(got["frame"]) == list(want["frame"])
    assert [str(w.message) for w in rec] == ["Image is completely black."]
    assert all(w.filename == __file__ for w in rec), [w.filename for w in rec]
    assert "6/6" in capsys.readouterr().err
