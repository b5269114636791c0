"""Helpers the package's modules share: argument checks, result tables, logging of ``auto``
decisions, host copies of inputs DLPack cannot carry."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from . import _dask, _native
from ._native import InvalidInput

_logger = logging.getLogger("arraybridge")


def _log_auto(device: str) -> None:
    if isinstance(device, str) and device.strip().lower() == "auto":
        d = _native.last_decision()
        if d is not None:
            _logger.info("auto: %s: %s", d["device"], d["reason"])


def _int(name: str, v: Any) -> int:
    """``v`` as a whole number >= 0 for argument ``name``, else :class:`InvalidInput` naming it
    (NaN, infinities, fractions, negative numbers or numbers over 2**64 - 1); a non-number is a
    ``TypeError``, as Python's own ``int()`` would raise."""
    if isinstance(v, (int, np.integer)):
        n = int(v)
    elif isinstance(v, (float, np.floating)):
        if not math.isfinite(v) or v != math.floor(v):
            raise InvalidInput(f"invalid argument {name}: must be a whole number, got {v!r}")
        n = int(v)
    else:
        raise TypeError(f"{name} must be a whole number, got {type(v).__name__} {v!r}")
    if n < 0:
        raise InvalidInput(f"invalid argument {name}: must be at least 0, got {n}")
    if n > 2**64 - 1:
        raise InvalidInput(f"invalid argument {name}: {n} is too large")
    return n


def _pandas():
    try:
        import pandas  # noqa: PLC0415

        return pandas
    except ImportError:
        return None


def _table(columns: dict, like: Any = None):
    """A DataFrame when pandas is installed (or ``like`` is one), else a structured array."""
    pd = _pandas()
    if pd is not None and (like is None or isinstance(like, pd.DataFrame)):
        return pd.DataFrame(columns)
    names = list(columns)
    n = len(columns[names[0]]) if names else 0
    out = np.empty(n, dtype=[(k, np.asarray(v).dtype) for k, v in columns.items()])
    for k, v in columns.items():
        out[k] = v
    return out


def _native_order(x: Any, what: str) -> Any:
    """A NumPy array of non-native byte order (FITS files store big-endian data, and astropy
    reads it as such) as a native copy, its bytes checked against the host budget first (DLPack
    carries native byte order only); anything else as it is."""
    if isinstance(x, np.ndarray) and not x.dtype.isnative:
        _native.check_host_allocation(
            int(x.nbytes),
            f"{what}: a native-byte-order copy of a {x.dtype.str} array of shape {x.shape}",
        )
        return x.astype(x.dtype.newbyteorder("="))
    return x


def _dask_inputs(fn: str, **inputs: Any) -> tuple:
    """PACO's inputs in order, each ``dask.array`` computed whole (its bytes checked against
    the host budget first) and each big-endian NumPy array (a FITS file's) copied to native
    byte order; other inputs as they are."""
    return tuple(
        _native_order(
            _dask.to_host(v, f"{fn}: {k} (a dask array is computed whole)")
            if _dask.is_dask(v)
            else v,
            f"{fn}: {k}",
        )
        for k, v in inputs.items()
    )
