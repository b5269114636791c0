"""The host memory budget in Python: ARRAYBRIDGE_MEMORY_LIMIT_MB validated at import (as the
command line validates it at start), set_memory_limit / memory_limit, and every host
allocation sized by an input's shape checked before it is made (OutOfMemory naming what was
asked and what fits). The limits are small, so nothing big is ever allocated; each test runs
with the limit it found restored afterwards."""

import os
import resource
import subprocess
import sys

import numpy as np
import pytest

import arraybridge as ab

ENV = "ARRAYBRIDGE_MEMORY_LIMIT_MB"

# 16 GiB of float32 from a 4-byte array
HUGE = (2**16, 2**16)


def huge_view(dtype=np.float32):
    return np.broadcast_to(np.asarray(1, dtype=dtype), HUGE)


def gpu_devices():
    return [d["device"] for d in ab.devices() if d["device"] != "cpu"]


def max_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


@pytest.fixture(autouse=True)
def restore_limit():
    saved = ab.memory_limit()
    yield
    ab.set_memory_limit(saved)


def test_set_and_read_the_limit():
    ab.set_memory_limit(64)
    assert ab.memory_limit() == 64
    assert os.environ[ENV] == "64"  # one limit for Python, the library and child processes
    ab.set_memory_limit(np.int64(3))  # any integer type
    assert ab.memory_limit() == 3
    ab.set_memory_limit(None)
    assert ab.memory_limit() is None and ENV not in os.environ
    ab.set_memory_limit(None)  # idempotent
    assert ab.memory_limit() is None
    for bad in [0, -5, 1.5, 512.0, True, "12", 2**70]:
        with pytest.raises(ab.InvalidInput, match="whole number of MiB"):
            ab.set_memory_limit(bad)
        assert ab.memory_limit() is None  # a refused value changes nothing


