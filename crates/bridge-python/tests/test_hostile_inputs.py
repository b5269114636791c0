"""Inputs a user can get wrong, from a third probing of the Python API (2026-11-28): each is a
typed error naming what is wrong, or is read as the user meant; never a silent change of the
user's data or results, a raw Python error, an abort or an unbounded allocation."""

import collections
import struct

import numpy as np
import pytest

import arraybridge as ab

KW = dict(max_sigma=2, num_sigma=2, threshold=None, threshold_rel=0.3, device="cpu")


def movie(frames=4, h=48, w=64, seed=0):
    rng = np.random.default_rng(seed)
    m = rng.normal(100, 5, (frames, h, w))
    m[:, 10:13, 20:23] += 3000
    m[:, 30:33, 40:43] += 2000
    return m.astype(np.uint16)


def test_a_copy_on_write_memmap_keeps_the_callers_changes(tmp_path):
    np.save(tmp_path / "m.npy", movie())
    mc = np.load(tmp_path / "m.npy", mmap_mode="c")
    mc[:, 3:6, 50:53] = 5000
    edited = np.array(mc)
    want = ab.batch_blob_log(edited, **KW)
    got = ab.batch_blob_log(mc, chunk_frames=1, **KW)
    np.testing.assert_array_equal(got, want)
    # the pages holding the user's edits were not given back to the file's contents
    np.testing.assert_array_equal(np.asarray(mc), edited)
    # a read-only map still gives its pages back, with the same rows
    np.testing.assert_array_equal(
        ab.batch_blob_log(np.load(tmp_path / "m.npy", mmap_mode="r"), chunk_frames=1, **KW),
        ab.batch_blob_log(np.load(tmp_path / "m.npy"), **KW),
    )


def test_frames_of_mixed_dtypes_or_shapes_are_each_detected_as_they_are():
    m = movie()
    frames = [m[0], m[1].astype(np.float32) / 65535, m[2], m[3][:40]]
    want = [ab.blob_log(f, **KW) for f in frames]
    for chunk in (1, 2, 4):
        rows = ab.batch_blob_log(iter(frames), chunk_frames=chunk, **KW)
        for t, w in enumerate(want):
            np.testing.assert_array_equal(rows[rows[:, 0] == t][:, 1:], w)
    got = ab.batch(iter(frames), 7, chunk_frames=4)
    for t, f in enumerate(frames):
        one = ab.locate(f, 7)
        assert (got["frame"] == t).sum() == len(one)


def write_npy(path, header, version=(1, 0), body=b""):
    h = repr(header).encode("latin1")
    pad = 64 - (10 + len(h) + 1) % 64
    h = h + b" " * pad + b"\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY" + bytes(version) + struct.pack("<H", len(h)) + h + body)


@pytest.mark.parametrize(
    "header, version, match",
    [
        ({"descr": "<u2", "fortran_order": False, "shape": (4, 2**40, 2**40)}, (1, 0), "chunk"),
        ({"descr": "<u2", "fortran_order": False, "shape": (8, -128, 128)}, (1, 0), "shape"),
        ({"descr": "|O", "fortran_order": False, "shape": (2, 4, 4)}, (1, 0), "pixels"),
        ({"descr": "<f16", "fortran_order": False, "shape": (2, 4, 4)}, (1, 0), "pixels"),
        ({"descr": [("a", "<u2")], "fortran_order": False, "shape": (2, 4, 4)}, (1, 0), "pixels"),
        ({"descr": "<u2", "fortran_order": False, "shape": (2, 4, 4)}, (9, 0), "version"),
    ],
)
def test_a_npy_header_that_lies_is_a_typed_error(tmp_path, header, version, match):
    path = tmp_path / "bad.npy"
    write_npy(path, header, version)
    with pytest.raises((ab.InvalidInput, ab.OutOfMemory), match=match) as e:
        ab.batch_blob_log(str(path), **KW)
    assert "bad.npy" in str(e.value)


def test_big_endian_npy_paths_read_like_their_arrays(tmp_path):
    m = movie()
    np.save(tmp_path / "be.npy", m.astype(">u2"))
    path = str(tmp_path / "be.npy")
    np.testing.assert_array_equal(ab.batch_blob_log(path, **KW), ab.batch_blob_log(m, **KW))
    want = ab.batch(m, 7)
    got = ab.batch(path, 7)
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1.5, "2", True, 0, -3])
def test_chunk_frames_is_a_whole_number_of_frames(bad):
    with pytest.raises(ab.InvalidInput, match="chunk_frames"):
        ab.batch_blob_log(movie(), chunk_frames=bad, **KW)


