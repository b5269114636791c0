"""Framework outputs (``convert(..., to=)``, the seed's ``convert_memory``) and the
decorators (``@ab.on``, ``@ab.numpy``, ``@ab.jax``, ``@ab.torch``, ``@ab.cupy``): each
framework installed here both ways, zero-copy on the host by pointer; the others are skips
that say why. CUDA frameworks run in the GPU harness's Python phase."""

import importlib
from collections import namedtuple

import numpy as np
import pytest

import arraybridge as ab


def ptr(x):
    return x.__array_interface__["data"][0]


def aligned(n, dtype=np.float32, align=64):
    """A host array whose data is aligned to ``align`` bytes (JAX views only such memory)."""
    itemsize = np.dtype(dtype).itemsize
    buf = np.empty(n * itemsize + align, dtype=np.uint8)
    off = (-buf.ctypes.data) % align
    x = buf[off : off + n * itemsize].view(dtype)
    x[:] = np.arange(n) % 13
    return x


def has(device):
    return any(d["device"] == device for d in ab.devices())


def framework(name):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.skip(f"{name} is not installed here ({e}); the GPU harness runs it")


def test_to_numpy_and_array_share_host_memory():
    x = aligned(12).reshape(3, 4)
    y = ab.convert(x, "cpu", to="numpy")
    assert isinstance(y, np.ndarray) and ptr(y) == ptr(x)
    a = ab.convert(x, "cpu", to="array")
    assert isinstance(a, ab.Array) and a.data_ptr == ptr(x)
    same = ab.convert(x, "cpu", to="same")
    assert isinstance(same, np.ndarray) and ptr(same) == ptr(x)
    # device=None keeps it where it is
    assert ptr(ab.convert(x, None, to="numpy")) == ptr(x)
    # copy=True gives new memory with the same values
    c = ab.convert(x, "cpu", to="numpy", copy=True)
    assert ptr(c) != ptr(x)
    np.testing.assert_array_equal(c, x)


def test_jax_both_ways_zero_copy_on_the_host():
    jax = framework("jax")
    x = aligned(1 << 12).reshape(64, 64)
    j = ab.convert(x, "cpu", to="jax")
    assert isinstance(j, jax.Array)
    assert j.unsafe_buffer_pointer() == ptr(x)
    back = ab.convert(j, "cpu", to="numpy")
    assert isinstance(back, np.ndarray)
    assert ptr(back) == j.unsafe_buffer_pointer()
    np.testing.assert_array_equal(back, x)
    # to="same" keeps JAX
    assert isinstance(ab.convert(j, "cpu", to="same"), jax.Array)


def test_jax_copies_unaligned_memory_unless_told_not_to():
    framework("jax")
    x = aligned(65)[1:]  # 4 bytes past a 64-byte boundary
    j = ab.convert(x, "cpu", to="jax")
    np.testing.assert_array_equal(np.asarray(j), x)
    with pytest.raises(ab.InvalidInput, match="jax"):
        ab.convert(x, "cpu", to="jax", copy=False)


@pytest.mark.parametrize("name", ["torch", "cupy", "tensorflow"])
def test_other_frameworks(name):
    mod = framework(name)
    x = aligned(16)
    if name == "cupy":
        pytest.skip("CuPy holds GPU memory: the GPU harness converts to cuda:0")
    y = ab.convert(x, "cpu", to=name)
    assert type(y).__module__.split(".")[0] == mod.__name__
    back = ab.convert(y, "cpu", to="numpy")
    np.testing.assert_array_equal(back, x)
    if name == "torch":
        assert y.data_ptr() == ptr(x) == ptr(back)


def test_bad_targets_are_typed_errors():
    x = np.ones(3)
    with pytest.raises(ab.InvalidInput, match="to must be one of"):
        ab.convert(x, "cpu", to="matlab")
    with pytest.raises(ab.InvalidInput, match="needs"):
        if importlib.util.find_spec("tensorflow") is None:
            ab.convert(x, "cpu", to="tensorflow")
        else:
            raise ab.InvalidInput("needs: tensorflow installed here")
    if has("cuda:0"):
        # numpy holds host memory: a device target is refused, not copied back silently
        with pytest.raises(ab.InvalidInput, match="host memory"):
            ab.convert(x, "cuda:0", to="numpy")
    else:
        with pytest.raises(ab.BackendUnavailable):
            ab.convert(x, "cuda:0", to="numpy")


