"""``@ab.offload``: the command line's offload model decides per call where the decorated
function runs (CPU or a device), with the reason readable in ``ab.last_decision()``;
``ab.config`` turns it off or gives measured device figures."""

import logging

import numpy as np
import pytest

import arraybridge as ab


def _opencl():
    return "opencl:0" in [d["device"] for d in ab.devices()]


@pytest.fixture(autouse=True)
def _reset():
    yield
    ab.config(offload=True, device_profiles={})


@ab.offload
def _where(x, scale=2.0):
    """Where the call ran, and a result computed from the input wherever it is."""
    host = np.from_dlpack(ab.convert(x, "cpu"))
    return x.device if hasattr(x, "device") else "?", host.sum() * scale


def test_a_small_input_stays_on_the_cpu_with_its_reason(caplog):
    x = np.arange(128.0)  # 1 KiB
    with caplog.at_level(logging.INFO, logger="arraybridge"):
        where, total = _where(x)
    assert where == "cpu"
    assert total == x.sum() * 2.0
    d = ab.last_decision()
    assert d["device"] == "cpu" and "CPU throughput" in d["reason"], d
    assert any("offload" in r.getMessage() and "_where" in r.getMessage() for r in caplog.records)


def test_a_large_input_goes_to_a_device_that_is_faster_by_its_measured_figures():
    if not _opencl():
        pytest.skip("no OpenCL device")
    # PoCL shares the host's cores, so its nominal figures never beat the CPU (honestly: a
    # large input stays on the CPU); measured figures of a fast device make the model offload
    x = np.random.default_rng(1).random((1024, 1024 * 8), dtype=np.float32)  # 32 MiB
    where, _ = _where(x)
    assert where == "cpu"
    assert "opencl:0 is an OpenCL CPU device sharing the host cores" in ab.last_decision()["reason"]
    ab.config(
        device_profiles={
            "opencl:0": {
                "flops_per_s": 1e13,
                "h2d_bytes_per_s": 2e10,
                "d2h_bytes_per_s": 2e10,
                "launch_overhead_s": 2e-3,
            }
        }
    )
    where, total = _where(x)
    assert where == "opencl:0", ab.last_decision()
    assert np.isclose(total, x.sum(dtype=np.float64) * 2.0, rtol=1e-5)
    assert "measured figures (ab.config)" in ab.last_decision()["reason"]
    # the same figures keep a 1 KiB input on the CPU: the launch costs more than the work
    where, _ = _where(np.arange(128.0))
    assert where == "cpu"


def test_offload_off_keeps_every_call_on_the_cpu():
    ab.config(offload=False)
    where, _ = _where(np.ones((2048, 2048)))
    assert where == "cpu"
    assert "ab.config(offload=False)" in ab.last_decision()["reason"]


def test_work_given_per_call_and_nested_arguments():
    seen = []

    @ab.offload(flops=lambda d: 1.0, output="numpy")
    def double(d):
        seen.append(sorted(d))
        return {"a": d["a"], "b": d["b"]}

    out = double({"a": np.arange(3.0), "b": np.ones(2, dtype=np.float32)})
    assert seen == [["a", "b"]]
    assert isinstance(out["a"], np.ndarray) and out["a"].tolist() == [0.0, 1.0, 2.0]
    assert out["b"].dtype == np.float32


def test_bad_settings_are_invalid_input():
    with pytest.raises(ab.InvalidInput, match="offload is True or False"):
        ab.config(offload="yes")
    with pytest.raises(ab.InvalidInput, match="dict of device name"):
        ab.config(device_profiles={"cuda:0": 3})
    if _opencl():
        with pytest.raises(ab.InvalidInput, match="unknown figure"):
            ab.config(device_profiles={"opencl:0": {"speed": 1.0}})
        with pytest.raises(ab.InvalidInput, match="finite and not negative"):
            ab.config(device_profiles={"opencl:0": {"flops_per_s": float("nan")}})
    with pytest.raises(ab.InvalidInput, match="finite and positive"):
        ab.config(device_profiles={"cpu": {"flops_per_s": 0.0}})
    assert ab.config() == {"offload": True, "device_profiles": {}}
