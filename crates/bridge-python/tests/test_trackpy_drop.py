"""trackpy's ``link_strategy='drop'`` and trackpy's ``locate`` / ``batch`` warnings: ``ab.link``
and ``ab.locate`` / ``ab.batch`` against trackpy itself, on seeded random data."""

import warnings

import numpy as np
import pytest

import arraybridge as ab

pd = pytest.importorskip("pandas")
tp = pytest.importorskip("trackpy")
from trackpy.linking import SubnetOversizeException as TrackpyOversize  # noqa: E402

tp.quiet()


def crowded_walkers(seed, frames=25, n=60, box=50.0, step=0.7, p_blink=0.08):
    """Random 2-D walkers that start and stop at random frames and blink, plus a few clusters
    that make subnets of several particles; rows of a frame in a random order."""
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0, box, size=(n, 2))
    for c in rng.uniform(5, box - 5, size=(4, 2)):
        pos = np.vstack([pos, c + rng.uniform(-1.5, 1.5, size=(5, 2))])
    start = rng.integers(0, frames // 2, size=len(pos))
    stop = start + rng.integers(frames // 3, frames, size=len(pos))
    rows = []
    for t in range(frames):
        for i in np.flatnonzero((start <= t) & (t < stop)):
            if rng.uniform() >= p_blink:
                rows.append((t, *pos[i]))
        pos = pos + rng.normal(0, step, size=pos.shape)
    df = pd.DataFrame(rows, columns=["frame", "y", "x"])
    return df.sample(frac=1, random_state=seed).sort_values("frame", kind="stable")


def same_partition(a, b):
    """Whether the ids ``a`` and ``b`` group the rows the same way (trackpy numbers the new
    tracks of a dropped subnet in its own order)."""
    a, b = np.asarray(a), np.asarray(b)
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def link_both(df, sr, **kw):
    """trackpy's and arraybridge's particle ids, or the exception class each raised."""
    out = []
    for fn in (tp.link, ab.link):
        try:
            out.append(fn(df, sr, link_strategy="drop", **kw)["particle"].to_numpy())
        except (TrackpyOversize, ab.SubnetOversizeException) as e:
            out.append(e)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("memory", [0, 2])
def test_drop_equals_trackpy_on_crowded_random_walks(seed, memory):
    df = crowded_walkers(seed)
    linked = 0
    for sr in (1.2, 1.8, 2.4):
        want, got = link_both(df, sr, memory=memory)
        if isinstance(want, Exception):
            # a subnet of more than 30 sources: both give up
            assert isinstance(got, ab.SubnetOversizeException), (seed, memory, sr)
            continue
        assert not isinstance(got, Exception), got
        assert same_partition(want, got), (seed, memory, sr)
        # subnets were met, and dropped: solving them links differently
        solved = ab.link(df, sr, memory=memory)["particle"].to_numpy()
        assert len(set(got.tolist())) > len(set(solved.tolist()))
        linked += 1
    assert linked >= 2


@pytest.mark.parametrize("seed", range(4))
def test_drop_with_adaptive_search_equals_trackpy(seed):
    # sparse walkers (linked one to one) and a dense cluster: its subnet is above 30 sources
    # (trackpy gives up without the adaptive search), split by the adaptive search down to a
    # small adaptive_stop, or still above 15 sources at a larger one (trackpy gives up)
    rng = np.random.default_rng(100 + seed)
    pos = np.vstack([rng.uniform(0, 60, size=(60, 2)), 30 + rng.uniform(0, 5, size=(30, 2))])
    rows = []
    for t in range(6):
        rows += [(t, *p) for p in pos]
        pos = pos + rng.normal(0, 0.25, size=pos.shape)
    df = pd.DataFrame(rows, columns=["frame", "y", "x"])
    want, got = link_both(df, 1.5, memory=1)
    assert isinstance(want, TrackpyOversize) and isinstance(got, ab.SubnetOversizeException)
    outcomes = []
    for stop in (0.3, 0.8, 1.4):
        want, got = link_both(df, 1.5, adaptive_stop=stop, adaptive_step=0.9, memory=1)
        if isinstance(want, Exception):
            assert isinstance(got, ab.SubnetOversizeException), (seed, stop)
            assert isinstance(got, TrackpyOversize)
            outcomes.append("raised")
        else:
            assert not isinstance(got, Exception), got
            assert same_partition(want, got), (seed, stop)
            assert len(set(got.tolist())) < 0.7 * len(df)  # many links kept
            outcomes.append("linked")
    assert outcomes == ["linked", "raised", "raised"]


def contracting_grid():
    """trackpy's test data of ``test_oversize_fail``: a 10 x 10 grid that contracts."""
    x, y = np.mgrid[0:10, 0:10].astype(float)
    rows = [(0, *p) for p in zip(y.ravel(), x.ravel())]
    rows += [(1, *p) for p in zip(0.7 * y.ravel() + 2, 0.7 * x.ravel() + 2)]
    return pd.DataFrame(rows, columns=["frame", "y", "x"])


def test_drop_oversize_raises_as_trackpy():
    df = contracting_grid()
    with pytest.raises(TrackpyOversize):
        tp.link(df, 2, link_strategy="drop")
    with pytest.raises(ab.SubnetOversizeException) as e:
        ab.link(df, 2, link_strategy="drop")
    # arraybridge's InvalidInput, and trackpy's exception since trackpy is imported
    assert isinstance(e.value, ab.InvalidInput)
    assert isinstance(e.value, TrackpyOversize)
    assert "SubnetOversizeException" in str(e.value) and "frame 1" in str(e.value)
    # the solving strategies link it
    assert len(ab.link(df, 2)) == len(df)


def test_drop_refuses_max_subnet():
    with pytest.raises(ab.InvalidInput, match="max_subnet"):
        ab.link(crowded_walkers(0), 2.0, link_strategy="drop", max_subnet=5)


def test_other_strategies_unchanged_by_drop_support():
    df = crowded_walkers(3)
    base = ab.link(df, 2.5, memory=1)["particle"].to_numpy()
    for s in ("recursive", "nonrecursive", "numba", "hybrid", "auto"):
        np.testing.assert_array_equal(
            ab.link(df, 2.5, memory=1, link_strategy=s)["particle"].to_numpy(), base
        )


# --- trackpy's warnings in locate and batch ---------------------------------------------------

TRACKPY_TEXTS = (
    "Image is completely black.",
    "Image contains no local maxima.",
    "All local maxima were in the margins.",
    "No maxima survived mass- and size-based filtering.",
    "I am interpreting the image as",
    "No maxima found in any frame.",
)


def trackpy_warnings(fn, *args, **kw):
    """The texts (of trackpy's kinds) of the UserWarnings ``fn`` emits, in order."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        fn(*args, **kw)
    out = []
    for w in rec:
        text = str(w.message)
        if any(text.startswith(t) for t in TRACKPY_TEXTS):
            assert w.category is UserWarning, text
            out.append(text)
    return out


def spots(rng, shape, n, amp, sigma=1.5, base=0):
    """``n`` Gaussian spots of peak ``amp`` on a noisy background, uint8."""
    yy, xx = np.mgrid[: shape[0], : shape[1]]
    img = base + rng.normal(0, 2, size=shape)
    for _ in range(n):
        cy, cx = rng.uniform(0, shape[0]), rng.uniform(0, shape[1])
        img += amp * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * sigma**2))
    return np.clip(img, 0, 255).astype(np.uint8)


def warning_cases():
    rng = np.random.default_rng(7)
    margin = np.ones((21, 23), np.uint8)
    margin[1, 1] = 100
    faint = np.ones((21, 23), np.uint8)
    faint[11, 13] = 10
    flat = np.full((21, 23), 9, np.uint8)
    return [
        ("black", np.zeros((21, 23), np.uint8), dict(preprocess=False)),
        ("black bandpassed", np.full((30, 31), 50, np.uint8), {}),
        ("margins", margin, {}),
        ("filtered", faint, dict(minmass=200, preprocess=False)),
        ("filtered noisy", spots(rng, (40, 44), 5, 30, base=20), dict(minmass=1e6)),
        ("size filtered", spots(rng, (40, 44), 5, 120, base=20), dict(maxsize=0.5)),
        ("no maxima (flat)", flat, dict(preprocess=False, percentile=100)),
        ("found", spots(rng, (40, 44), 6, 120, base=20), {}),
        ("colour-like width", spots(rng, (40, 4), 1, 120), {}),
        ("tiny", spots(rng, (6, 7), 1, 120), {}),
    ]


@pytest.mark.parametrize("case", warning_cases(), ids=lambda c: c[0])
def test_locate_warns_as_trackpy(case):
    _, img, kw = case
    want = trackpy_warnings(tp.locate, img, 5, **kw)
    got = trackpy_warnings(ab.locate, img, 5, **kw)
    assert got == want
    # and the features are trackpy's
    t, a = tp.locate(img, 5, **kw), ab.locate(img, 5, **kw)
    assert len(t) == len(a)


def test_batch_warns_as_trackpy_per_frame():
    rng = np.random.default_rng(3)
    frames = [
        spots(rng, (40, 44), 6, 120, base=20),
        np.zeros((40, 44), np.uint8),
        spots(rng, (40, 44), 6, 120, base=20),
        np.full((40, 44), 30, np.uint8),
    ]
    movie = np.stack(frames)
    # trackpy's batch in one process (in a pool its frames' warnings stay in the workers)
    want = trackpy_warnings(tp.batch, movie, 5, processes=1)
    assert want == ["Image is completely black.", "Image is completely black."]
    assert trackpy_warnings(ab.batch, movie, 5) == want
    # chunks of one frame: the same warnings
    assert trackpy_warnings(ab.batch, movie, 5, chunk_frames=1) == want
    # a movie without any feature: trackpy's batch warning, once, after the frames'
    empty = np.zeros((3, 20, 20), np.uint8)
    want = trackpy_warnings(tp.batch, empty, 5, minmass=1e9, processes=1)
    assert want[-1] == "No maxima found in any frame."
    assert trackpy_warnings(ab.batch, empty, 5, minmass=1e9, chunk_frames=2) == want


def test_warnings_point_at_the_caller():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ab.locate(np.zeros((21, 23), np.uint8), 5, preprocess=False)
        ab.batch(np.zeros((2, 21, 23), np.uint8), 5)
    assert rec and all(w.filename == __file__ for w in rec), [w.filename for w in rec]
