"""``device="auto"`` in the pipelines has the command line's policy: an input on a device
arraybridge computes on is read there, a host input goes where the offload model says, and
the decision with its reason is readable (``last_decision``) and logged."""

import logging

import numpy as np
import pytest

import arraybridge as ab


def has(device):
    return any(d["device"] == device for d in ab.devices())


def movie(frames=3, h=48, w=56):
    rng = np.random.default_rng(2)
    yy, xx = np.mgrid[0:h, 0:w]
    out = rng.integers(100, 300, size=(frames, h, w)).astype(np.float64)
    for t in range(frames):
        out[t] += 8000 * np.exp(-((yy - 20 - t) ** 2 + (xx - 30) ** 2) / 5.0)
    return out.astype(np.uint16)


def test_host_input_follows_the_offload_model_and_says_why(caplog):
    m = movie()
    with caplog.at_level(logging.INFO, logger="arraybridge"):
        auto = ab.batch_blob_log(m, max_sigma=3, threshold=None, threshold_rel=0.2)
    d = ab.last_decision()
    assert d is not None and d["device"] in [x["device"] for x in ab.devices()]
    assert d["reason"]
    # the same rows as naming the chosen device
    named = ab.batch_blob_log(m, max_sigma=3, threshold=None, threshold_rel=0.2, device=d["device"])
    np.testing.assert_array_equal(auto, named)
    assert any("auto:" in r.getMessage() for r in caplog.records)
    for pipeline in (
        lambda: ab.batch(m, 7),
        lambda: ab.paco(np.random.default_rng(0).normal(size=(8, 24, 24)),
                        np.linspace(0, 40, 8), np.ones((5, 5)), radius=2, fwhm=2.0),
    ):
        pipeline()
        assert ab.last_decision()["reason"]
    if not any(x["device"].startswith("cuda") for x in ab.devices()):
        # here the only other device, PoCL, shares the CPU's cores: the model keeps the CPU
        assert ab.last_decision()["device"] == "cpu"


def test_an_input_on_a_device_is_read_there():
    if not has("opencl:0"):
        pytest.skip("no opencl:0 here")
    m = movie()
    on = ab.convert(m, "opencl:0")
    rows = ab.batch_blob_log(on, max_sigma=3, threshold=None, threshold_rel=0.2)
    d = ab.last_decision()
    assert d["device"] == "opencl:0" and "lives on opencl:0" in d["reason"], d
    explicit = ab.batch_blob_log(on, max_sigma=3, threshold=None, threshold_rel=0.2, device="opencl:0")
    np.testing.assert_array_equal(rows, explicit)
