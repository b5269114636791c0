"""Dask arrays in: a ``dask.array.Array`` is never handed to NumPy whole (``np.asarray`` would
compute all of it, unchecked). Movies are computed a chunk of frames at a time
(:func:`movie_chunks`); what must be whole (a volume for ``blob_log``, a 2-D image, PACO's
cube) is computed by :func:`to_host` after its bytes are checked against the host memory
budget (``OutOfMemory`` before anything is computed), straight into one preallocated array.

Dask itself is optional: without ``dask.array`` imported no object can be a dask array, and
nothing here imports it."""

from __future__ import annotations

import math
import sys
from typing import Any, Iterator, Tuple

import numpy as np

from . import _native
from ._native import InvalidInput

_U64_MAX = 2**64 - 1


def is_dask(x: Any) -> bool:
    """Whether ``x`` is a ``dask.array.Array`` (without importing dask)."""
    da = sys.modules.get("dask.array")
    return da is not None and isinstance(x, getattr(da, "Array", ()))


def _describe(x: Any) -> str:
    return f"a dask array of shape {tuple(x.shape)} ({x.dtype})"


def check(x: Any, what: str) -> None:
    """``InvalidInput`` (naming ``what``) for a dask array arraybridge cannot read: an unknown
    shape (chunks of unknown size) or pixels that are not bool, integers or floats (objects,
    strings, complex numbers), before anything is computed."""
    if any(isinstance(d, float) and math.isnan(d) for d in x.shape):
        raise InvalidInput(
            f"{what}: {_describe(x)} has chunks of unknown size; call "
            "x.compute_chunk_sizes() first"
        )
    dt = np.dtype(x.dtype)
    if dt.kind not in "biuf":
        raise InvalidInput(
            f"{what}: {_describe(x)}: unsupported dtype {dt} (pixels are bool, integers or "
            "floats)"
        )


def _on_host(x: Any) -> bool:
    """Whether computing ``x`` gives host memory (a NumPy-backed dask array: its ``_meta``
    is not a CuPy array)."""
    meta = getattr(x, "_meta", None)
    return not type(meta).__module__.split(".")[0] == "cupy"


def nbytes(x: Any) -> int:
    """The bytes of ``x`` computed (saturating at 2**64 - 1: an overflow is over any budget)."""
    n = np.dtype(x.dtype).itemsize
    for d in x.shape:
        n *= int(d)
    return min(n, _U64_MAX)


def to_host(x: Any, what: str) -> Any:
    """``x`` computed whole: its bytes checked against the host budget first (``OutOfMemory``
    naming ``what``, nothing computed), then its blocks stored one by one into a single
    preallocated NumPy array (``dask.array.store``: no second, concatenated copy). A dask array
    of CuPy blocks is computed with ``.compute()`` (device memory; the device pools' limits
    apply)."""
    check(x, what)
    if not _on_host(x):
        return x.compute()
    _native.check_host_allocation(nbytes(x), f"{what}: computing {_describe(x)} on the host")
    import dask.array as da  # noqa: PLC0415  (x is a dask array: dask is there)

    out = np.empty(tuple(int(d) for d in x.shape), dtype=x.dtype)
    if out.size:
        da.store(x, out)
    return out


def movie(x: Any, what: str) -> Any:
    """``x`` checked as a movie of 2-D frames: ``(T, H, W)``, a 2-D image as one frame."""
    check(x, what)
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3:
        raise InvalidInput(
            f"a movie is (T, H, W) frames or a (T, Z, Y, X) array of volumes; got "
            f"{_describe(x)}"
        )
    return x


def movie_chunks(x: Any, chunk: int) -> Iterator[Tuple[int, Any]]:
    """``(first frame, (n, H, W) array)`` pieces of a dask movie (checked by :func:`movie`):
    frames ``a .. a + chunk`` sliced along axis 0 and computed one piece at a time, so the
    memory held is one piece (and the dask blocks it touches: a block that spans more frames
    than ``chunk`` is computed for each piece it overlaps; ``x.rechunk({0: chunk})`` avoids
    that)."""
    t = int(x.shape[0])
    for a in range(0, t, chunk):
        b = min(a + chunk, t)
        yield a, to_host(x[a:b], f"frames {a}..{b} of {_describe(x)}")
