"""trackpy's ``locate`` beyond one 2-D image with one diameter: sizes per axis (trackpy's
``validate_tuple``), 3-D volumes (:func:`_locate_nd`, the CPU's n-D path) and movies of frames
with sizes per axis (:func:`_locate_frames_nd`), used by :func:`arraybridge.locate` and
:func:`arraybridge.batch`."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _native
from ._native import InvalidInput


def _per_axis(name: str, v: Any) -> Any:
    """``v`` as trackpy's ``validate_tuple`` takes it: a number, or a tuple of one per axis."""
    if v is None or isinstance(v, (int, float, np.integer, np.floating)):
        return v
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return v.item()
    try:
        t = tuple(v)
    except TypeError:
        raise TypeError(f"{name} must be a number or a tuple of numbers, got {v!r}") from None
    if not t:
        raise InvalidInput(f"invalid argument {name}: an empty tuple")
    return t


def _check_axes(ndim: int, sizes: dict) -> None:
    """trackpy's ``validate_tuple``: a size given per axis has one value per axis of the image
    (``ndim``), as one number stands for all of them."""
    for name, v in sizes.items():
        if isinstance(v, tuple) and len(v) != ndim:
            raise InvalidInput(
                f"invalid argument {name}: {len(v)} values {v!r} for an image of {ndim} "
                "dimensions (one per axis, or one number)"
            )


def _ndim(x: Any) -> int:
    nd = getattr(x, "ndim", None)
    if nd is None:
        shape = getattr(x, "shape", None)
        nd = len(shape) if shape is not None else np.asarray(x).ndim
    return int(nd)


def _isotropic(*values: Any) -> bool:
    return all(not isinstance(v, tuple) or len(set(v)) <= 1 for v in values)


def _scalar(v: Any) -> Any:
    return v[0] if isinstance(v, tuple) else v


def _locate_nd(image: Any, diameter: Any, device: str, warn_stacklevel: int = 0, **kw: Any):
    """trackpy's ``locate`` on one 2-D image or 3-D volume with sizes per axis, its bandpass
    on ``device`` (``auto``: the image's device, else the CPU); trackpy's warning for an empty
    result pointing ``warn_stacklevel`` frames up from here (0: none)."""
    from ._common import _int, _table  # noqa: PLC0415

    if kw["maxsize"] is not None and not _isotropic(diameter):
        raise InvalidInput("Filtering by size is not available for anisotropic features.")

    def ints(name, v):
        return None if v is None else [_int(name, x) for x in (v if isinstance(v, tuple) else (v,))]

    def floats(v):
        return None if v is None else [float(x) for x in (v if isinstance(v, tuple) else (v,))]

    cols, rows, why = _native.locate_nd(
        image,
        diameter=ints("diameter", diameter),
        minmass=0.0 if kw["minmass"] is None else float(kw["minmass"]),
        maxsize=None if kw["maxsize"] is None else float(kw["maxsize"]),
        separation=floats(kw["separation"]),
        noise_size=floats(kw["noise_size"]),
        smoothing_size=ints("smoothing_size", kw["smoothing_size"]),
        threshold=None if kw["threshold"] is None else float(kw["threshold"]),
        invert=bool(kw["invert"]),
        percentile=float(kw["percentile"]),
        topn=None if kw["topn"] is None else _int("topn", kw["topn"]),
        preprocess=bool(kw["preprocess"]),
        characterize=bool(kw["characterize"]),
        device=device,
        max_iterations=_int("max_iterations", kw.get("max_iterations", 10)),
    )
    if why is not None and warn_stacklevel:
        import warnings  # noqa: PLC0415

        from . import _EMPTY_WARNINGS  # noqa: PLC0415

        if why in _EMPTY_WARNINGS:
            warnings.warn(_EMPTY_WARNINGS[why], UserWarning, stacklevel=warn_stacklevel)
    return _table({c: rows[:, i] for i, c in enumerate(cols)})


def _trackpy_deprecated(filter_before: Any, filter_after: Any, stacklevel: int) -> None:
    """trackpy's handling of its retired ``locate`` arguments (trackpy 0.7 ``feature.py``):
    ``filter_before`` is refused, ``filter_after`` warns that it is always on."""
    if filter_before is not None:
        raise ValueError(
            "The filter_before argument is no longer supported as it does not improve "
            "performance. Features are filtered after refine."
        )
    if filter_after is not None:
        import warnings  # noqa: PLC0415

        warnings.warn(
            "The filter_after argument has been deprecated: it is always on, unless "
            "minmass = None and maxsize = None.",
            DeprecationWarning,
            stacklevel=stacklevel + 1,
        )


def _names(t: Any) -> list:
    return list(t.columns) if hasattr(t, "columns") else list(t.dtype.names)


def _locate_frames_nd(
    frames: Any,
    diameter: Any,
    *,
    engine: str = "auto",
    device: str = "auto",
    batch_size: int = 4,
    **kw: Any,
):
    """trackpy's ``batch`` on a ``(T, H, W)`` movie with sizes per axis (``diameter`` and the
    others already through :func:`_per_axis`; ``kw`` the rest of ``locate``'s settings): each
    frame through the CPU's n-D path, with a ``frame`` column. (One size per axis goes through
    ``arraybridge._locate``, on any device.)"""
    from . import _table  # noqa: PLC0415

    if engine not in ("auto", "python", "numba"):
        raise InvalidInput(f"engine must be 'auto', 'python' or 'numba', got {engine!r}")
    del batch_size  # frames go one at a time here
    movie = np.asarray(frames)
    movie = movie[None] if movie.ndim == 2 else movie
    parts = []
    for t in range(movie.shape[0]):
        tab = _locate_nd(movie[t], diameter, device, 5, **kw)
        cols = {k: np.asarray(tab[k]) for k in _names(tab)}
        cols["frame"] = np.full(len(cols[next(iter(cols))]), t, dtype=np.int64)
        parts.append(cols)
    return _table({k: np.concatenate([c[k] for c in parts]) for k in parts[0]})
