"""The NumPy fast path of ``ab.convert`` (issue 33): an exact ``numpy.ndarray`` is read in
place from its struct, without a DLPack exchange, with exactly the semantics of the DLPack
import. An ndarray subclass still goes through DLPack, so every case is checked against it."""

import gc
import inspect
import sys
import threading
import weakref

import numpy as np
import pytest

import arraybridge as ab

DTYPES = ["uint8", "uint16", "int32", "int64", "float16", "float32", "float64"]


class Sub(np.ndarray):
    """Imported through DLPack (a subclass may override ``__dlpack__``)."""


def ptr(x):
    return x.__array_interface__["data"][0]


def describe(a):
    """What an ``ab.Array`` says of itself, and what NumPy sees through DLPack."""
    y = np.from_dlpack(a)
    return (
        a.shape,
        a.dtype,
        a.device,
        a.readonly,
        a.data_ptr,
        repr(a),
        y.shape,
        y.strides,
        y.dtype.str,
        y.flags.writeable,
        ptr(y),
    )


def same_as_dlpack(v):
    """``ab.convert(v)`` (fast path) and the DLPack import of the same memory agree."""
    a = ab.convert(v)
    b = ab.convert(v.view(Sub))
    assert describe(a) == describe(b)
    np.testing.assert_array_equal(np.from_dlpack(a), v)
    return a


@pytest.mark.parametrize("dtype", DTYPES + ["intc", "int_", "longlong", "<f4", "=f8", "|u1"])
def test_every_dtype_aliases(dtype):
    x = (np.arange(24) % 97).astype(dtype).reshape(2, 3, 4)
    a = same_as_dlpack(x)
    assert a.data_ptr == x.ctypes.data
    assert np.from_dlpack(a).ctypes.data == x.ctypes.data
    assert not a.readonly


@pytest.mark.parametrize(
    "view",
    [
        lambda b: b,
        lambda b: b.T,
        lambda b: b[::2, 1::3],
        lambda b: b[::-1, ::-2],
        lambda b: b[:, ::-1],
        lambda b: b[2:3],  # an axis of one element
        lambda b: b[:, 4],
        lambda b: b[3, 4, ...],  # 0-d view
        lambda b: b[:0],  # empty
        lambda b: b[:, :0].T,
        lambda b: np.broadcast_to(b[0], (5, 10)),  # a zero stride (read-only)
        lambda b: b[np.newaxis, :, np.newaxis],
        lambda b: np.asfortranarray(b),
    ],
)
def test_layouts_match_the_dlpack_import(view):
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    v = view(base)
    a = same_as_dlpack(v)
    if v.size:
        assert a.data_ptr == ptr(v)


def test_zero_d_and_empty_arrays():
    for v in [np.array(3.5, dtype=np.float32), np.zeros((0, 3)), np.zeros((2, 0, 4), np.uint16)]:
        a = same_as_dlpack(v)
        assert a.shape == v.shape


def test_odd_stride_on_an_axis_of_one_element():
    # NumPy checks strides only on axes longer than one (and truncates the others): so do we
    buf = np.arange(16, dtype=np.float32)
    v = np.lib.stride_tricks.as_strided(buf, shape=(1, 4), strides=(6, 4))
    same_as_dlpack(v)


def test_read_only_stays_read_only():
    x = np.arange(8, dtype=np.float32)
    x.flags.writeable = False
    a = same_as_dlpack(x)
    assert a.readonly
    y = np.from_dlpack(a)
    assert not y.flags.writeable and ptr(y) == ptr(x)
    with pytest.raises(ab.InvalidInput, match="read-only"):
        ab.copyto(a, np.zeros(8, dtype=np.float32))
    with pytest.raises(BufferError):
        a.__dlpack__()  # the legacy ABI has no READ_ONLY flag
    # a writeable one stays writeable, and writes are shared both ways
    w = np.zeros(4)
    b = ab.convert(w)
    assert not b.readonly
    np.from_dlpack(b)[1] = 5
    assert w[1] == 5


def test_the_source_lives_as_long_as_the_array():
    x = np.arange(1000, dtype=np.int64)
    alive = weakref.ref(x)
    refs = sys.getrefcount(x)
    a = ab.convert(x)
    assert sys.getrefcount(x) == refs + 1
    del x
    gc.collect()
    assert alive() is not None
    np.testing.assert_array_equal(np.from_dlpack(a), np.arange(1000))
    y = np.from_dlpack(a)
    del a
    gc.collect()
    assert alive() is not None  # y's capsule holds the Array, which holds x
    assert y.sum() == 999 * 1000 // 2
    del y
    gc.collect()
    assert alive() is None  # and nothing leaks


def test_many_conversions_do_not_leak_references():
    x = np.ones(16)
    refs = sys.getrefcount(x)
    for _ in range(1000):
        ab.convert(x)
    assert sys.getrefcount(x) == refs


def test_an_array_dropped_on_another_thread():
    x = np.arange(10.0)
    refs = sys.getrefcount(x)
    arrays = [ab.convert(x) for _ in range(10)]
    t = threading.Thread(target=arrays.clear)
    t.start()
    t.join()
    gc.collect()
    assert sys.getrefcount(x) == refs


