"""Movies larger than memory from Python: :func:`batch_blob_log` and :func:`batch` take a
``.npy`` path, a memory-mapped array, a ``dask.array`` or any iterable of frames and detect it
chunk by chunk, holding one chunk of frames at a time (as ``arraybridge detect`` streams a
file)."""

from __future__ import annotations

import inspect
import mmap
import os
import warnings
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from . import _dask, _native
from ._native import Array, InvalidInput

#: Frames per chunk by default: bounded memory (64 frames of 512x512 u16 are 32 MiB).
CHUNK_FRAMES = 64


#: The ``.npy`` format versions NumPy writes (3.0: a UTF-8 header).
_NPY_VERSIONS = ((1, 0), (2, 0), (3, 0))


def _npy_header(f: Any, path: str) -> Tuple[Tuple[int, ...], np.dtype]:
    """The shape and dtype of an open ``.npy`` file's header, checked: a movie of pixels in C
    order; anything else (another version, Fortran order, objects, records, negative sizes)
    an :class:`InvalidInput` naming the file."""
    try:
        version = np.lib.format.read_magic(f)
        if version not in _NPY_VERSIONS:
            raise ValueError(f"format version {version[0]}.{version[1]}, not one NumPy writes")
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read_header(f)
    except (ValueError, TypeError, OverflowError, SyntaxError) as e:
        raise InvalidInput(f"{path}: not a .npy file ({e})") from None
    if fortran or len(shape) not in (2, 3) or any(int(n) < 0 for n in shape):
        raise InvalidInput(
            f"{path}: a movie is a C-order (T, H, W) array; this one has shape {shape}"
            f"{' in Fortran order' if fortran else ''}"
        )
    if dtype.hasobject or dtype.fields is not None or dtype.shape != () or (
        dtype.kind not in "biuf" or dtype.itemsize > 8
    ):
        raise InvalidInput(
            f"{path}: its pixels are {dtype!r}; a movie's are integers or floats of at most 64 "
            "bits"
        )
    return tuple(int(n) for n in shape), dtype


def _npy_chunks(path: str, chunk: int) -> Iterator[Tuple[int, np.ndarray]]:
    """Chunks of the frames of a C-order 3-D ``.npy`` file, read from the file (not mapped),
    so only one chunk is in memory; big-endian pixels are swapped to this machine's order in
    the chunk read."""
    with open(path, "rb") as f:
        shape, dtype = _npy_header(f, path)
        if len(shape) == 2:
            shape = (1, *shape)
        t, h, w = shape
        frame = h * w
        _native.check_host_allocation(
            min(int(min(chunk, t)) * frame * dtype.itemsize, 2**64 - 1),
            f"a chunk of {min(chunk, t)} frames of {path}",
        )
        for a in range(0, t, chunk):
            n = min(chunk, t - a)
            data = np.fromfile(f, dtype=dtype, count=n * frame)
            if data.size != n * frame:
                raise InvalidInput(
                    f"{path}: the file ends at frame {a + data.size // max(frame, 1)} of {t}"
                )
            if not dtype.isnative:
                data = data.byteswap(inplace=True).view(dtype.newbyteorder("="))
            yield a, data.reshape(n, h, w)


def _array_chunks(x: np.ndarray, chunk: int) -> Iterator[Tuple[int, np.ndarray]]:
    """Chunks of a 3-D array; for a memory-mapped one, the pages of a chunk are given back to
    the kernel once it is detected, so the resident memory stays about one chunk."""
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3:
        raise InvalidInput(
            f"a movie is (T, H, W) frames or a (T, Z, Y, X) array of volumes; got shape {x.shape}"
        )
    # pages are given back only where the file holds what they hold: a copy-on-write map
    # (mode "c") keeps the caller's changes in its pages, which must stay
    shared = isinstance(x, np.memmap) and getattr(x, "mode", None) in ("r", "r+", "w+")
    mm = getattr(x, "_mmap", None) if shared else None
    contiguous = x.flags["C_CONTIGUOUS"]
    for a in range(0, x.shape[0], chunk):
        part = x[a : a + chunk]
        if not part.dtype.isnative:
            # big-endian frames (a FITS file's): a native copy of this chunk only
            from . import _native_order  # noqa: PLC0415

            yield a, _native_order(part, f"frames {a}..{a + len(part)}")
            continue
        yield a, part
        if mm is not None and contiguous and hasattr(mm, "madvise"):
            start = part.ctypes.data - np.frombuffer(mm, dtype=np.uint8).ctypes.data
            lo = start - start % mmap.PAGESIZE
            hi = start + part.nbytes
            try:
                mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            except (OSError, ValueError, AttributeError):
                pass