def test_convert_memory_is_the_seed_call():
    x = aligned(8)
    y = ab.convert_memory(x, "numpy", "numpy")
    assert isinstance(y, np.ndarray) and ptr(y) == ptr(x)
    with pytest.raises(ab.InvalidInput, match="source_type"):
        ab.convert_memory(x, "torch", "numpy")
    with pytest.raises(ab.InvalidInput, match="gpu_id"):
        ab.convert_memory(x, "numpy", "numpy", gpu_id=-1)
    if importlib.util.find_spec("jax") is not None:
        j = ab.convert_memory(x, "numpy", "jax")
        assert type(j).__module__.split(".")[0] in ("jax", "jaxlib")
        assert isinstance(ab.convert_memory(j, "jax", "numpy"), np.ndarray)


Pair = namedtuple("Pair", "a b")


def test_on_converts_nested_arguments_and_the_result():
    jax = framework("jax")
    seen = {}

    @ab.on("cpu", to="jax", output="same")
    def f(x, rest, *, scale=2, label="n"):
        seen["types"] = (type(x), type(rest[0]), type(rest[1]["k"]), type(rest[2].a))
        seen["label"], seen["scale"] = label, scale
        return {"sum": (x + rest[0]) * scale, "parts": [x, 7], "pair": Pair(x, "s")}

    x = aligned(64)
    out = f(x, (x, {"k": x}, Pair(x, 1)), scale=3, label="kept")
    assert all(issubclass(t, jax.Array) for t in seen["types"])
    assert (seen["label"], seen["scale"]) == ("kept", 3)
    # output="same": the first argument's framework (NumPy) and device
    assert isinstance(out["sum"], np.ndarray)
    np.testing.assert_array_equal(out["sum"], (x + x) * 3)
    assert isinstance(out["parts"], list) and isinstance(out["parts"][0], np.ndarray)
    assert out["parts"][1] == 7
    assert isinstance(out["pair"], Pair) and out["pair"].b == "s"
    assert f.__name__ == "f"


def test_outputs_and_methods():
    framework("jax")

    class Model:
        def __init__(self):
            self.offset = 1.0

        @ab.jax(output_type="numpy")
        def forward(self, x):
            return x + self.offset

        @ab.numpy
        def host(self, x):
            assert isinstance(x, np.ndarray)
            return x * 2

    m = Model()
    x = aligned(32)
    y = m.forward(x)
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, x + 1)
    j = ab.convert(x, "cpu", to="jax")
    h = m.host(j)  # a JAX argument, computed in NumPy, given back as JAX ("same")
    assert type(h).__module__.split(".")[0] in ("jax", "jaxlib")
    np.testing.assert_array_equal(np.asarray(h), x * 2)

    @ab.on("cpu", to="numpy", output=None)
    def raw(x):
        return x

    assert isinstance(raw(j), np.ndarray)

    @ab.numpy()
    def no_arrays(a, b):
        return a + b

    assert no_arrays(1, 2) == 3
    # NumPy scalars and strings are not arrays
    assert ab.on("cpu", to="numpy")(lambda s, t: (s, t))(np.float32(1.5), "x") == (1.5, "x")


def test_decorators_refuse_bad_settings():
    with pytest.raises(ab.InvalidInput):
        ab.on("cpu", to="matlab")
    with pytest.raises(ab.InvalidInput):
        ab.on("cpu", output="excel")
    with pytest.raises(ab.InvalidInput, match="gpu_id"):
        ab.torch(gpu_id="0")
    # a device that is not there fails at the call, never a silent CPU run
    if not has("cuda:0"):
        f = ab.on("cuda:0", to="numpy")(lambda x: x)
        with pytest.raises(ab.BackendUnavailable):
            f(np.ones(2))


@pytest.mark.parametrize("name", ["torch", "cupy"])
def test_cuda_frameworks_on_cuda0(name):
    """In the GPU harness: a host array to a CUDA tensor / CuPy array on cuda:0 in one call,
    zero-copy between frameworks on the device (same pointer), and back to NumPy."""
    if not has("cuda:0"):
        pytest.skip("no cuda:0 here; the GPU harness runs this")
    mod = framework(name)
    x = aligned(4096)
    y = ab.convert(x, "cuda:0", to=name)
    assert type(y).__module__.split(".")[0] == mod.__name__
    dptr = y.data_ptr() if name == "torch" else y.data.ptr
    for other in ("torch", "cupy", "array"):
        if other != "array" and importlib.util.find_spec(other) is None:
            continue
        z = ab.convert(y, "cuda:0", to=other)
        zptr = {
            "torch": lambda v: v.data_ptr(),
            "cupy": lambda v: v.data.ptr,
            "array": lambda v: v.data_ptr,
        }[other](z)
        assert zptr == dptr, other
    back = ab.convert(y, "cpu", to="numpy")
    np.testing.assert_array_equal(back, x)

    @ab.on("cuda:0", to=name, output="numpy")
    def double(v):
        return v * 2

    np.testing.assert_array_equal(double(x), x * 2)
