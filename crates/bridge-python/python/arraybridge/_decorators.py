"""Decorators that move a function's array arguments to a device and framework on the way in
and convert its result on the way out: :func:`on`, and the seed's spellings
:func:`torch`, :func:`cupy`, :func:`jax`, :func:`tensorflow`, :func:`numpy`."""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Optional

import numpy as np

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
        pairs = [(k, _map(v, f)) for k, v in x.items()]
        return _same_kind_of_dict(x, pairs)
    return x


def _same_kind_of_dict(x: dict, pairs: list) -> dict:
    """A dict of ``x``'s type (a ``defaultdict`` keeps its factory, an ``OrderedDict`` its
    type) holding ``pairs``; a plain ``dict`` where the type cannot be made so."""
    if type(x) is dict:
        return dict(pairs)
    try:
        out = copy.copy(x)
        out.clear()
        out.update(pairs)
        return out
    except Exception:  # noqa: BLE001 - a dict subclass that cannot be copied: a plain dict
        return dict(pairs)


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
    if callable(device) and not isinstance(device, str):
        raise InvalidInput(
            "@ab.on needs the device to run on: write @ab.on('cuda:0') (or @ab.on('cpu')), "
            "with parentheses"
        )
    if not isinstance(device, str):
        raise InvalidInput(f"device must be a string such as 'cuda:0', got {device!r}")
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


# ``ab.config``'s settings of ``@ab.offload``: whether it may offload at all, and measured device
# figures that replace the nominal ones.
_OFFLOAD: dict = {"enabled": True, "device_profiles": {}}


def config(*, offload: Optional[bool] = None, device_profiles: Optional[dict] = None) -> dict:
    """Settings of :func:`offload`: ``offload=False`` runs every ``@ab.offload`` call on the
    CPU (recorded as such in :func:`arraybridge.last_decision`); ``device_profiles`` gives
    measured figures that replace a device's nominal ones in the offload model, e.g.
    ``{"cuda:0": {"flops_per_s": 2e12, "h2d_bytes_per_s": 2.5e10}, "cpu": {"flops_per_s":
    4e10}}`` (a device's keys: ``flops_per_s``, ``h2d_bytes_per_s``, ``d2h_bytes_per_s``,
    ``launch_overhead_s``; ``{}`` drops them all). Returns the settings now in force.

    >>> import arraybridge as ab
    >>> ab.config()["offload"]
    True
    """
    if offload is not None:
        if not isinstance(offload, bool):
            raise InvalidInput(f"offload is True or False, got {offload!r}")
        _OFFLOAD["enabled"] = offload
    if device_profiles is not None:
        if not isinstance(device_profiles, dict) or not all(
            isinstance(v, dict) for v in device_profiles.values()
        ):
            raise InvalidInput(
                "device_profiles is a dict of device name -> dict of figures, e.g. "
                "{'cuda:0': {'flops_per_s': 2e12}}"
            )
        from . import _native  # noqa: PLC0415

        # checked now (unknown devices' keys, non-numbers), not at the first call
        _native.offload_decision(0, 0, 0.0, device_profiles)
        _OFFLOAD["device_profiles"] = {str(k): dict(v) for k, v in device_profiles.items()}
    return {"offload": _OFFLOAD["enabled"], "device_profiles": dict(_OFFLOAD["device_profiles"])}


def _nbytes(x: Any) -> int:
    """The bytes of array ``x`` (its ``nbytes``, or its shape times its item size)."""
    n = getattr(x, "nbytes", None)
    if isinstance(n, int):
        return n
    size = 1
    for d in getattr(x, "shape", ()):
        size *= int(d)
    try:
        import numpy as _np  # noqa: PLC0415

        item = _np.dtype(str(getattr(x, "dtype", "float64")).replace("torch.", "")).itemsize
    except TypeError:
        item = 8
    return size * item


def _leaves(x: Any, out: list) -> list:
    """Every array in ``x`` (through tuples, lists and dicts)."""
    _map(x, lambda a: out.append(a) or a)
    return out


def offload(
    fn: Optional[Callable] = None,
    *,
    to: str = "array",
    output: Optional[str] = "same",
    flops: Any = None,
    flops_per_byte: float = 100.0,
) -> Any:
    """Decide per call whether the decorated function runs on a device or on the CPU, with the
    offload model of the command line's ``--device auto`` (the bytes of the array arguments
    moved there and back, the call's work, the devices' free memory and throughputs: nominal
    figures, or measured ones from :func:`config`), then run it as :func:`on` would there: its
    array arguments converted to ``to`` objects on that device (``"array"``: arraybridge
    arrays, which the pipelines read where they live), its result converted to ``output``.

    The work of a call is ``flops`` (a number, or a function of the call's arguments that
    returns one) or ``flops_per_byte`` × the input bytes. The decision and its reason are
    :func:`arraybridge.last_decision` and are logged on the ``arraybridge`` logger at INFO;
    ``ab.config(offload=False)`` keeps every call on the CPU.

    >>> import numpy as np, arraybridge as ab
    >>> @ab.offload
    ... def peak(x):
    ...     return ab.convert(x, "cpu", to="numpy").max()
    >>> float(peak(np.arange(256.0)))  # 2 KiB: the CPU, whatever the devices
    255.0
    >>> ab.last_decision()["device"]
    'cpu'
    """
    if _frameworks.check_target(to) == "numpy":
        # else the call would fail whenever the model chose a device, and only then
        raise InvalidInput(
            "@ab.offload(to='numpy'): NumPy arrays live in host memory, and offload chooses a "
            "device per call: use to='array' (the default), 'same' or a framework with device "
            "arrays ('torch', 'cupy', 'jax'), and output='numpy' for NumPy results"
        )
    out = _check_output(output)

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from . import _native  # noqa: PLC0415
            from ._common import _logger  # noqa: PLC0415

            arrays = _leaves((args, kwargs), [])
            nbytes = sum(_nbytes(a) for a in arrays)
            if not _OFFLOAD["enabled"]:
                device = "cpu"
                reason = "offloading is off (ab.config(offload=False)): running on the CPU"
                _native.record_decision(device, reason)
            else:
                work = flops(*args, **kwargs) if callable(flops) else flops
                if work is None:
                    work, what = flops_per_byte, "flops_per_byte"
                else:
                    what = "flops"
                try:
                    if isinstance(work, (bool, np.bool_)):
                        raise TypeError
                    work = float(work)
                except (TypeError, ValueError):
                    raise InvalidInput(
                        f"@ab.offload: {what} is a number of operations (or, for flops, a "
                        f"function of the call's arguments returning one), got {work!r}"
                    ) from None
                if what == "flops_per_byte":
                    work *= nbytes
                d = _native.offload_decision(
                    nbytes, nbytes, work, _OFFLOAD["device_profiles"] or None
                )
                device, reason = d["device"], d["reason"]
            _logger.info("offload %s: %s: %s", getattr(f, "__qualname__", f), device, reason)
            return on(device, to=to, output=out if out is not None else "none")(f)(
                *args, **kwargs
            )

        return wrapper

    return decorate if fn is None else decorate(fn)