def test_copy_true_copies():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::-1]
    a = ab.convert(x, copy=True)
    assert a.data_ptr != ptr(x)
    y = np.from_dlpack(a)
    np.testing.assert_array_equal(y, x)
    x[0, 0] = 100
    assert y[0, 0] != 100
    b = ab.convert(x, "cpu", copy=False)
    assert b.data_ptr == ptr(x)


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(4, dtype=">f4"),  # non-native byte order: NumPy's BufferError
        lambda: np.arange(4, dtype=">i8"),
        lambda: np.ones(3, dtype=np.complex64),
        lambda: np.ones(3, dtype=np.complex128),
        lambda: np.array([1, "a"], dtype=object),
        lambda: np.array([True, False]),
        lambda: np.arange(3, dtype=np.int16),
        lambda: np.arange(3, dtype=np.int8),
        lambda: np.arange(3, dtype=np.uint32),
        lambda: np.arange(3, dtype=np.uint64),
        lambda: np.array(["a", "b"]),
        lambda: np.zeros(3, dtype=np.longdouble),
        lambda: np.zeros(3, dtype="datetime64[s]"),
        lambda: np.zeros(4, dtype=[("a", "u1"), ("b", "f4")]),
        lambda: np.zeros(4, dtype=[("a", "u1"), ("b", "<f4")])["b"],  # strides of 5 bytes
    ],
)
def test_refusals_are_the_dlpack_imports(make):
    v = make()
    with pytest.raises(ab.InvalidInput) as fast:
        ab.convert(v)
    with pytest.raises(ab.InvalidInput) as slow:
        ab.convert(v.view(Sub))
    assert str(fast.value) == str(slow.value)


def test_an_unaligned_view_is_imported_as_dlpack_imports_it():
    raw = np.zeros(33, dtype=np.uint8)
    v = raw[1:].view(np.float32)  # unaligned: NumPy exports it all the same
    a = same_as_dlpack(v)
    assert a.data_ptr == ptr(v)


def test_arrays_viewing_a_dlpack_capsule_and_buffers():
    x = np.arange(5, dtype=np.float32)
    y = np.from_dlpack(ab.convert(x))  # its base is a capsule: through DLPack
    a = same_as_dlpack(y)
    assert a.data_ptr == ptr(x)
    b = ab.convert(bytearray(b"abcd"))  # the buffer protocol, through numpy.asarray
    assert (b.dtype, b.shape, b.readonly) == ("uint8", (4,), False)
    c = ab.convert(memoryview(b"abcd"))  # read-only
    assert c.readonly


def test_the_wrapper_keeps_its_signature_and_errors():
    assert str(inspect.signature(ab.convert)) == "(x, device='cpu', *, to='array', copy=None)"
    assert ab.convert.__doc__.startswith("Hold ``x``")
    x = np.arange(3.0)
    assert ab.convert(x, None).data_ptr == ptr(x)
    y = ab.convert(x, to="numpy")
    assert isinstance(y, np.ndarray) and ptr(y) == ptr(x)
    assert ptr(ab.convert(x, "cpu", to="same")) == ptr(x)
    assert ab.convert(x, device="auto").device == "cpu"
    assert ab.convert(x, copy=True).data_ptr != ptr(x)
    with pytest.raises(TypeError):
        ab.convert(x, "cpu", "array")  # to is keyword-only
    with pytest.raises(TypeError):
        ab.convert()
    # the arguments the native entry hands on: the Python implementation's errors, unchanged
    for args, kwargs in [
        ((x, 5), {}),
        ((x,), {"copy": "yes"}),
        ((x,), {"copy": 1}),
        ((x,), {"to": None}),
        ((x,), {"to": "pandas"}),
        ((x, "gpu"), {}),
        ((x, None), {"to": "array", "copy": False}),
        ((x,), {"copy": np.True_}),
    ]:
        try:
            ab._convert_py(*args, **kwargs)
            expected = None
        except Exception as e:  # noqa: BLE001
            expected = (type(e), str(e))
        try:
            ab.convert(*args, **kwargs)
            got = None
        except Exception as e:  # noqa: BLE001
            got = (type(e), str(e))
        assert got == expected, (args, kwargs)


_DELETER_WITHOUT_THE_GIL = r"""
import ctypes, numpy as np, arraybridge as ab

api = ctypes.pythonapi
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
x = np.arange(1000.0)
cap = ab.convert(x, "cpu").__dlpack__()  # legacy: a DLManagedTensor holding the ndarray
tensor = api.PyCapsule_GetPointer(cap, b"dltensor")
USED = b"used_dltensor"  # the capsule keeps a pointer to its name: kept alive
api.PyCapsule_SetName(cap, USED)  # consumed: the deleter is ours to call
# DLManagedTensor: a 48-byte DLTensor, manager_ctx, then the deleter
deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_address(tensor + 56).value)
del x  # the tensor holds the last reference: the deleter frees the ndarray


def consumer(obj, device, to, copy):
    # a consumer called by arraybridge (here through ab.convert's Rust frame, as JAX's
    # from_dlpack is for to="jax") that releases the GIL and drops an older import on the way
    # (ctypes releases the GIL around a foreign call), as XLA frees a buffer
    deleter(tensor)
    return obj


ab._convert_py = consumer
ab.convert(np.ones(2), "cpu", to="numpy")
print("OK")
"""


def test_the_deleter_takes_the_gil_when_a_consumer_released_it():
    """A DLPack consumer may call the deleter of an ndarray read in place on any thread, with
    the GIL released, also from inside a call of arraybridge that released it in C++ (JAX 0.11
    on the GPU machine, 2026-11-27: a segfault in ``array_dealloc``, the array freed without
    the GIL). ``PYTHONMALLOC=debug`` makes a free without the GIL a fatal error."""
    import os
    import subprocess

    env = dict(os.environ, PYTHONMALLOC="debug")
    r = subprocess.run(
        [sys.executable, "-c", _DELETER_WITHOUT_THE_GIL],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "OK" and not r.stderr, r.stdout + r.stderr