@pytest.mark.parametrize("value", ["abc", "1e0", "-5", "0", "12.5"])
def test_an_invalid_environment_value_fails_at_import(value):
    p = subprocess.run(
        [sys.executable, "-c", "import arraybridge"],
        env={**os.environ, ENV: value},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0
    # the command line's message, as the package's typed error
    assert "arraybridge.InvalidInput" in p.stderr, p.stderr
    assert f"invalid argument {ENV}: expected a whole number of MiB" in p.stderr, p.stderr
    assert repr(value).replace("'", '"') in p.stderr, p.stderr


@pytest.mark.parametrize("value,want", [(" 12 ", "12"), ("", "None"), ("4096", "4096")])
def test_valid_environment_values_are_read_at_import(value, want):
    p = subprocess.run(
        [sys.executable, "-c", "import arraybridge as ab; print(ab.memory_limit())"],
        env={**os.environ, ENV: value},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == want


def test_an_invalid_value_set_after_import_fails_at_the_next_call(monkeypatch):
    monkeypatch.setenv(ENV, "abc")
    with pytest.raises(ab.InvalidInput, match=ENV):
        ab.memory_limit()
    with pytest.raises(ab.InvalidInput, match=ENV):
        ab.convert(np.ones(4, dtype=np.float32), copy=True)


def test_convert_copy_of_a_broadcast_view_is_refused_before_allocating():
    ab.set_memory_limit(1)
    x = huge_view()
    before = max_rss_bytes()
    with pytest.raises(ab.OutOfMemory) as e:
        ab.convert(x, copy=True)
    msg = str(e.value)
    for part in ["convert(x, device='cpu', copy=True)", "float32", "(65536, 65536)",
                 "needs 16.0 GiB", "only 1.0 MiB fit", ENV]:
        assert part in msg, msg
    assert max_rss_bytes() - before < 256 << 20  # nothing of 16 GiB was touched
    # the same view without a copy is zero-copy, and small copies fit
    assert ab.convert(x).shape == HUGE
    small = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(np.from_dlpack(ab.convert(small, copy=True)), small)


def test_the_default_budget_applies_without_a_limit():
    ab.set_memory_limit(None)
    # 2^53 bytes: more than any machine and the 1 TiB cap
    x = np.broadcast_to(np.float64(1), (2**20, 2**20, 2**10))
    with pytest.raises(ab.OutOfMemory, match=r"needs 8192.0 TiB but only .* fit \("):
        ab.convert(x, copy=True)


def test_convert_of_a_broadcast_view_to_a_device_is_refused():
    devices = gpu_devices()
    if not devices:
        pytest.skip("no device to convert to")
    ab.set_memory_limit(1)
    for device in devices:
        with pytest.raises(ab.OutOfMemory, match=rf"convert\(x, device='{device}'\).*16.0 GiB"):
            ab.convert(huge_view(), device)


def test_dlpack_host_copies_are_checked():
    ab.set_memory_limit(1)
    a = ab.convert(huge_view())  # zero-copy: nothing allocated
    with pytest.raises(ab.OutOfMemory, match=r"__dlpack__\(copy=True\).*16.0 GiB"):
        a.__dlpack__(copy=True, max_version=(1, 0))
    with pytest.raises(ab.OutOfMemory, match="16.0 GiB"):
        np.from_dlpack(a, copy=True)
    small = ab.convert(np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(np.from_dlpack(small, copy=True), np.arange(6))


def test_copyto_checks_the_source_copy_and_its_cast():
    ab.set_memory_limit(1)
    dst = np.zeros((512, 512))  # 2 MiB, made by NumPy
    src = np.broadcast_to(np.float32(2), dst.shape)  # a host copy of 1 MiB, its cast 2 MiB
    with pytest.raises(ab.OutOfMemory, match=r"copyto: .*cast to float64 needs 3.0 MiB"):
        ab.copyto(dst, src)
    assert not dst.any()  # nothing written
    ab.copyto(dst[:64], np.broadcast_to(np.float32(2), (64, 512)))  # fits
    assert (dst[:64] == 2).all() and not dst[64:].any()


def test_device_arrays_read_back_are_checked():
    if "opencl:0" not in gpu_devices():
        pytest.skip("no OpenCL device")
    movie = np.ones((4, 256, 512), dtype=np.uint16)  # 1 MiB, read back through a 1 MiB buffer
    on_device = ab.convert(movie, "opencl:0")
    ab.set_memory_limit(1)
    with pytest.raises(ab.OutOfMemory, match=r"Array.numpy\(\).*on opencl:0.*needs 2.0 MiB"):
        on_device.numpy()
    with pytest.raises(ab.OutOfMemory, match="needs 2.0 MiB"):
        np.from_dlpack(on_device, device="cpu")
    with pytest.raises(ab.OutOfMemory, match="blob_log: reading the movie back"):
        ab.batch_blob_log(on_device, device="cpu")
    with pytest.raises(ab.OutOfMemory, match="locate: reading the movie back"):
        ab.batch(on_device, 7, device="cpu")
    ab.set_memory_limit(16)
    np.testing.assert_array_equal(on_device.numpy(), movie)


def test_detection_checks_the_frames_in_flight_before_detecting():
    ab.set_memory_limit(8)
    movie = np.broadcast_to(np.uint16(100), (3, 4096, 4096))  # 2 bytes standing for 96 MiB
    with pytest.raises(ab.OutOfMemory) as e:
        ab.batch_blob_log(movie, max_sigma=3, device="cpu")
    msg = str(e.value)
    for part in ["blob_log", "(num_sigma)", "(batch_size)", "4096x4096", "only 8.0 MiB fit"]:
        assert part in msg, msg
    with pytest.raises(ab.OutOfMemory, match=r"locate on 3 frame\(s\) of 4096x4096"):
        ab.batch(movie, 7, device="cpu")
    # a strided view of a small movie is still read in place and fits
    rng = np.random.default_rng(0)
    small = rng.integers(0, 1000, size=(2, 128, 128), dtype=np.uint16)[:, ::2, ::2]
    assert ab.batch_blob_log(small, max_sigma=3, threshold=None, threshold_rel=0.5).shape[1] == 4
    assert len(np.asarray(ab.batch(small, 7, device="cpu")["y"])) >= 0


def test_paco_inputs_are_checked_before_their_float64_copies():
    ab.set_memory_limit(16)
    cube = np.broadcast_to(np.float32(1), (40, 1024, 1024))  # 320 MiB as float64
    angles = np.linspace(0, 90, 40)
    yy, xx = np.mgrid[-4:5, -4:5]
    psf = np.exp(-(yy**2 + xx**2) / 4.0)
    for call in [
        lambda: ab.paco(cube, angles, psf, fwhm=4),
        lambda: ab.unbiased_flux(cube, angles, psf, [(500.0, 500.0)], fwhm=4),
    ]:
        with pytest.raises(ab.OutOfMemory) as e:
            call()
        msg = str(e.value)
        for part in ["cube: a float32 array of shape (40, 1024, 1024)", "needs 480",
                     "only 16.0 MiB fit"]:
            assert part in msg, msg
