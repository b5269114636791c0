"""``ab.blob_log`` is scikit-image's ``blob_log`` on one n-D image: a 3-D array is a volume
(with a sigma per axis for anisotropic blobs); movies are ``ab.batch_blob_log``."""

import csv
import os
import pathlib

import numpy as np
import pytest

import arraybridge as ab

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIX = pathlib.Path(os.environ.get("ARRAYBRIDGE_FIXTURES", ROOT / "fixtures")) / "detect" / "blob_log_nd"


def _value(v):
    v = v.strip()
    if v in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[v]
    if v.startswith("("):
        return tuple(float(x) if "." in x else int(x) for x in v.strip("()").split())
    return float(v) if "." in v or "e" in v else int(v)


def cases():
    with open(FIX / "cases.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("case", cases(), ids=lambda c: c['case'])
def test_volumes_equal_the_fixture_rows(case):
    image = np.load(FIX / f"{case['image']}.npy")
    kw = {k: _value(v) for k, v in case.items() if k not in ("image", "case", "rows", "pair_order_free")}
    name = case['case']
    want_file = FIX / f"{name}__ascending_pairs.csv"
    if not want_file.exists():
        want_file = FIX / f"{name}.csv"
    want = np.loadtxt(want_file, delimiter=",", skiprows=1, ndmin=2)
    got = ab.blob_log(image, **kw)
    if image.ndim == 2 and np.ndim(kw.get("min_sigma", 1)) == 0 and np.ndim(kw.get("max_sigma", 50)) == 0:
        pytest.skip("2-D with one sigma is the frame path (tested against its own fixtures)")
    assert got.shape == want.reshape(-1, got.shape[1]).shape, name
    np.testing.assert_array_equal(got, want.reshape(got.shape), err_msg=name)


def test_a_volume_equals_skimage_here():
    skf = pytest.importorskip("skimage.feature")
    rng = np.random.default_rng(5)
    z, y, x = np.mgrid[:20, :32, :32]
    vol = rng.normal(0.0, 0.01, size=(20, 32, 32))
    for c in [(5, 8, 9), (12, 20, 22), (8, 25, 6)]:
        vol += np.exp(-0.5 * (((z - c[0]) / 3.0) ** 2 + ((y - c[1]) / 1.5) ** 2 + ((x - c[2]) / 1.5) ** 2))
    vol = vol.astype(np.float32)
    for kw in [dict(max_sigma=4, threshold=0.05), dict(min_sigma=(2, 1, 1), max_sigma=(4, 2, 2), num_sigma=5, threshold=0.05)]:
        np.testing.assert_array_equal(ab.blob_log(vol, **kw), skf.blob_log(vol, **kw), err_msg=str(kw))


def test_an_anisotropic_2d_image_and_border_true_follow_skimage():
    skf = pytest.importorskip("skimage.feature")
    frame = np.load(ROOT / "fixtures" / "detect" / "blob_log" / "hisnr_f32.npy")[:96, :96]
    kw = dict(min_sigma=(1, 2), max_sigma=(2, 4), num_sigma=4, threshold=0.05)
    np.testing.assert_array_equal(ab.blob_log(frame, **kw), skf.blob_log(frame, **kw))
    kw = dict(max_sigma=3, threshold=0.05, exclude_border=True)
    np.testing.assert_array_equal(ab.blob_log(frame, **kw), skf.blob_log(frame, **kw))


def test_a_movie_of_volumes_and_the_device_rule():
    vol = np.load(FIX / "small_f32.npy")
    one = ab.blob_log(vol, min_sigma=(2, 1, 1), max_sigma=(4, 2, 2), num_sigma=4, threshold=0.02)
    movie = np.stack([vol, vol])
    rows = ab.batch_blob_log(movie, min_sigma=(2, 1, 1), max_sigma=(4, 2, 2), num_sigma=4, threshold=0.02)
    assert rows.shape == (2 * len(one), 1 + one.shape[1])
    np.testing.assert_array_equal(rows[rows[:, 0] == 1][:, 1:], one)
    with pytest.raises(ab.ArrayBridgeError, match="unknown device|device"):
        ab.blob_log(vol, device="opencl:0,opencl:1")


def test_a_volume_on_opencl_gives_the_cpus_rows():
    """The scale space of a volume on OpenCL (the CPU's arithmetic in float64): the CPU's rows,
    for a host volume, a volume already on the device (``auto`` runs it there) and anisotropic
    sigmas."""
    if "opencl:0" not in [d["device"] for d in ab.devices()]:
        pytest.skip("no opencl:0")
    vol = np.load(FIX / "small_f32.npy")
    for kw in (
        dict(min_sigma=(2, 1, 1), max_sigma=(4, 2, 2), num_sigma=4, threshold=0.02),
        dict(max_sigma=3, threshold=None, threshold_rel=0.1),
    ):
        cpu = ab.blob_log(vol, device="cpu", **kw)
        assert len(cpu) > 0
        np.testing.assert_array_equal(ab.blob_log(vol, device="opencl:0", **kw), cpu)
        np.testing.assert_array_equal(ab.blob_log(vol.astype(np.float64), device="opencl:0", **kw),
                                      ab.blob_log(vol.astype(np.float64), device="cpu", **kw))
    on_cl = ab.convert(vol, "opencl:0")
    np.testing.assert_array_equal(ab.blob_log(on_cl, device="auto", **kw), cpu)
    with pytest.raises(ab.InvalidInput, match="axes"):
        ab.blob_log(vol, min_sigma=(1, 2))
