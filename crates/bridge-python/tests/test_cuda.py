"""CUDA through Python: DLPack with PyTorch, CuPy and JAX on the GPU (zero-copy both ways, the
same pointer, mutations visible, stream ordering), and the pipelines on CUDA inputs against the
CPU. Every test skips without a CUDA device and fails instead under ARRAYBRIDGE_REQUIRE_GPU=1
(what `scripts/gpu-check.sh run python` sets on the GPU machine)."""

import os
import pathlib

import numpy as np
import pytest

import arraybridge as ab

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIX = pathlib.Path(os.environ.get("ARRAYBRIDGE_FIXTURES", ROOT / "fixtures"))
REQUIRE = os.environ.get("ARRAYBRIDGE_REQUIRE_GPU") == "1"


def need(cond, why):
    """Skip when `cond` is false, or fail when a GPU is required."""
    if cond:
        return
    if REQUIRE:
        pytest.fail(f"ARRAYBRIDGE_REQUIRE_GPU=1 but {why}")
    pytest.skip(why)


def has_cuda():
    return "cuda:0" in [d["device"] for d in ab.devices()]


def import_or_need(name):
    try:
        return __import__(name, fromlist=["_"])
    except ImportError:
        need(False, f"{name} is not installed")


@pytest.fixture
def torch_cuda():
    need(has_cuda(), "no CUDA device (ab.backends(): %s)" % ab.backends().get("cuda"))
    torch = import_or_need("torch")
    need(torch.cuda.is_available(), "torch sees no CUDA device")
    return torch


def sorted_rows(a):
    a = np.asarray(a, dtype=np.float64)
    return a[np.lexsort(a.T[::-1])] if len(a) else a


def test_torch_cuda_round_trip_is_zero_copy(torch_cuda):
    torch = torch_cuda
    for dtype in (torch.float32, torch.float64, torch.uint8, torch.int32, torch.float16):
        t = (torch.arange(4 * 6, device="cuda:0") % 7).to(dtype).reshape(4, 6)
        a = ab.convert(t, "cuda:0")
        assert a.device == "cuda:0" and a.__dlpack_device__() == (2, 0)
        assert a.data_ptr == t.data_ptr(), dtype
        u = torch.from_dlpack(a)
        assert u.data_ptr() == t.data_ptr() and u.device == t.device
        u[0, 0] = 5
        torch.cuda.synchronize()
        assert t[0, 0].item() == 5
        np.testing.assert_array_equal(a.numpy(), t.cpu().numpy())


def test_torch_stream_ordering(torch_cuda):
    torch = torch_cuda
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        # A long producer kernel on a side stream: the import must wait for it.
        t = torch.ones(4096, 4096, device="cuda:0")
        for _ in range(8):
            t = t * 1.0001
        a = ab.convert(t, "cuda:0")
    host = a.numpy()
    np.testing.assert_allclose(host[::512, ::512], 1.0001**8, rtol=1e-6)


def test_host_to_cuda_and_back(torch_cuda):
    x = np.random.default_rng(3).standard_normal((33, 17)).astype(np.float32)
    a = ab.convert(x, "cuda:0")
    assert a.device == "cuda:0"
    t = torch_cuda.from_dlpack(a)
    np.testing.assert_array_equal(t.cpu().numpy(), x)
    np.testing.assert_array_equal(np.from_dlpack(a, device="cpu"), x)
    np.testing.assert_array_equal(ab.convert(a, "cpu").numpy(), x)


def test_strided_cuda_tensor(torch_cuda):
    torch = torch_cuda
    t = torch.arange(6 * 8, device="cuda:0", dtype=torch.float32).reshape(6, 8)
    view = t.t()[::2]  # transposed and stepped: not C-contiguous
    with pytest.raises(ab.InvalidInput):
        ab.convert(view, "cuda:0", copy=False)
    a = ab.convert(view, "cuda:0")
    assert a.device == "cuda:0" and a.shape == tuple(view.shape)
    np.testing.assert_array_equal(a.numpy(), view.cpu().numpy())


def test_cupy_round_trip():
    need(has_cuda(), "no CUDA device")
    cp = import_or_need("cupy")
    x = cp.arange(20, dtype=cp.float32).reshape(4, 5)
    a = ab.convert(x, "cuda:0")
    assert a.data_ptr == x.data.ptr
    y = cp.from_dlpack(a)
    y[1, 1] = -1
    cp.cuda.get_current_stream().synchronize()
    assert float(x[1, 1]) == -1.0


