"""Decorators that move a function's array arguments to a device and framework on the way in
and convert its result on the way out: :func:`on`, and the seed's spellings
:func:`torch`, :func:`cupy`, :func:`jax`, :func:`tensorflow`, :func:`numpy`."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from . import _frameworks
from ._native import InvalidInput


def _map(x: Any, f: Callable[[Any], Any]) -> Any:
    """``f`` on every array in ``x``, through tuples, lists and dicts (their types kept,
    named tuples included); everything else as it is."""
    if _frameworks.is_array(x):
        return f(x)
    if isinstance(x, tuple):
        items = [_map(v, f) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, list):
        return type(x)(_map(v, f) for v in x)
    if isinstance(x, dict):
        return type(x)((k, _map(v, f)) for k, v in x.items())
    return x


def _first_array(x: Any) -> Optional[Any]:
    """The first array in ``x`` (depth first, in argument order), or ``None``."""
    if _frameworks.is_array(x):
        return x
    if isinstance(x, (tuple, list)):
        for v in x:
            a = _first_array(v)
            if a is not None:
                return a
    if isinstance(x, dict):
        for v in x.values():
            a = _first_array(v)
            if a is not None:
                return a
    return None


def _check_output(output: Optional[str]) -> Optional[str]:
    if output is None:
        return None
    o = str(output).strip().lower()
    if o == "none":
        return None
    return _frameworks.check_target(o)


def on(
    device: str = "cpu",
    *,
    to: str = "same",
    output: Optional[str] = "same",
) -> Callable[[Callable], Callable]:
    """Run the decorated function with its array arguments on ``device`` as ``to`` objects
    (``"same"``: each keeps its framework; ``"numpy"``, ``"torch"``, ``"cupy"``, ``"jax"``,
    ``"tensorflow"``, ``"array"``), and convert the arrays of its result to ``output``
    (``"same"``: the framework and device of the first array argument; a framework name: that
    framework, on the host for ``"numpy"``, where the result is otherwise; ``None``: as
    returned). Other arguments are passed as they are; arrays inside tuples, lists and dicts
    are converted too; methods work (``self`` is not an array). A device that is not there is
    :class:`BackendUnavailable` at the call, never a silent CPU run.

    >>> import numpy as np, arraybridge as ab
    >>> @ab.on("cpu", to="numpy", output="numpy")
    ... def total(x, scale=2):
    ...     return x.sum() * scale
    >>> float(total(np.ones(3)))
    6.0
    """
    target = _frameworks.check_target(to)
    out = _check_output(output)

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            first = _first_array((args, kwargs))

            def inbound(x: Any) -> Any:
                return _frameworks.convert(x, device, target, None)

            result = fn(*_map(args, inbound), **_map(kwargs, inbound))
            if out is None:
                return result
            if out == "same":
                if first is None:
                    return result
                fw, dev = _frameworks.framework_of(first), _frameworks.device_of(first)
            else:
                fw, dev = out, ("cpu" if out == "numpy" else None)

            def outbound(x: Any) -> Any:
                return _frameworks.convert(x, dev, fw, None)

            return _map(result, outbound)

        return wrapper

    return decorate


def _gpu(gpu_id: Optional[int], default: Optional[int] = None) -> str:
    gid = default if gpu_id is None else gpu_id
    if gid is None:
        return "cpu"
    if isinstance(gid, bool) or not isinstance(gid, int) or gid < 0:
        raise InvalidInput(f"gpu_id must be a GPU index (0, 1, ...) or None, got {gpu_id!r}")
    return f"cuda:{gid}"


def torch(gpu_id: Optional[int] = None, output_type: Optional[str] = "same"):
    """The seed's ``@torch(gpu_id=0, output_type=...)``: array arguments become PyTorch
    tensors on ``cuda:gpu_id`` (on the CPU when ``gpu_id`` is ``None``), the result is
    converted to ``output_type`` (as :func:`on`'s ``output``)."""
    return on(_gpu(gpu_id), to="torch", output=output_type)


def cupy(gpu_id: Optional[int] = 0, output_type: Optional[str] = "same"):
    """The seed's ``@cupy(gpu_id=0, output_type=...)``: array arguments become CuPy arrays on
    ``cuda:gpu_id``."""
    return on(_gpu(gpu_id, 0), to="cupy", output=output_type)


def jax(gpu_id: Optional[int] = None, output_type: Optional[str] = "same"):
    """The seed's ``@jax(gpu_id=..., output_type=...)``: array arguments become JAX arrays on
    ``cuda:gpu_id`` (on the CPU when ``gpu_id`` is ``None``)."""
    return on(_gpu(gpu_id), to="jax", output=output_type)


def tensorflow(gpu_id: Optional[int] = None, output_type: Optional[str] = "same"):
    """``@tensorflow(gpu_id=..., output_type=...)``: array arguments become TensorFlow
    tensors (through its DLPack import)."""
    return on(_gpu(gpu_id), to="tensorflow", output=output_type)


def numpy(fn: Optional[Callable] = None, *, output_type: Optional[str] = "same"):
    """The seed's ``@numpy``: array arguments become NumPy arrays on the host (device arrays
    are copied there once); usable with or without parentheses."""
    deco = on("cpu", to="numpy", output=output_type)
    return deco(fn) if fn is not None else deco
