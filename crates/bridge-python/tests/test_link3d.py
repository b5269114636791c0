"""3-D linking: ``ab.link`` on a table with ``z, y, x`` columns equals ``trackpy.link``
(trackpy's default ``pos_columns`` when there is a ``z`` column, or explicit ones), with memory
and the adaptive search; ``pos_columns=['y', 'x']`` links the same table in 2-D."""

import numpy as np
import pytest

import arraybridge as ab

pd = pytest.importorskip("pandas")
tp = pytest.importorskip("trackpy")
tp.quiet()


def walkers_3d(seed, frames=20, n=80, box=(15.0, 30.0, 30.0), step=0.6, p_blink=0.05):
    """Random 3-D walkers that start and stop at random frames and blink, plus a dense cluster
    (subnets); rows of a frame in a random order, an index that is not 0..n."""
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0, 1, size=(n, 3)) * np.asarray(box)
    pos = np.vstack([pos, np.asarray(box) / 2 + rng.uniform(-2, 2, size=(12, 3))])
    start = rng.integers(0, frames // 2, size=len(pos))
    stop = start + rng.integers(frames // 3, frames, size=len(pos))
    rows = []
    for t in range(frames):
        for i in np.flatnonzero((start <= t) & (t < stop)):
            if rng.uniform() >= p_blink:
                rows.append((t, *pos[i]))
        pos = pos + rng.normal(0, step, size=pos.shape)
    df = pd.DataFrame(rows, columns=["frame", "z", "y", "x"])
    df = df.sample(frac=1, random_state=seed).sort_values("frame", kind="stable")
    df.index = pd.RangeIndex(1000, 1000 + len(df))
    return df


def canonical(ids):
    """Particle ids renumbered by first appearance."""
    seen = {}
    return np.array([seen.setdefault(i, len(seen)) for i in ids])


def same_tracks(got, ref):
    ref = ref.loc[got.index]
    # the partition into tracks (trackpy numbers the new tracks of a frame in its own order)
    np.testing.assert_array_equal(canonical(got["particle"]), canonical(ref["particle"]))


@pytest.mark.parametrize(
    "sr, kw",
    [
        (2.0, dict()),
        (2.0, dict(memory=3)),
        (3.0, dict(memory=1)),
        (4.0, dict(memory=1, adaptive_stop=1.0, adaptive_step=0.9)),
    ],
)
def test_link_3d_equals_trackpy(sr, kw):
    df = walkers_3d(7)
    ref = tp.link(df, sr, **kw)
    got = ab.link(df, sr, **kw)
    assert list(got.index) == list(df.index) and "particle" not in df.columns
    same_tracks(got, ref)
    # explicit pos_columns, another order of the same columns, a structured array
    explicit = ab.link(df, sr, pos_columns=["z", "y", "x"], **kw)
    np.testing.assert_array_equal(explicit["particle"], got["particle"])
    swapped = df.rename(columns={"z": "a", "x": "z"}).rename(columns={"a": "x"})
    np.testing.assert_array_equal(
        ab.link(swapped, sr, pos_columns=["x", "y", "z"], **kw)["particle"], got["particle"]
    )
    rec = df.to_records(index=False)
    np.testing.assert_array_equal(ab.link(rec, sr, **kw)["particle"], got["particle"])


def test_z_column_with_two_pos_columns_links_in_2d():
    df = walkers_3d(8)
    got = ab.link(df, 2.5, pos_columns=["y", "x"], memory=1)
    ref = tp.link(df, 2.5, pos_columns=["y", "x"], memory=1)
    same_tracks(got, ref)
    # and it is not the 3-D linking
    three = ab.link(df, 2.5, memory=1)
    assert not np.array_equal(got["particle"].values, three["particle"].values)
    two = ab.link(df.drop(columns="z"), 2.5, memory=1)
    np.testing.assert_array_equal(got["particle"], two["particle"])


def test_1d_and_bad_column_counts():
    # 1-D: walkers spread along x (a dense cluster in the middle)
    df = walkers_3d(9, n=30, box=(1.0, 1.0, 300.0))
    same_tracks(ab.link(df, 2.0, pos_columns=["x"]), tp.link(df, 2.0, pos_columns=["x"]))
    df["w"] = 0.0
    with pytest.raises(ab.InvalidInput, match="one to three position columns"):
        ab.link(df, 2.0, pos_columns=["w", "z", "y", "x"])
    with pytest.raises(ab.InvalidInput, match="one to three position columns"):
        ab.link(df, 2.0, pos_columns=[])
    with pytest.raises(ab.InvalidInput, match="no column 'q'"):
        ab.link(df, 2.0, pos_columns=["q", "y", "x"])


@pytest.mark.parametrize(
    "sr, kw",
    [((3.0, 2.0, 2.0), dict()), ((1.5, 2.5, 2.5), dict(memory=2)), ((4.0, 3.0, 3.0), dict(adaptive_stop=1.0, adaptive_step=0.9))],
)
def test_a_search_range_per_axis_is_trackpys(sr, kw):
    df = walkers_3d(11)
    ref = tp.link(df, sr, **kw)
    got = ab.link(df, sr, **kw)
    same_tracks(got, ref)
    # equal values are one range
    np.testing.assert_array_equal(
        ab.link(df, (2.0, 2.0, 2.0))["particle"], ab.link(df, 2.0)["particle"]
    )


def test_a_search_range_per_axis_is_checked():
    df = walkers_3d(12)
    for bad in [(2.0, 1.0), (2.0, 0.0, 1.0), (2.0, float("nan"), 1.0), "2", (), object()]:
        with pytest.raises(ab.InvalidInput, match="search_range"):
            ab.link(df, bad)
    with pytest.raises(ab.InvalidInput, match="to_eucl"):
        ab.link(df, (2.0, 1.0, 1.0), to_eucl=lambda p: p)