def test_jax_round_trip():
    need(has_cuda(), "no CUDA device")
    jax = import_or_need("jax")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    need(bool(gpus), "JAX sees no GPU")
    x = jax.device_put(jax.numpy.arange(12, dtype=jax.numpy.float32).reshape(3, 4), gpus[0])
    a = ab.convert(x, "cuda:0")
    assert a.device == "cuda:0"
    np.testing.assert_array_equal(a.numpy(), np.asarray(x))
    back = jax.dlpack.from_dlpack(a)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(x))


def test_blob_log_on_a_cuda_movie_matches_the_cpu(torch_cuda):
    torch = torch_cuda
    movie = np.load(FIX / "detect" / "movie" / "movie_u16.npy")[:4, :128, :128]
    kw = dict(max_sigma=3, threshold=None, threshold_rel=0.2)
    cpu = ab.batch_blob_log(movie, device="cpu", **kw)
    from_host = ab.batch_blob_log(movie, device="cuda:0", **kw)
    # a u16 movie already on the GPU is read in place
    on_gpu = torch.from_numpy(movie.view(np.int16)).to("cuda:0").view(torch.uint16)
    resident = ab.batch_blob_log(on_gpu, device="cuda:0", **kw)
    for got in (from_host, resident):
        assert len(got) == len(cpu)
        np.testing.assert_allclose(sorted_rows(got), sorted_rows(cpu), rtol=1e-5, atol=1e-4)


def test_locate_on_a_cuda_movie_reads_it_in_place(torch_cuda):
    torch = torch_cuda
    movie = np.load(FIX / "detect" / "movie" / "movie_u16.npy")[:4, :128, :128]
    names = ("frame", "y", "x", "mass", "size", "ecc", "signal", "raw_mass", "ep")

    def cols(r):
        return {k: np.asarray(r[k]) for k in names}

    for host, on_gpu in (
        (movie, torch.from_numpy(movie.view(np.int16)).to("cuda:0").view(torch.uint16)),
        (movie.astype(np.float32), torch.from_numpy(movie.astype(np.float32)).to("cuda:0")),
    ):
        cpu = cols(ab.batch(host, 7, device="cpu"))
        assert len(cpu["y"]) > 10
        from_host = cols(ab.batch(host, 7, device="cuda:0"))
        # a movie already on the GPU is read in place by the device locate (float64 on a GPU
        # with doubles: the CPU's features bit for bit)
        resident = cols(ab.batch(on_gpu, 7, device="cuda:0"))
        for got in (from_host, resident):
            for k in names:
                np.testing.assert_array_equal(got[k], cpu[k], err_msg=k)


def test_cuda_errors_are_typed(torch_cuda):
    with pytest.raises(ab.BackendUnavailable):
        ab.convert(np.ones(3), device="cuda:99")
    with pytest.raises(ab.InvalidInput):
        ab.batch_blob_log(torch_cuda.ones(10, device="cuda:0"), device="cuda:0")  # wrong ndim


def test_paco_on_cuda_matches_the_cpu_and_stops_on_ctrl_c(interrupted_after):
    """PACO on cuda:0 runs on a worker thread while the calling thread polls for Ctrl-C: the
    maps are the CPU's, and an interrupt during a run raises KeyboardInterrupt."""
    need(has_cuda(), "no CUDA device (ab.backends(): %s)" % ab.backends().get("cuda"))
    rng = np.random.default_rng(3)
    t, n = 48, 128
    angles = np.linspace(0.0, 60.0, t)
    cube = rng.normal(0.0, 1.0, (t, n, n))
    p = np.mgrid[0:11, 0:11] - 5.0
    psf = np.exp(-(p[0] ** 2 + p[1] ** 2) / (2 * 1.5**2))
    cpu = ab.paco(cube, angles, psf, psf_norm_factor=9.54, device="cpu")
    gpu = ab.paco(cube, angles, psf, psf_norm_factor=9.54, device="cuda:0")
    np.testing.assert_allclose(gpu.snr, cpu.snr, rtol=1e-9, atol=1e-12, equal_nan=True)
    interrupted_after(
        0.01,
        lambda: ab.paco(np.concatenate([cube] * 8), np.linspace(0.0, 60.0, 8 * t), psf,
                        psf_norm_factor=9.54, device="cuda:0"),
    )
