"""ab.locate on 3-D volumes and with sizes per axis, and ab.batch on movies of volumes, against
trackpy 0.7 run here on seeded spots with noise (issue 31)."""

import warnings

import numpy as np
import pytest

import arraybridge as ab

pd = pytest.importorskip("pandas")
tp = pytest.importorskip("trackpy")


def spots(shape, n, sigma, seed, amp=1000.0, noise=20.0):
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*[np.arange(s, dtype=float) for s in shape], indexing="ij")
    img = np.full(shape, 100.0)
    lo = np.full(len(shape), 2.0)
    for c in rng.uniform(lo, np.array(shape) - 2, size=(n, len(shape))):
        r2 = sum(((g - ci) / si) ** 2 for g, ci, si in zip(grids, c, sigma))
        img += amp * rng.uniform(0.5, 1.0) * np.exp(-0.5 * r2)
    img += rng.normal(0, noise, size=shape)
    return np.clip(img, 0, 65535).astype(np.uint16)


def trackpy_locate(img, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tp.locate(img, *args, engine="python", **kw)


def same(got, want):
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want)
    np.testing.assert_allclose(
        got.to_numpy(float), want.to_numpy(float), rtol=1e-10, atol=1e-12, equal_nan=True
    )


@pytest.mark.parametrize(
    "diameter,kw",
    [(5, {}), ((7, 5, 5), {}), (5, {"separation": (3, 6, 6)}), ((7, 5, 5), {"characterize": False}),
     (5, {"noise_size": (1, 1.5, 1.5)}), (5, {"topn": 4, "minmass": 100})],
)
def test_a_volume_is_one_volume_as_trackpy(diameter, kw):
    vol = spots((16, 40, 40), 12, (2.0, 1.3, 1.3), seed=1)
    got = ab.locate(vol, diameter, **kw)
    assert list(got.columns)[:3] == ["z", "y", "x"] and "frame" not in got.columns
    assert len(got) > 3
    same(got, trackpy_locate(vol, diameter, **kw))
    if diameter == (7, 5, 5) and kw.get("characterize", True):
        assert {"size_z", "size_y", "size_x", "ep_z", "ep_y", "ep_x"} <= set(got.columns)
        assert got["ecc"].isna().all()


@pytest.mark.parametrize("dtype", [np.uint16, np.uint8, np.float32, np.float64])
def test_a_diameter_per_axis_on_an_image_as_trackpy(dtype):
    img = spots((64, 80), 25, (2.0, 1.2), seed=2).astype(np.float64)
    if dtype == np.uint8:
        img = np.clip(img / 6, 0, 255)
    elif dtype in (np.float32, np.float64):
        img = img / img.max()
    img = img.astype(dtype)
    got = ab.locate(img, (7, 5), separation=(6, 5))
    assert list(got.columns)[:5] == ["y", "x", "mass", "size_y", "size_x"]
    assert len(got) > 5
    same(got, trackpy_locate(img, (7, 5), separation=(6, 5)))


def test_one_size_per_axis_is_the_2d_path():
    img = spots((64, 80), 25, (1.5, 1.5), seed=3)
    pd.testing.assert_frame_equal(ab.locate(img, (7, 7), separation=(8, 8)), ab.locate(img, 7))


def test_batch_of_volumes_and_of_anisotropic_frames():
    movie = np.stack([spots((12, 32, 32), 6, (2.0, 1.3, 1.3), seed=s) for s in range(3)])
    got = ab.batch(movie, (7, 5, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = pd.concat(
            [trackpy_locate(v, (7, 5, 5)).assign(frame=t) for t, v in enumerate(movie)],
            ignore_index=True,
        )
    same(got, want)
    frames = np.stack([spots((48, 48), 10, (2.0, 1.2), seed=10 + s) for s in range(3)])
    got2 = ab.batch(frames, (7, 5), chunk_frames=2)
    want2 = pd.concat(
        [trackpy_locate(f, (7, 5)).assign(frame=t) for t, f in enumerate(frames)],
        ignore_index=True,
    )
    same(got2, want2)


def test_volumes_on_a_device_give_the_cpus_features_and_bad_sizes_are_refused():
    """A volume's bandpass on OpenCL (float64, the CPU's order): the CPU's features bit for
    bit, for a host volume, a volume already on the device (``auto`` runs it there), a 2-D image
    with sizes per axis, u16 and float32 pixels, inverted; more than one device is refused."""
    vol = spots((12, 32, 32), 6, (2.0, 1.3, 1.3), seed=5)
    assert len(ab.locate(vol, 5, device="cpu")) == len(ab.locate(vol, 5))
    with pytest.raises(ab.ArrayBridgeError, match="device"):
        ab.locate(vol, 5, device="opencl:0,opencl:1")
    if "opencl:0" in [d["device"] for d in ab.devices()]:
        u16 = vol.astype(np.uint16)
        f32 = (vol / vol.max()).astype(np.float32)
        for img, d, kw in [
            (u16, 5, {}),
            (u16, (7, 5, 5), dict(invert=True, smoothing_size=(9, 7, 7))),
            (f32, 5, dict(noise_size=(1, 1.5, 1.5))),
            (u16[0], (7, 5), {}),
        ]:
            cpu = ab.locate(img, d, device="cpu", **kw)
            assert len(cpu) > 0
            pd.testing.assert_frame_equal(ab.locate(img, d, device="opencl:0", **kw), cpu)
        on_cl = ab.convert(u16, "opencl:0")
        pd.testing.assert_frame_equal(ab.locate(on_cl, 5, device="auto"), ab.locate(u16, 5))
    for call, name in [
        (lambda: ab.locate(vol, (5, 5)), "diameter"),
        (lambda: ab.locate(vol, (5, 4, 5)), "diameter"),
        (lambda: ab.locate(vol, 5, separation=(1, 2)), "separation"),
        (lambda: ab.locate(vol, 5, smoothing_size=(7, 6, 7)), "smoothing_size"),
        (lambda: ab.locate(vol, 5, noise_size=(1, 9, 1)), "noise_size"),
        (lambda: ab.locate(vol, (7, 5, 5), maxsize=2), "anisotropic"),
        (lambda: ab.locate(vol[None], 5), "batch"),
    ]:
        with pytest.raises(ab.InvalidInput, match=name):
            call()