def _iter_chunks(frames: Any, chunk: int) -> Iterator[Tuple[int, np.ndarray]]:
    """Chunks of frames stacked from an iterable of 2-D frames. A frame of another shape or
    dtype than the one before it starts a new chunk, so each frame is detected as it is (its
    own dtype's scale), however the frames are chunked, as trackpy's ``batch`` takes frames one
    at a time."""
    buf, start, n = [], 0, 0
    for fr in frames:
        a = np.asarray(fr)
        if a.ndim != 2:
            raise InvalidInput(f"frame {n}: a frame is 2-D, got shape {a.shape}")
        if buf and (a.shape != buf[0].shape or a.dtype != buf[0].dtype):
            yield start, np.stack(buf)
            start, buf = n, []
        buf.append(a)
        n += 1
        if len(buf) == chunk:
            yield start, np.stack(buf)
            start, buf = n, []
    if buf:
        yield start, np.stack(buf)


def _chunk_frames(chunk_frames: Any) -> int:
    """``chunk_frames`` (``None``: :data:`CHUNK_FRAMES`) as a count of at least 1; a float, a
    string or a bool is an :class:`InvalidInput`, not rounded."""
    if chunk_frames is None:
        return CHUNK_FRAMES
    if isinstance(chunk_frames, (bool, np.bool_)) or not isinstance(
        chunk_frames, (int, np.integer)
    ):
        raise InvalidInput(f"chunk_frames must be a whole number of frames, got {chunk_frames!r}")
    if chunk_frames < 1:
        raise InvalidInput(f"chunk_frames must be at least 1, got {chunk_frames!r}")
    return int(chunk_frames)


def chunks(frames: Any, chunk_frames: Optional[int] = None) -> Iterator[Tuple[int, np.ndarray]]:
    """``(first frame, (n, H, W) array)`` pieces of ``frames``: a path to a ``.npy`` file, an
    array (memory-mapped or not), a ``dask.array`` (each piece computed in turn, never the
    whole movie) or an iterable of 2-D frames."""
    chunk = _chunk_frames(chunk_frames)
    if isinstance(frames, (str, os.PathLike)):
        path = os.fspath(frames)
        if not path.endswith(".npy"):
            raise InvalidInput(
                f"{path}: Python reads .npy movies (the command line also reads TIFF and FITS)"
            )
        return _npy_chunks(path, chunk)
    if isinstance(frames, np.ndarray):
        return _array_chunks(frames, chunk)
    if _dask.is_dask(frames):
        return _dask.movie_chunks(_dask.movie(frames, "a movie"), chunk)
    if hasattr(frames, "__dlpack__") or hasattr(frames, "shape"):
        return iter([(0, frames)])  # a framework array: one piece, read where it lives
    return _iter_chunks(frames, chunk)


def batch_blob_log(
    frames: Any, *, chunk_frames: Optional[int] = None, progress: bool = False, **kwargs
) -> np.ndarray:
    """``blob_log`` on every frame of a movie, as trackpy's ``batch`` is ``locate`` on every
    frame: rows ``(frame, row, col, sigma)``. The movie is a ``(T, H, W)`` array (on any device:
    a framework's GPU array is detected where it lives), a ``.npy`` path, a memory-mapped array,
    a ``dask.array`` or an iterable of 2-D frames, detected one chunk of ``chunk_frames`` frames
    at a time (bounded memory; a dask movie is sliced along axis 0 and each piece computed in
    turn, never the whole movie). A ``(T, Z, Y, X)`` array (NumPy or dask) is a movie of
    volumes: rows ``(frame, z, y, x, sigma...)``, each volume as :func:`arraybridge.blob_log`
    gives it (a dask movie's volumes are computed one at a time, each checked against the host
    memory budget). ``kwargs`` are ``blob_log``'s (``device`` takes lists such as
    ``"opencl:0,opencl:1"`` and ``"all"``, ``batch_size`` frames go to a device at once).
    ``progress=True`` shows the frames done as they are (a ``tqdm`` bar when tqdm is
    installed, else a line on standard error)."""
    from . import _blob_log_frames, _progress, blob_log  # noqa: PLC0415

    bar = _progress.bar(progress, _progress.total_frames(frames) if progress else None, "batch_blob_log")
    try:
        return _batch_blob_log(frames, chunk_frames, bar, _blob_log_frames, blob_log, kwargs)
    finally:
        bar.close()


def _volumes_on_host(frames: Any, what: str) -> Any:
    """A 4-D :class:`arraybridge.Array` (a movie of volumes, detected volume by volume) as a
    zero-copy NumPy view when it is on the host; on a device it cannot be split into volumes
    there: a typed error (it used to fail untyped). Anything else as it is."""
    if not (isinstance(frames, Array) and frames.ndim == 4):
        return frames
    if frames.device != "cpu":
        raise InvalidInput(
            f"a movie of volumes on {frames.device} (shape {frames.shape}) cannot be split into "
            f"volumes there: call ab.{what} on each volume, or pass a host array"
        )
    return np.asarray(frames)


