"""Device lists in Python, with the command line's meaning: ``device="opencl:0,opencl:1"``
(each device once, each must run the pipeline) or ``"all"`` (every GPU); the rows are those of
one device. Two PoCL devices need ``POCL_DEVICES`` set before OpenCL starts, so that part runs
in a child interpreter."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import arraybridge as ab


def has(device):
    return any(d["device"] == device for d in ab.devices())


def movie(frames=12, h=64, w=72, seed=5):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    out = rng.integers(300, 500, size=(frames, h, w)).astype(np.float64)
    for t in range(frames):
        for _ in range(6):
            y0, x0 = rng.uniform(6, h - 6), rng.uniform(6, w - 6)
            out[t] += 6000 * np.exp(-((yy - y0) ** 2 + (xx - x0) ** 2) / 5.0)
    return out.astype(np.uint16)


def test_bad_lists_are_typed_errors():
    m = movie(2)
    with pytest.raises(ab.InvalidInput, match="twice"):
        ab.batch_blob_log(m, max_sigma=3, device="cpu,cpu")
    with pytest.raises((ab.BackendUnavailable, ab.InvalidInput)):
        ab.batch(m, 7, device="cpu,opencl:99")
    with pytest.raises(ab.InvalidInput):
        ab.batch_blob_log(m, max_sigma=3, device="cpu,gpu7")
    if not any(d["device"].startswith("cuda") for d in ab.devices()):
        # PoCL is a CPU device, not a GPU: "all" finds none here and says so
        with pytest.raises(ab.BackendUnavailable, match="no GPU"):
            ab.batch_blob_log(m, max_sigma=3, device="all")


def test_cpu_and_opencl_together_give_the_cpu_features():
    if not has("opencl:0"):
        pytest.skip("no opencl:0 here")
    m = movie()
    one = ab.batch(m, 7, device="cpu", batch_size=2)
    both = ab.batch(m, 7, device="cpu,opencl:0", batch_size=2)
    for col in ["frame", "y", "x", "mass", "size", "ecc", "signal", "raw_mass"]:
        np.testing.assert_array_equal(np.asarray(both[col]), np.asarray(one[col]), col)


CHILD = textwrap.dedent(
    """
    import numpy as np, arraybridge as ab, sys
    sys.path.insert(0, {here!r})
    from test_device_lists import movie
    devs = [d["device"] for d in ab.devices()]
    if "opencl:1" not in devs:
        print("SKIP", devs)
        raise SystemExit(0)
    m = movie()
    kw = dict(max_sigma=3, num_sigma=5, threshold=None, threshold_rel=0.2, batch_size=2)
    one = ab.batch_blob_log(m, device="opencl:0", **kw)
    two = ab.batch_blob_log(m, device="opencl:0,opencl:1", **kw)
    assert one.shape[0] > 0
    np.testing.assert_array_equal(two, one)
    f1 = ab.batch(m, 7, device="opencl:0", batch_size=2)
    f2 = ab.batch(m, 7, device="opencl:0,opencl:1", batch_size=2)
    for c in ["frame", "y", "x", "mass"]:
        np.testing.assert_array_equal(np.asarray(f2[c]), np.asarray(f1[c]))
    rng = np.random.default_rng(1)
    cube = rng.normal(0, 1, size=(16, 28, 28))
    yy, xx = np.mgrid[-4:5, -4:5]
    psf = np.exp(-(yy ** 2 + xx ** 2) / 4.0)
    angles = np.linspace(0, 70, 16)
    p1 = ab.paco(cube, angles, psf, radius=2, fwhm=2.4, device="opencl:0")
    p2 = ab.paco(cube, angles, psf, radius=2, fwhm=2.4, device="opencl:0,opencl:1")
    np.testing.assert_array_equal(p2.snr, p1.snr)
    assert p2.device == "opencl:0,opencl:1"
    print("OK")
    """
)


def test_two_pocl_devices_give_one_devices_rows():
    if not has("opencl:0"):
        pytest.skip("no opencl:0 here")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, POCL_DEVICES="pthread pthread")
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(here=here)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip(f"PoCL gave one device: {out.stdout}")
    assert "OK" in out.stdout, out.stdout + out.stderr


_ROUTE = r"""
import numpy as np, arraybridge as ab
names = {d["device"]: d["name"] for d in ab.devices()}
print(names.get("opencl:0") == names.get("opencl:1"))
x = (np.arange(3 * 40 * 40, dtype=np.float32) % 97).reshape(3, 40, 40)
a = ab.convert(x, "opencl:0")
print(ab.route(a, "opencl:1"))
b = ab.convert(a, "opencl:1")
assert b.device == "opencl:1" and a.device == "opencl:0", (a.device, b.device)
assert np.array_equal(np.from_dlpack(ab.convert(b, "cpu")), x)
assert np.array_equal(np.from_dlpack(ab.convert(a, "cpu")), x)  # the source is untouched
c = ab.convert(a, "opencl:0", copy=True)
assert np.array_equal(np.from_dlpack(ab.convert(c, "cpu")), x)
print(ab.route(a, "opencl:0"))
print(ab.route(x, "opencl:1"))
print(ab.route(a, "cpu"))
"""


def pocl_only(env):
    """``env`` with the OpenCL loader pointed at PoCL's ICD alone where it can be found, so
    ``opencl:0`` and ``opencl:1`` are the two ``POCL_DEVICES`` of one platform also on a
    machine with another driver (the GPU machine's NVIDIA OpenCL is ``opencl:0`` there)."""
    for d in ("/etc/OpenCL/vendors", "/usr/local/etc/OpenCL/vendors"):
        try:
            icds = sorted(f for f in os.listdir(d) if "pocl" in f and f.endswith(".icd"))
        except OSError:
            continue
        if icds:
            return dict(env, OCL_ICD_VENDORS=os.path.join(d, icds[0]))
    return env


def test_convert_between_devices_takes_the_planned_route():
    """``convert`` of an array on ``opencl:0`` to ``opencl:1`` is the registry's device-to-device
    copy when both are devices of one platform, not a trip through the host (two devices of
    different platforms share no context: through the host), and leaves the source as it was."""
    env = pocl_only(dict(os.environ, POCL_DEVICES="pthread pthread"))
    r = subprocess.run(
        [sys.executable, "-c", _ROUTE], env=env, capture_output=True, text=True, timeout=300
    )
    if r.returncode != 0 and "opencl" in r.stderr and "BackendUnavailable" in r.stderr:
        pytest.skip("no OpenCL device")
    assert r.returncode == 0, r.stderr
    same, *lines = r.stdout.splitlines()
    between = "peer-copy" if same == "True" else "host-copy"
    assert lines[0] == f"opencl@opencl:0 -[{between}]-> opencl@opencl:1", (same, lines)
    assert lines[1] == "opencl@opencl:0 (in place)", lines
    assert lines[2] == "host@cpu -[host-copy]-> opencl@opencl:1", lines
    assert lines[3] == "opencl@opencl:0 -[host-copy]-> host@cpu", lines
