"""The pipelines against their references: ab.blob_log == skimage.feature.blob_log,
ab.link == trackpy.link, ab.locate == the trackpy fixture, ab.paco == the `arraybridge paco`
command's FITS maps; Ctrl-C; and the README's Python quick start."""

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import arraybridge as ab

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIX = pathlib.Path(os.environ.get("ARRAYBRIDGE_FIXTURES", ROOT / "fixtures"))


def sorted_rows(a):
    a = np.asarray(a, dtype=np.float64)
    return a[np.lexsort(a.T[::-1])] if len(a) else a


@pytest.mark.parametrize("name", ["hisnr_f32", "hisnr_u16", "overlap_f32"])
def test_blob_log_equals_skimage_on_fixtures(name):
    feature = pytest.importorskip("skimage.feature")
    img = np.load(FIX / "detect" / "blob_log" / f"{name}.npy")[:160, :160]
    kw = dict(min_sigma=1, max_sigma=4, num_sigma=6, threshold=None, threshold_rel=0.1)
    ref = feature.blob_log(img, **kw)
    for device in ["cpu", "auto"]:
        got = ab.blob_log(img, device=device, **kw)
        assert got.shape[1] == 3
        np.testing.assert_allclose(sorted_rows(got), sorted_rows(ref), rtol=1e-6)


def test_blob_log_equals_skimage_on_its_own_test_image():
    data = pytest.importorskip("skimage.data")
    feature = pytest.importorskip("skimage.feature")
    img = data.hubble_deep_field()[:200, :200, 0]  # uint8, scikit-image's blob example
    kw = dict(max_sigma=10, num_sigma=5, threshold=0.1)
    np.testing.assert_allclose(
        sorted_rows(ab.blob_log(img, **kw)), sorted_rows(feature.blob_log(img, **kw)), rtol=1e-6
    )


def test_blob_log_movie_rows_and_opencl():
    movie = np.load(FIX / "detect" / "movie" / "movie_u16.npy")[:3, :96, :96]
    kw = dict(max_sigma=3, threshold=None, threshold_rel=0.2)
    rows = ab.batch_blob_log(movie, **kw)
    assert rows.shape[1] == 4
    for t in range(3):
        np.testing.assert_array_equal(rows[rows[:, 0] == t][:, 1:], ab.blob_log(movie[t], **kw))
    if "opencl:0" in [d["device"] for d in ab.devices()]:
        on_cl = ab.batch_blob_log(movie, device="opencl:0", **kw)
        np.testing.assert_allclose(sorted_rows(on_cl), sorted_rows(rows), rtol=1e-5)
        # A movie already on the device is read there.
        resident = ab.convert(movie, "opencl:0")
        np.testing.assert_allclose(
            sorted_rows(ab.batch_blob_log(resident, device="auto", **kw)), sorted_rows(rows), rtol=1e-5
        )


def test_locate_on_an_opencl_movie_reads_it_in_place():
    if "opencl:0" not in [d["device"] for d in ab.devices()]:
        pytest.skip("no OpenCL device")
    movie = np.load(FIX / "detect" / "movie" / "movie_u16.npy")[:3, :96, :96]
    names = ("frame", "y", "x", "mass", "size", "ecc", "signal", "raw_mass", "ep")
    cpu = ab.batch(movie, 7, device="cpu")
    assert len(np.asarray(cpu["y"])) > 5
    for host in (movie, movie.astype(np.float32)):
        want = ab.batch(host, 7, device="cpu")
        # a movie already on the device is read there by the device locate (float64 on PoCL:
        # the CPU's features bit for bit)
        got = ab.batch(ab.convert(host, "opencl:0"), 7, device="opencl:0")
        for k in names:
            np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]), err_msg=k)


