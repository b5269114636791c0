"""Framework objects in and out: which framework an object belongs to, where it lives, and
the target framework's own object for an :class:`arraybridge.Array` (through that framework's
DLPack import, so host memory is shared, not copied, wherever the framework can view it)."""

from __future__ import annotations

import importlib
from typing import Any, Optional

import numpy as np

from ._native import Array, InvalidInput
from . import _native

#: The frameworks ``to=`` names; ``"array"`` is arraybridge's own :class:`Array`, ``"same"``
#: the framework of the input.
FRAMEWORKS = ("numpy", "torch", "cupy", "jax", "tensorflow", "array")

# the module each framework's objects come from (``type(x).__module__``'s first part)
_MODULES = {
    "numpy": "numpy",
    "torch": "torch",
    "cupy": "cupy",
    "jax": "jax",
    "jaxlib": "jax",
    "tensorflow": "tensorflow",
    "arraybridge": "array",
}

# DLPack device types (dlpack.h)
_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_OPENCL = 1, 2, 3, 4


def is_array(x: Any) -> bool:
    """Whether ``x`` is an array arraybridge converts (anything with ``__dlpack__``; not a
    Python or NumPy scalar, not a string)."""
    if isinstance(x, Array):
        return True
    if isinstance(x, (str, bytes, int, float, complex, bool, np.generic)) or x is None:
        return False  # NumPy scalars (np.float32(1)) are kept as they are
    return hasattr(x, "__dlpack__")


def framework_of(x: Any) -> str:
    """The framework ``x`` belongs to (one of :data:`FRAMEWORKS`); ``"array"`` for objects of
    other libraries that speak DLPack."""
    return _MODULES.get(type(x).__module__.split(".")[0], "array")


def device_of(x: Any) -> str:
    """The arraybridge device ``x`` lives on (``"cpu"``, ``"cuda:N"``, ``"opencl:N"``), from
    its ``__dlpack_device__``."""
    if isinstance(x, Array):
        return x.device
    kind, index = x.__dlpack_device__()
    kind = int(kind)
    if kind in (_KDL_CPU, _KDL_CUDA_HOST):
        return "cpu"
    if kind == _KDL_CUDA:
        return f"cuda:{int(index)}"
    if kind == _KDL_OPENCL:
        return f"opencl:{int(index)}"
    raise InvalidInput(f"an array on DLPack device type {kind} is not one arraybridge knows")


def _import(name: str, to: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise InvalidInput(f"to={to!r} needs {name} installed ({e})") from None


def _imported(to: str, f):
    """A framework's DLPack import, its refusals (a read-only array through the legacy ABI,
    a device it does not take) as :class:`InvalidInput` naming the target."""
    try:
        return f()
    except (ValueError, RuntimeError, BufferError, TypeError) as e:
        raise InvalidInput(f"to={to!r}: {type(e).__name__}: {e}") from None


#: The 64-bit dtypes JAX narrows to 32 bits unless ``jax_enable_x64`` is set.
_JAX_NARROWED = {"float64": "float32", "int64": "int32", "uint64": "uint32", "complex128": "complex64"}


def _check_jax_width(jax, a: Array) -> None:
    """JAX without ``jax_enable_x64`` (its default) imports a 64-bit array as a 32-bit one: a
    float64 loses its range and precision, an int64 wraps; refused, never silent."""
    narrow = _JAX_NARROWED.get(a.dtype)
    if narrow is not None and not jax.config.read("jax_enable_x64"):
        raise InvalidInput(
            f"to='jax': this {a.dtype} array would become {narrow} (JAX runs in 32 bits "
            f"unless jax_enable_x64 is set), losing values: call "
            f"jax.config.update('jax_enable_x64', True) first, or convert it to {narrow} "
            "yourself where that loses nothing you need"
        )


def check_target(to: str) -> str:
    """``to`` in lower case, or :class:`InvalidInput` naming the choices."""
    t = str(to).strip().lower()
    if t not in FRAMEWORKS + ("same",):
        raise InvalidInput(
            f"to must be one of {', '.join(FRAMEWORKS + ('same',))}, got {to!r}"
        )
    return t


def to_framework(a: Array, to: str, copy: Optional[bool] = None) -> Any:
    """``a`` as an object of framework ``to`` (not ``"same"``), through its DLPack import:
    host memory is shared with ``a`` where the framework can view it (JAX views host memory
    aligned to 64 bytes and copies otherwise; ``copy=False`` makes that an error)."""
    if to == "array":
        return a
    if to == "numpy":
        if a.device != "cpu":
            raise InvalidInput(
                f"to='numpy' holds host memory, and this array is on {a.device}: convert it "
                "to device='cpu' (one copy), or choose a framework of that device "
                "(to='torch', 'cupy', 'jax')"
            )
        if a.dtype == "bfloat16":
            raise InvalidInput(
                "to='numpy': NumPy has no bfloat16: keep it in a framework that has it "
                "(to='torch', 'jax', 'array'), or cast it to float32 there first"
            )
        return np.from_dlpack(a, copy=copy) if copy is not None else np.from_dlpack(a)
    if to == "torch":
        torch = _import("torch", to)
        return _imported(to, lambda: torch.from_dlpack(a))
    if to == "cupy":
        cupy = _import("cupy", to)
        return _imported(to, lambda: cupy.from_dlpack(a))
    if to == "jax":
        jax = _import("jax", to)
        import jax.dlpack  # noqa: PLC0415

        _check_jax_width(jax, a)
        try:
            return jax.dlpack.from_dlpack(a, copy=copy)
        except (ValueError, RuntimeError, BufferError, TypeError) as e:
            raise InvalidInput(f"to='jax': {type(e).__name__}: {e}") from None
    if to == "tensorflow":
        tf = _import("tensorflow", to)
        return _imported(to, lambda: tf.experimental.dlpack.from_dlpack(a.__dlpack__()))
    raise InvalidInput(f"unknown framework {to!r}")


def convert(x: Any, device: Optional[str], to: str, copy: Optional[bool]) -> Any:
    """``x`` on ``device`` (``None``: where it is) as an object of framework ``to``."""
    target = check_target(to)
    if target == "same":
        target = framework_of(x)
    dev = device_of(x) if device is None else device
    a = _native.convert(x, dev, copy=copy)
    # a copy asked for was made by arraybridge; the framework views the result (and with
    # copy=False must not copy either)
    return to_framework(a, target, False if copy is False else None)