def test_locate_checks_the_host_budget_before_reading_a_volume():
    ab.set_memory_limit(256)
    try:
        with pytest.raises(ab.OutOfMemory, match="locate"):
            ab.locate(np.broadcast_to(np.uint16(1), (1024, 1024, 1024)), 7)
        with pytest.raises(ab.OutOfMemory, match="locate"):
            ab.locate(np.broadcast_to(np.uint16(1), (8192, 8192)), (7, 9))
    finally:
        ab.set_memory_limit(None)


def test_to_jax_refuses_to_narrow_64_bit_arrays():
    jax = pytest.importorskip("jax")
    if jax.config.read("jax_enable_x64"):
        pytest.skip("jax_enable_x64 is set here: JAX keeps 64 bits")
    for x in (np.array([1e-300, 1e300]), np.array([2**40 + 1, -5])):
        with pytest.raises(ab.InvalidInput, match="jax_enable_x64"):
            ab.convert(x, to="jax")
        with pytest.raises(ab.InvalidInput, match="jax_enable_x64"):
            ab.jax()(lambda a: a)(x)
    # 32-bit arrays go through as before
    assert ab.convert(np.arange(3, dtype=np.float32), to="jax").dtype == np.float32


def test_framework_refusals_are_typed():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(ab.InvalidInput, match="bfloat16"):
        ab.convert(jnp.ones(3, jnp.bfloat16), to="numpy")
    if any(d["device"] == "opencl:0" for d in ab.devices()):
        on_device = ab.convert(np.ones(3, np.float32), "opencl:0")
        with pytest.raises(ab.InvalidInput, match="jax"):
            ab.convert(on_device, None, to="jax")


def test_on_needs_its_device_at_decoration_time():
    with pytest.raises(ab.InvalidInput, match="parentheses"):

        @ab.on
        def double(a):
            return a * 2

    with pytest.raises(ab.InvalidInput, match="device"):
        ab.on(5)


def test_decorators_keep_dict_subclasses():
    d = collections.defaultdict(list, a=np.ones(2))
    out = ab.on("cpu", to="numpy")(lambda x: x)(d)
    assert isinstance(out, collections.defaultdict) and out.default_factory is list
    np.testing.assert_array_equal(out["a"], np.ones(2))
    o = ab.on("cpu", to="numpy")(lambda x: x)(collections.OrderedDict(b=np.zeros(1), a=1))
    assert isinstance(o, collections.OrderedDict) and list(o) == ["b", "a"]


def test_offload_arguments_are_checked():
    with pytest.raises(ab.InvalidInput, match="to='numpy'"):
        ab.offload(to="numpy")
    f = ab.offload(flops="lots")(lambda a: a)
    with pytest.raises(ab.InvalidInput, match="flops"):
        f(np.ones(3))
    for bad in (
        {"cpu": {"flops_per_s": "x"}},
        {"cpu": {"flops_per_s": True}},
        {"cpu": {"flops_per_s": 1e9, "h2d_bytes_per_s": 1.0}},
        {"opencl:0": {"flops_per_s": True}},
        {"cuda:7": {"bogus": 1.0}},
    ):
        with pytest.raises(ab.InvalidInput, match="device_profiles"):
            ab.config(device_profiles=bad)


def test_benchmark_movie_size_is_three_numbers():
    with pytest.raises(ab.InvalidInput, match="movie_size"):
        ab.benchmark(movie_size=(4, 64), batch_sizes=[1], device="cpu")


def test_dlpack_max_version_of_any_width():
    a = ab.convert(np.arange(4.0), "cpu")
    # a consumer that takes any version gets the newest
    np.testing.assert_array_equal(np.from_dlpack(a), np.arange(4.0))
    a.__dlpack__(max_version=(2**70, 0))
    a.__dlpack__(max_version=(np.int64(1), np.int64(0)))
    for bad in ((-1, 0), (1.5, 0), (True, 0), "10", (1,)):
        with pytest.raises(ab.InvalidInput, match="max_version"):
            a.__dlpack__(max_version=bad)