def test_locate_equals_trackpy_fixture():
    pd = pytest.importorskip("pandas")
    movie = np.load(FIX / "detect" / "movie" / "movie_u16.npy")[:2]
    ref = pd.read_csv(FIX / "detect" / "movie" / "movie__locate_d7.csv")
    ref = ref[ref.frame < 2].reset_index(drop=True)
    got = ab.batch(movie, 7, minmass=300)
    assert list(got.columns) == list(ref.columns)
    np.testing.assert_allclose(got.to_numpy(float), ref.to_numpy(float), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("kw", [{"maxsize": float("nan")}, {"threshold": float("nan")},
                                {"threshold": float("inf")}])
def test_locate_refuses_nan_limits(kw):
    # NaN compares false with every size and pixel: it used to remove every feature silently
    movie = np.load(FIX / "detect" / "movie" / "movie_u16.npy")[:1]
    with pytest.raises(ab.InvalidInput, match=next(iter(kw))):
        ab.batch(movie, 7, minmass=300, **kw)


def test_huge_integers_are_errors_or_empty_never_panics():
    # an exclude_border past half the frame leaves nothing to detect, however large it is; a
    # diameter past MAX_DIAMETER is refused (both overflowed: PanicException in debug builds)
    frame = np.load(FIX / "detect" / "blob_log" / "hisnr_u16.npy")
    for b in [2**32, 2**63, 2**64 - 1]:
        assert len(ab.blob_log(frame, threshold=None, threshold_rel=0.2, exclude_border=b)) == 0
    for d in [65537, 2**63 + 1, 2**64 - 1]:
        with pytest.raises(ab.InvalidInput, match="diameter"):
            ab.locate(frame, d)
    with pytest.raises(ab.InvalidInput, match="smoothing_size"):
        ab.locate(frame, 7, smoothing_size=2**64 - 1)


def test_counts_and_tolerances_out_of_range_are_refused():
    # the command line's ranges, in Python too (0 used to be taken as 1 or as "nothing")
    pd = pytest.importorskip("pandas")
    frame = np.load(FIX / "detect" / "blob_log" / "hisnr_u16.npy")
    feats = pd.DataFrame({"frame": [0, 1], "y": [1.0, 1.5], "x": [2.0, 2.5]})
    rng = np.random.default_rng(0)
    cube, angles = rng.normal(size=(12, 32, 32)), np.linspace(0, 90, 12)
    yy, xx = np.mgrid[-4:5, -4:5]
    psf = np.exp(-(yy**2 + xx**2) / 4.0)
    for call, name in [
        (lambda: ab.blob_log(frame, batch_size=0), "batch_size"),
        (lambda: ab.blob_log(frame, batch_size=100_001), "batch_size"),
        (lambda: ab.locate(frame, 7, batch_size=0), "batch_size"),
        (lambda: ab.link(feats, 5, max_subnet=0), "max_subnet"),
        (lambda: ab.paco(cube, angles, psf, top=0), "top"),
        (lambda: ab.unbiased_flux(cube, angles, psf, [(16, 20)], eps=float("nan")), "eps"),
        (lambda: ab.unbiased_flux(cube, angles, psf, [(16, 20)], eps=-1.0), "eps"),
        (lambda: ab.unbiased_flux(cube, angles, psf, [(16, 20)], alpha0=float("nan")), "alpha0"),
        (lambda: ab.unbiased_flux(cube, angles, psf, [(16, 20)], max_iter=0), "max_iter"),
    ]:
        with pytest.raises(ab.InvalidInput, match=name):
            call()


def test_absurd_sizes_and_mismatched_shapes_are_typed_errors_found_fast():
    # the second round of reliability findings (2026-11-28): each used to crash, hang, wrap or
    # be taken silently
    pd = pytest.importorskip("pandas")
    import time

    rng = np.random.default_rng(1)
    cube, angles = rng.normal(size=(12, 32, 32)), np.linspace(0, 90, 12)
    yy, xx = np.mgrid[-4:5, -4:5]
    psf = np.exp(-(yy**2 + xx**2) / 4.0)
    img = rng.random((32, 32)).astype(np.float32)
    t0 = time.perf_counter()
    for call, name in [
        # the offload estimate listed the patch's offsets before the radius was checked
        (lambda: ab.paco(cube, angles, psf, radius=10**9), "radius"),
        (lambda: ab.paco(cube, angles, psf, radius=10_000, device="auto"), "radius"),
        # the maxima's dilation padded each row by the separation (1e10: terabytes)
        (lambda: ab.locate(img, 7, separation=1e12), "separation"),
        (lambda: ab.batch(img[None], 7, separation=1e8), "separation"),
        (lambda: ab.unbiased_flux(cube, angles, psf, [(16, 20)], max_iter=10**12), "max_iter"),
        (lambda: ab.unbiased_flux(cube, angles, psf, [(float("nan"), 20)]), "finite"),
        (lambda: ab.paco(cube, angles, psf, center=(1,)), "center"),
        (lambda: ab.paco(cube, angles, psf, center=(1, 2, 3)), "center"),
        (lambda: ab.paco(cube, angles, psf, center=(float("nan"), 2)), "center"),
        (lambda: ab.locate(img, (7, 7, 7)), "diameter"),
        (lambda: ab.locate(img, (7,)), "diameter"),
        (lambda: ab.locate(img, 7, separation=(8, 8, 8)), "separation"),
        (lambda: ab.batch(img[None], (7, 7, 7)), "diameter"),
        (lambda: ab.link(pd.DataFrame({"frame": np.array([0, 1, 2**63 + 1], np.uint64),
                                       "y": [0.0] * 3, "x": [0.0] * 3}), 3), "range"),
        (lambda: ab.link(pd.DataFrame({"frame": [0.0, 1.0, 1e30], "y": [0.0] * 3,
                                       "x": [0.0] * 3}), 3), "range"),
        (lambda: ab.link(pd.DataFrame({"frame": [0, 1], "y": [0.0, 1.0],
                                       "x": [0.0, 1.0]}), 1e300), "search_range"),
        (lambda: ab.config(device_profiles={"gpu": {"flops_per_s": 1e12}}), "gpu"),
        (lambda: ab.benchmark(movie_size=(2, 32, 32), n_particles=-1, verbose=False),
         "n_particles"),
        (lambda: ab.benchmark(movie_size=(10**6, 10**4, 10**4), verbose=False), "synthetic"),
    ]:
        with pytest.raises(ab.InvalidInput if name != "synthetic" else ab.OutOfMemory,
                           match=name):
            call()
    assert time.perf_counter() - t0 < 60
    # the largest frame number int64 holds still links
    f = pd.DataFrame({"frame": np.array([0, 1, 2**63 - 1], np.uint64), "y": [0.0] * 3,
                      "x": [0.0] * 3})
    assert list(ab.link(f, 3)["frame"]) == [0, 1, 2**63 - 1]


def test_numpy_views_an_arraybridge_host_array_and_refuses_a_device_one():
    movie = (np.random.default_rng(2).random((3, 40, 40)) * 1000).astype(np.uint16)
    a = ab.convert(movie)
    x = np.asarray(a)
    assert np.shares_memory(x, movie) and x.dtype == np.uint16
    assert np.asarray(a, dtype=np.float32).dtype == np.float32
    with pytest.raises(ValueError, match="copy"):
        np.array(a, dtype=np.float32, copy=False)
    assert not np.shares_memory(np.array(a, copy=True), movie)
    # what used to fail untyped: anisotropic sizes on an arraybridge movie, a list of frames
    pd = pytest.importorskip("pandas")
    want = ab.batch(movie, (7, 5))
    pd.testing.assert_frame_equal(ab.batch(a, (7, 5)), want)
    rows = ab.batch_blob_log([ab.convert(f) for f in movie], max_sigma=3, threshold=None,
                             threshold_rel=0.3)
    np.testing.assert_array_equal(
        rows, ab.batch_blob_log(movie, max_sigma=3, threshold=None, threshold_rel=0.3))
    vols = (np.random.default_rng(3).random((2, 8, 24, 24)) * 1000).astype(np.uint16)
    pd.testing.assert_frame_equal(ab.batch(ab.convert(vols), 5), ab.batch(vols, 5))
    if "opencl:0" in [d["device"] for d in ab.devices()]:
        d = ab.convert(movie, "opencl:0")
        with pytest.raises(TypeError, match="numpy"):
            np.asarray(d)
        with pytest.raises(ab.InvalidInput, match="volumes"):
            ab.batch(ab.convert(vols, "opencl:0"), 5)


def test_drop_in_details_of_scikit_image_and_trackpy():
    # the differential sweep of 2026-11-28: scikit-image's row dtype, trackpy's topn and its
    # max_iterations / filter_before / filter_after arguments
    import warnings

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:48, :48]
    img = sum(np.exp(-((yy - y) ** 2 + (xx - x) ** 2) / (2 * s * s))
              for y, x, s in rng.uniform([5, 5, 1], [43, 43, 4], (12, 3)))
    feature = pytest.importorskip("skimage.feature")
    for dt in (np.float32, np.float16, np.float64):
        for kw in (dict(max_sigma=4, threshold=None, threshold_rel=0.1),
                   dict(max_sigma=(4, 3), threshold=None, threshold_rel=0.1)):
            got, want = ab.blob_log(img.astype(dt), **kw), feature.blob_log(img.astype(dt), **kw)
            assert got.dtype == want.dtype, (dt, kw)
            np.testing.assert_array_equal(got, want)
    # topn: trackpy's argmax for one (the first maximum), every feature by ascending mass for 0
    # ([-0:] is the whole array), the n most massive by ascending mass otherwise
    spots = (200 * img / img.max() + 5).astype(np.float64)
    every = ab.locate(spots, 5)
    by_mass = np.sort(np.asarray(every["mass"]))
    np.testing.assert_array_equal(np.asarray(ab.locate(spots, 5, topn=0)["mass"]), by_mass)
    np.testing.assert_array_equal(np.asarray(ab.locate(spots, 5, topn=3)["mass"]), by_mass[-3:])
    one = ab.locate(spots, 5, topn=1)
    assert len(one) == 1 and float(one["mass"].iloc[0]) == by_mass[-1]
    # max_iterations reaches the refinement (0: one centroid); beyond 10000 it is refused
    r = np.random.default_rng(1)
    y2, x2 = np.mgrid[:64, :64]
    noisy = r.normal(10, 2, (64, 64)) + sum(
        200 * np.exp(-((y2 - y) ** 2 + (x2 - x) ** 2) / 4.5) for y, x in r.uniform(8, 56, (6, 2)))
    assert not np.array_equal(np.asarray(ab.locate(noisy, 7, max_iterations=0)["x"]),
                              np.asarray(ab.locate(noisy, 7)["x"]))
    with pytest.raises(ab.InvalidInput, match="max_iterations"):
        ab.locate(spots, 5, max_iterations=10**9)
    with pytest.raises(ValueError, match="filter_before"):
        ab.locate(spots, 5, filter_before=True)
    with pytest.raises(ValueError, match="filter_before"):
        ab.batch(spots[None], 5, filter_before=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ab.locate(spots, 5, filter_after=True)
    assert any(x.category is DeprecationWarning and "filter_after" in str(x.message) for x in w)


def canonical(ids):
    """Particle ids renumbered by first appearance (trackpy's numbering is an implementation
    detail; the partition into tracks is what must match)."""
    seen = {}
    return np.array([seen.setdefault(i, len(seen)) for i in ids])


@pytest.mark.parametrize("memory", [0, 2])
def test_link_equals_trackpy(memory):
    pd = pytest.importorskip("pandas")
    tp = pytest.importorskip("trackpy")
    tp.quiet()
    feats = pd.read_csv(FIX / "detect" / "movie" / "movie__locate_d7.csv")
    ref = tp.link(feats, 5, memory=memory)
    got = ab.link(feats, 5, memory=memory)
    assert "particle" in got.columns and "particle" not in feats.columns
    # trackpy may reorder rows; align on the index.
    ref = ref.loc[got.index]
    np.testing.assert_array_equal(canonical(got.particle), canonical(ref.particle))
    fixture = pd.read_csv(FIX / "detect" / "movie" / f"movie__link_sr5_mem{memory}.csv")
    assert got.particle.nunique() == fixture.particle.nunique()


def _walkers_with_siblings(pd, seed, frames=30):
    """Walkers on a grid (10 apart) with, each frame, a sibling 1 away from some of them (a new
    track inside a subnet) and new particles on their own, rows of a frame shuffled: every
    subnet starts at most one track, so trackpy's numbering does not depend on a set's order."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(np.arange(8), np.arange(8), indexing="ij"), -1).reshape(-1, 2)
    pos = grid * 10.0 + 5
    rows = []
    for t in range(frames):
        pos = pos + rng.uniform(-0.5, 0.5, pos.shape)
        frame = list(pos)
        for p in pos:
            if rng.uniform() < 0.3:
                a = rng.uniform(0, 2 * np.pi)
                frame.append(p + [np.cos(a), np.sin(a)])
        for _ in range(rng.integers(0, 4)):
            frame.append(rng.integers(0, 8, 2) * 10.0 + rng.uniform(0, 1, 2))
        frame = np.array(frame)[rng.permutation(len(frame))]
        rows += [(t, *p) for p in frame]
    return pd.DataFrame(rows, columns=["frame", "y", "x"])


def test_link_numbers_new_tracks_as_trackpy_does():
    pd = pytest.importorskip("pandas")
    tp = pytest.importorskip("trackpy")
    tp.quiet()
    # a new track in a subnet (the source takes the nearer row 2) and one on its own (row 1):
    # trackpy visits the lone row's subnet first, as its subnets go by their last row
    f = pd.DataFrame({"frame": [0, 1, 1, 1], "y": [0, 0, 50, 0], "x": [0, 0.5, 50, 0.2]})
    assert list(ab.link(f, 2)["particle"]) == [0, 2, 1, 0]
    for seed in range(4):
        df = _walkers_with_siblings(pd, seed)
        np.testing.assert_array_equal(
            ab.link(df, 2.0)["particle"].values, tp.link(df, 2.0)["particle"].values
        )


def test_link_without_pandas_takes_structured_arrays():
    rec = np.zeros(4, dtype=[("frame", "i8"), ("y", "f8"), ("x", "f8")])
    rec["frame"] = [0, 0, 1, 1]
    rec["y"] = [0, 10, 0.5, 10.5]
    rec["x"] = [0, 10, 0.2, 9.8]
    out = ab.link(rec, 2)
    assert out.dtype.names == ("frame", "y", "x", "particle")
    assert out["particle"][0] == out["particle"][2] != out["particle"][1] == out["particle"][3]
    with pytest.raises(ab.InvalidInput):
        ab.link(rec, 2, pos_columns=["y", "z"])
    with pytest.raises(ab.InvalidInput):
        ab.link(rec, -1)


def test_link_refuses_multiindex_columns_with_the_fix():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({("frame", ""): [0, 1], ("y", "um"): [1.0, 1.5], ("x", "um"): [2.0, 2.5]})
    with pytest.raises(ab.InvalidInput) as e:  # was a bare TypeError
        ab.link(df, 5, pos_columns=["y_um", "x_um"], t_column="frame_")
    msg = str(e.value)
    for part in ["columns must be a flat Index", "MultiIndex", "('y', 'um')",
                 "df.columns = ['_'.join(c) for c in df.columns]"]:
        assert part in msg, msg
    # the fix the message gives works
    df.columns = ["_".join(c) for c in df.columns]
    out = ab.link(df, 5, pos_columns=["y_um", "x_um"], t_column="frame_")
    assert out["particle"][0] == out["particle"][1]


def test_link_names_columns_that_are_not_strings():
    # a dict with integer keys: the missing column is named (was a bare TypeError)
    with pytest.raises(ab.InvalidInput, match=r"no column 'frame' \(columns: 0, 1, 2\)"):
        ab.link({0: [0, 1], 1: [1.0, 1.5], 2: [2.0, 2.5]}, 5)


def read_fits(path):
    """A minimal FITS reader (primary HDU, BITPIX -64/-32): enough for the test data."""
    raw = pathlib.Path(path).read_bytes()
    header, off = {}, 0
    while True:
        block = raw[off : off + 2880].decode("ascii")
        off += 2880
        cards = [block[i : i + 80] for i in range(0, 2880, 80)]
        for c in cards:
            key = c[:8].strip()
            if c[8:10] == "= ":
                header[key] = c[10:].split("/")[0].strip()
        if any(c[:8].strip() == "END" for c in cards):
            break
    naxis = int(header["NAXIS"])
    shape = [int(header[f"NAXIS{i}"]) for i in range(naxis, 0, -1)]
    dtype = {"-64": ">f8", "-32": ">f4", "16": ">i2", "8": "u1"}[header["BITPIX"]]
    n = int(np.prod(shape))
    data = np.frombuffer(raw, dtype=dtype, count=n, offset=off).reshape(shape)
    return data.astype(np.float64) * float(header.get("BSCALE", 1)) + float(header.get("BZERO", 0))


def cli():
    exe = os.environ.get("ARRAYBRIDGE_CLI")
    if exe and pathlib.Path(exe).exists():
        return exe
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for build in ["release", "debug"]:
        cand = target / build / "arraybridge"
        if cand.exists():
            return str(cand)
    return shutil.which("arraybridge")


def test_paco_equals_the_cli_maps(tmp_path):
    exe = cli()
    if exe is None:
        pytest.skip("the arraybridge command is not built (cargo build; or set ARRAYBRIDGE_CLI)")
    d = FIX / "paco"
    files = {k: d / f"synth_adi40_64_{k}.fits" for k in ["cube", "angles", "psf"]}
    subprocess.run(
        [exe, "-q", "paco", "--cube", files["cube"], "--angles", files["angles"], "--psf",
         files["psf"], "--fwhm", "4", "--device", "cpu", "-o", tmp_path],
        check=True,
    )
    cube, angles, psf = (read_fits(files[k]) for k in ["cube", "angles", "psf"])
    r = ab.paco(cube, angles.ravel(), psf, fwhm=4, device="cpu")
    for name in ["snr", "flux", "a", "b"]:
        np.testing.assert_array_equal(getattr(r, name), read_fits(tmp_path / f"{name}.fits"))
    cands = np.genfromtxt(tmp_path / "candidates.csv", delimiter=",", names=True)
    np.testing.assert_array_equal(np.asarray(r.candidates["y"]), cands["y"].astype(int))
    np.testing.assert_array_equal(np.asarray(r.candidates["x"]), cands["x"].astype(int))
    flux = ab.unbiased_flux(cube, angles, psf, [(float(cands["y"][0]), float(cands["x"][0]))],
                            fwhm=4)
    assert np.isfinite(np.asarray(flux["flux"])).all()
    with pytest.raises(ab.InvalidInput):
        ab.paco(cube[0], angles, psf, fwhm=4)  # a 2-D cube
    with pytest.raises(ab.InvalidInput):
        ab.paco(cube, angles, psf, fwhm=4, mode="fast")


def test_ctrl_c_stops_a_long_run_between_batches():
    code = textwrap.dedent(
        """
        import signal, sys, time, numpy as np, arraybridge as ab
        # Python's own SIGINT handler: a child of a process that ignores SIGINT (a background
        # job, some CI runners) inherits the ignoring, and would not stop
        signal.signal(signal.SIGINT, signal.default_int_handler)
        movie = np.random.default_rng(0).random((2000, 128, 128), dtype=np.float32)
        print("ready", flush=True)
        t = time.time()
        try:
            # 40 scales of wide kernels: ~8 s on a release build (with 10 scales up to
            # max_sigma=6 a release build finished 4000 frames in 1.4 s, before the Ctrl-C)
            ab.batch_blob_log(movie, max_sigma=30, num_sigma=40, batch_size=2, device="cpu")
        except KeyboardInterrupt:
            print("interrupted after %.1f s" % (time.time() - t), flush=True)
            sys.exit(3)
        sys.exit(0)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    import time  # noqa: PLC0415

    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 3, out
    assert "interrupted" in out


def test_readme_python_quick_start():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```python\n(.*?)```", text, re.S)
    assert m, "README.md has a ```python quick start"
    exec(compile(m.group(1), "README.md", "exec"), {})


def test_trackpy_conventions_of_locate_and_link():
    """characterize=False gives trackpy's columns; a 2-D image has no frame column (trackpy's
    locate), a movie has one (batch); link replaces a particle column, keeps the index and
    dtypes, takes trackpy's keywords (the strategies change nothing, 'drop' too here, where
    every subnet is one particle with one candidate) and to_eucl; the adaptive search runs; a
    z column is linked in 3-D."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(4)
    yy, xx = np.mgrid[0:64, 0:64]
    movie = rng.integers(0, 40, size=(4, 64, 64)).astype(np.float64)
    for t in range(4):
        for y0, x0 in [(20, 20), (40, 44)]:
            movie[t] += 3000 * np.exp(-((yy - y0 - t) ** 2 + (xx - x0) ** 2) / 5.0)
    movie = movie.astype(np.uint16)
    one = ab.locate(movie[0], 7)
    assert "frame" not in one.columns and list(one.columns)[:3] == ["y", "x", "mass"]
    bare = ab.batch(movie, 7, characterize=False)
    assert list(bare.columns) == ["y", "x", "mass", "frame"]
    feats = ab.batch(movie, 7, minmass=1000)
    feats.index = pd.RangeIndex(100, 100 + len(feats))
    feats["frame"] = feats["frame"].astype(np.int32)
    feats["particle"] = -7  # an old linking
    base = ab.link(feats, 5)
    assert list(base.index) == list(feats.index)
    assert base["frame"].dtype == np.int32 and (base["particle"] != -7).all()
    assert base["particle"].nunique() == 2
    for kw in [dict(link_strategy="hybrid"), dict(link_strategy="numba"),
               dict(neighbor_strategy="KDTree"), dict(to_eucl=lambda p: p * 1.0),
               dict(adaptive_stop=1.0, adaptive_step=0.9), dict(link_strategy="drop")]:
        np.testing.assert_array_equal(ab.link(feats, 5, **kw)["particle"], base["particle"])
    for kw, needle in [(dict(link_strategy="drop", max_subnet=3), "max_subnet"),
                       (dict(link_strategy="fast"), "link_strategy"),
                       (dict(dist_func=lambda a, b: 0.0), "to_eucl"),
                       (dict(adaptive_stop=-1.0), "adaptive_stop"),
                       (dict(to_eucl=lambda p: p[:, :1]), "to_eucl")]:
        with pytest.raises(ab.InvalidInput, match=needle):
            ab.link(feats, 5, **kw)
    # a z column: linked in 3-D (z, y, x, trackpy's guess); z = 0 links as in 2-D
    with_z = feats.assign(z=0.0)
    np.testing.assert_array_equal(ab.link(with_z, 5)["particle"], base["particle"])


def test_blob_log_takes_the_pixel_types_scikit_image_converts():
    skf = pytest.importorskip("skimage.feature")
    rng = np.random.default_rng(9)
    yy, xx = np.mgrid[0:48, 0:48]
    base = rng.normal(0.1, 0.01, size=(48, 48))
    for y0, x0 in [(12, 14), (30, 33)]:
        base += 0.8 * np.exp(-((yy - y0) ** 2 + (xx - x0) ** 2) / 6.0)
    cases = {
        "float16": base.astype(np.float16),
        "bool": base > 0.4,
        "int16": (base * 20000).astype(np.int16) - 1000,
        "int32": (base * 2e9).astype(np.int32),
        "uint32": (base * 3e9).astype(np.uint32),
    }
    for name, img in cases.items():
        want = skf.blob_log(img, max_sigma=4, num_sigma=5, threshold=0.05)
        got = ab.blob_log(img, max_sigma=4, num_sigma=5, threshold=0.05, device="cpu")
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_an_input_error_of_a_movie_names_its_frames():
    m = np.zeros((6, 32, 32))
    m[4, 10, 10], m[4, 12, 12] = 1e308, -1e308
    with pytest.raises(ab.InvalidInput) as e:
        ab.batch_blob_log(m, threshold=None, threshold_rel=0.2, prescale="none", batch_size=2)
    assert e.value.frames == range(4, 5)  # the frame itself, not its batch (4..6)
    assert "in frames 4..5" in str(e.value)
    with pytest.raises(ab.InvalidInput) as e:
        ab.blob_log(m[4], threshold=None, prescale="none")
    assert e.value.frames is None


def test_trackpys_engine_keyword_and_integer_frames():
    pd = pytest.importorskip("pandas")
    frame = np.load(FIX / "detect" / "blob_log" / "hisnr_u16.npy")
    a = ab.locate(frame, 7, minmass=300, device="cpu")
    for engine in ("auto", "python", "numba"):
        pd.testing.assert_frame_equal(ab.locate(frame, 7, minmass=300, engine=engine, device="cpu"), a)
    with pytest.raises(ab.InvalidInput, match="engine"):
        ab.locate(frame, 7, engine="cuda")
    f = pd.DataFrame({"x": np.arange(5.0), "y": np.ones(5), "frame": np.arange(5.0)})
    out = ab.link(f, 5)
    assert out["frame"].dtype == np.int64 and out["particle"].dtype.kind == "i"


def test_big_endian_inputs_as_fits_files_give_them():
    """astropy reads a FITS file's big-endian data as is: the pipelines take such arrays (a
    native copy, budget-checked) with the results of the native ones; ``convert``, which never
    copies unasked, says what to do."""
    rng = np.random.default_rng(4)
    yy, xx = np.mgrid[:64, :64]
    frames = rng.normal(100, 5, (3, 64, 64))
    for t in range(3):
        frames[t] += 2000 * np.exp(-((yy - 20 - t) ** 2 + (xx - 30) ** 2) / 4.5)
    native = frames.astype(np.uint16)
    big = native.astype(">u2")
    kw = dict(max_sigma=3, threshold=None, threshold_rel=0.2, device="cpu")
    assert np.array_equal(ab.blob_log(big[0], **kw), ab.blob_log(native[0], **kw))
    assert np.array_equal(ab.batch_blob_log(big, **kw), ab.batch_blob_log(native, **kw))
    with pytest.raises(ab.InvalidInput, match="newbyteorder"):
        ab.convert(big)