def _batch_blob_log(frames, chunk_frames, bar, _blob_log_frames, blob_log, kwargs) -> np.ndarray:
    """:func:`batch_blob_log`, reporting each chunk's frames to ``bar``."""
    dask = _dask.is_dask(frames)
    if dask:
        _dask.check(frames, "a movie")
    frames = _volumes_on_host(frames, "blob_log")
    if (isinstance(frames, np.ndarray) or dask) and frames.ndim == 4:
        out = []
        for t in range(frames.shape[0]):
            vol = (
                _dask.to_host(frames[t], f"volume {t} of a dask movie of shape {frames.shape}")
                if dask
                else frames[t]
            )
            rows = blob_log(vol, **kwargs)
            out.append(np.column_stack([np.full(len(rows), float(t)), rows]))
            bar.update(1)
        if out:
            return np.concatenate(out)
        return np.empty((0, 1 + frames.ndim - 1 + 1))
    out = []
    for a, part in chunks(frames, chunk_frames):
        rows, _ = _blob_log_frames(part, **kwargs)
        rows[:, 0] += a
        out.append(rows)
        bar.update(int(part.shape[0]) if getattr(part, "ndim", 3) == 3 else 1)
    return np.concatenate(out) if out else np.empty((0, 4))


def batch(
    frames: Any,
    diameter: Any,
    *,
    chunk_frames: Optional[int] = None,
    progress: bool = False,
    **kwargs,
):
    """trackpy's ``batch`` (``locate`` on every frame, with a ``frame`` column) of a movie of
    2-D frames given as a ``(T, H, W)`` array, a ``.npy`` path, a (memory-mapped) array, a
    ``dask.array`` (each chunk computed in turn) or an iterable of frames, one chunk of
    ``chunk_frames`` frames at a time (bounded memory). A ``(T, Z, Y, X)`` array (NumPy or dask)
    is a movie of volumes: :func:`arraybridge.locate` on each volume (columns ``z, y, x, ...``),
    a dask movie's volumes computed one at a time. ``kwargs`` are ``locate``'s; ``diameter``
    and the other sizes may be a tuple per axis (frames with sizes per axis run on the CPU).
    trackpy's warnings are emitted per frame, and ``"No maxima found in any frame."`` for a
    movie without any feature. ``progress=True`` shows the frames done as they are (a ``tqdm``
    bar when tqdm is installed, else a line on standard error)."""
    from . import _progress  # noqa: PLC0415

    bar = _progress.bar(progress, _progress.total_frames(frames) if progress else None, "batch")
    try:
        return _batch(frames, diameter, chunk_frames, bar, kwargs)
    finally:
        bar.close()


def _batch(frames: Any, diameter: Any, chunk_frames: Optional[int], bar: Any, kwargs: dict):
    """:func:`batch`, reporting each chunk's frames (or each volume) to ``bar``."""
    from . import _NO_FEATURES_IN_MOVIE, _locate, _pandas, _table, locate  # noqa: PLC0415
    from ._locate import (  # noqa: PLC0415
        _check_axes,
        _trackpy_deprecated,
        _isotropic,
        _locate_frames_nd,
        _names,
        _per_axis,
        _scalar,
    )

    dask = _dask.is_dask(frames)
    if dask:
        _dask.check(frames, "a movie")
    frames = _volumes_on_host(frames, "locate")
    tables = []
    if (isinstance(frames, np.ndarray) or dask) and frames.ndim == 4:
        for t in range(frames.shape[0]):
            vol = (
                _dask.to_host(frames[t], f"volume {t} of a dask movie of shape {frames.shape}")
                if dask
                else frames[t]
            )
            tab = locate(vol, diameter, **kwargs)
            cols = {k: np.asarray(tab[k]) for k in _names(tab)}
            cols["frame"] = np.full(len(cols[next(iter(cols))]), t, dtype=np.int64)
            tables.append(cols)
            bar.update(1)
    else:
        bound = inspect.signature(locate).bind(None, diameter, **kwargs)
        bound.apply_defaults()
        named = {k: v for k, v in bound.arguments.items() if k not in ("raw_image", "diameter")}
        # trackpy's retired arguments, said once for the movie
        _trackpy_deprecated(named.pop("filter_before"), named.pop("filter_after"), 3)
        sizes = {k: _per_axis(k, named[k]) for k in ("separation", "noise_size", "smoothing_size")}
        size = _per_axis("diameter", diameter)
        _check_axes(2, {"diameter": size, **sizes})
        iso = _isotropic(size, *sizes.values())
        for a, part in chunks(frames, chunk_frames):
            movie = part if part.ndim == 3 else part[None]
            if iso:
                # trackpy's per-frame warnings point at the caller of batch
                scalars = {k: _scalar(v) for k, v in sizes.items()}
                t = _locate(movie, _scalar(size), **{**named, **scalars}, stacklevel=4)
            else:
                t = _locate_frames_nd(movie, size, **{**named, **sizes})
            cols = {k: np.asarray(t[k]) for k in _names(t)}
            cols["frame"] = cols["frame"] + a
            tables.append(cols)
            bar.update(int(movie.shape[0]))
    if not tables:
        raise InvalidInput("the movie has no frames")
    merged = {k: np.concatenate([c[k] for c in tables]) for k in tables[0]}
    if len(merged["frame"]) == 0:
        warnings.warn(_NO_FEATURES_IN_MOVIE, UserWarning, stacklevel=3)
    pd = _pandas()
    if pd is not None:
        return pd.DataFrame(merged)
    return _table(merged)
