"""arraybridge: arrays between NumPy, PyTorch, CuPy and JAX through DLPack, and the
detection / tracking / PACO pipelines on the CPU, OpenCL or CUDA.

    import arraybridge as ab
    a = ab.convert(x, device="cpu")          # any __dlpack__ or buffer-protocol object
    blobs = ab.blob_log(image, max_sigma=3)  # scikit-image's blob_log
    tracks = ab.link(features, 5, memory=2)  # trackpy's link

Every compute function takes ``device=`` (``"auto"``, ``"cpu"``, ``"opencl:N"``,
``"cuda:N"``, a list ``"opencl:0,opencl:1"`` or ``"all"`` for every GPU, with the command
line's meaning: the work is shared out and the rows are those of one device); a device that is
not there is a ``BackendUnavailable`` error, never a silent CPU run. ``"auto"`` computes where the input lives when that is a GPU, otherwise on the CPU.
Inputs are read in place where they live (host arrays through DLPack, without a copy).
The GIL is released while computing; Ctrl-C stops a long run between batches of frames
(``KeyboardInterrupt``). See docs/python.md in the repository.

Host memory is budgeted as for the command line: every host allocation whose size comes from
an input's shape (a copy of a broadcast or strided view, a device array read back, a batch of
frames in detection) is checked before it is made, and one that does not fit is an
``OutOfMemory`` error naming what was asked and what fits. ``ARRAYBRIDGE_MEMORY_LIMIT_MB``
(validated at import) or :func:`set_memory_limit` sets an explicit limit.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _dask, _decorators, _frameworks, _native, _progress
from ._decorators import config, cupy, jax, numpy, offload, on, tensorflow, torch
from ._locate import (
    _check_axes,
    _trackpy_deprecated,
    _isotropic,
    _locate_frames_nd,
    _locate_nd,
    _names,
    _ndim,
    _per_axis,
    _scalar,
)
from ._common import _int, _log_auto, _logger, _native_order, _pandas, _table
from ._paco import PacoResult, paco, unbiased_flux
from ._stream import batch, batch_blob_log
from ._seed import (
    ParticleDetector,
    ParticleDetectorGPU,
    benchmark,
    is_gpu_available,
    print_benchmark_results,
)
from ._native import (
    Array,
    ArrayBridgeError,
    BackendUnavailable,
    InvalidInput,
    OutOfMemory,
    SubnetOversizeException,
    backends,
    copyto,
    devices,
    route,
)

__all__ = [
    "Array",
    "ArrayBridgeError",
    "BackendUnavailable",
    "InvalidInput",
    "OutOfMemory",
    "PacoResult",
    "ParticleDetector",
    "ParticleDetectorGPU",
    "backends",
    "batch",
    "batch_blob_log",
    "benchmark",
    "blob_log",
    "build_info",
    "config",
    "convert",
    "convert_memory",
    "copyto",
    "cupy",
    "devices",
    "free_pools",
    "is_gpu_available",
    "jax",
    "last_decision",
    "link",
    "locate",
    "memory_limit",
    "memory_stats",
    "numpy",
    "offload",
    "on",
    "paco",
    "print_benchmark_results",
    "route",
    "SubnetOversizeException",
    "set_gpu_memory_limit",
    "set_memory_limit",
    "tensorflow",
    "torch",
    "unbiased_flux",
]

__version__ = "0.1.0"


def build_info() -> dict:
    """How this package was built: ``{"version": ..., "profile": "release" | "dev"}``.

    ``pip install ./crates/bridge-python`` and ``maturin develop --release`` build the release
    profile; plain ``maturin develop`` builds the dev profile, whose pipelines run 3–6× slower.
    Time arraybridge on a release build (``scripts/bench_blob_suite.py`` refuses a dev one).
    """
    return {"version": __version__, "profile": str(_native.BUILD_PROFILE)}


_UNSET = object()


def set_memory_limit(device_or_mb: Any, limit: Any = _UNSET) -> None:
    """Two limits, by the number of arguments.

    ``set_memory_limit(mb)``: cap the host memory arraybridge may allocate at ``mb`` MiB (a
    whole number, at least 1), or remove the cap with ``None``. The host budget is the
    smallest of this limit, the available memory, the cgroup's ``memory.max`` and
    ``ulimit -v`` (the rule of ``bridge_core::host``, the command line's): without a limit the
    machine's apply. Every host allocation whose size comes from an input's shape is checked
    against the budget before it is made (``convert`` and ``__dlpack__`` copies, device arrays
    read back, the frames detection holds at once, PACO's float64 inputs, the library's own
    checks); one that does not fit raises :class:`OutOfMemory`. The limit is
    ``ARRAYBRIDGE_MEMORY_LIMIT_MB`` in ``os.environ``, so child processes (the ``arraybridge``
    command) inherit it. Anything but a whole number >= 1 or ``None`` (``0``, ``-5``, ``1.5``,
    ``True``) raises :class:`InvalidInput`.

    ``set_memory_limit(device, limit)``: cap what ``device``'s pool (``"opencl:0"``,
    ``"cuda:1"``) may hold at ``limit``: a fraction of its memory in ``(0, 1]`` (a float, the
    seed's ``set_gpu_memory_limit(0.8)``) or a number of bytes (an int >= 1); ``None`` removes
    the cap. An allocation beyond it is :class:`OutOfMemory` inside the pipelines, which split
    their batches and give the same results; see :func:`memory_stats`.
    """
    if limit is _UNSET:
        _native.set_memory_limit(device_or_mb)
    else:
        _native.set_device_memory_limit(str(device_or_mb), limit)


def set_gpu_memory_limit(fraction: float, gpu_id: int = 0) -> None:
    """The seed's ``set_gpu_memory_limit(0.8)``: cap the pool of ``cuda:gpu_id`` at
    ``fraction`` of its memory (see :func:`set_memory_limit`)."""
    set_memory_limit(_decorators._gpu(gpu_id), float(fraction))


def memory_stats(device: str = "cpu") -> dict:
    """``device``'s memory as a dict: ``total``, ``free`` and ``used`` (where the driver says;
    ``None`` for OpenCL), and its pool's ``pool_reserved`` (held from the device),
    ``pool_in_use``, ``pool_cached``, ``pool_peak`` (the most held at once), ``pool_limit``
    (bytes or ``None``), ``allocations`` (made on the device) and ``cache_hits``. For ``"cpu"``:
    the host's total and available memory and the explicit limit as ``pool_limit``.

    >>> import arraybridge as ab
    >>> ab.memory_stats("cpu")["total"] > 0
    True
    """
    return dict(_native.memory_stats(device))


def free_pools(device: str) -> int:
    """Give the cached (unused) blocks of ``device``'s pools back to the device; returns the
    bytes released. Memory of arrays that are still alive stays theirs."""
    return int(_native.free_pools(device))


def memory_limit() -> Optional[int]:
    """The explicit host memory limit in MiB (set by :func:`set_memory_limit` or
    ``ARRAYBRIDGE_MEMORY_LIMIT_MB``), or ``None`` when there is none and the machine's limits
    alone make the budget. An invalid ``ARRAYBRIDGE_MEMORY_LIMIT_MB`` raises
    :class:`InvalidInput` naming it (as at import)."""
    return _native.memory_limit()


# ARRAYBRIDGE_MEMORY_LIMIT_MB is refused at import, as the command line refuses it at start
# (``abc``, ``1e0``, ``-5``, ``0``): InvalidInput naming the variable, never silently ignored.
memory_limit()


def _convert_py(
    x: Any,
    device: Optional[str] = "cpu",
    *,
    to: str = "array",
    copy: Optional[bool] = None,
) -> Any:
    """:func:`convert` for the arguments its native entry (``_native.convert_api``) does not
    take on itself: ``to`` other than ``"array"``, ``device=None``, and arguments of the wrong
    type (whose errors stay these), and a ``dask.array``, computed whole onto the host after
    its bytes are checked against the host budget."""
    if _dask.is_dask(x):
        x = _dask.to_host(x, "convert (a dask array is computed whole)")
    if to == "array" and device is not None:
        return _native.convert(x, device, copy=copy)
    return _frameworks.convert(x, device, to, copy)


# ``convert(x, device="cpu", *, to="array", copy=None)`` is native (its docstring is there):
# ``ab.convert(x)`` of a NumPy array costs no Python frame and no DLPack exchange
# (docs/perf.md, issue 33); the other arguments go on to ``_convert_py``.
convert = _native.convert_api


def convert_memory(
    data: Any,
    source_type: Optional[str] = None,
    target_type: str = "numpy",
    gpu_id: Optional[int] = None,
) -> Any:
    """The seed's ``convert_memory(data, source_type, target_type, gpu_id)``: ``data`` as a
    ``target_type`` object (``"numpy"``, ``"torch"``, ``"cupy"``, ``"jax"``,
    ``"tensorflow"``) on ``cuda:gpu_id``, or on the host when ``gpu_id`` is ``None`` (CuPy:
    GPU 0). ``source_type``, when given, is checked against ``data``'s framework.

    >>> import numpy as np, arraybridge as ab
    >>> ab.convert_memory(np.ones(2), "numpy", "numpy").tolist()
    [1.0, 1.0]
    """
    if source_type is not None:
        src = _frameworks.check_target(source_type)
        got = _frameworks.framework_of(data)
        if src not in ("same", got):
            raise InvalidInput(f"source_type={source_type!r}, but data is a {got} object")
    target = _frameworks.check_target(target_type)
    if target == "same":
        target = _frameworks.framework_of(data)
    device = _decorators._gpu(gpu_id, 0 if target == "cupy" else None)
    return convert(data, device, to=target)


def last_decision() -> Optional[dict]:
    """The last ``device="auto"`` decision of this process, ``{"device": ..., "reason": ...}``
    (``None`` before the first). ``auto`` is the command line's policy
    (``arraybridge::runtime::choose``): an input that lives on a device arraybridge computes
    on is read there; a host input goes where the offload model estimates the work is fastest,
    from its size and arithmetic and the devices' nominal throughputs (the command line
    measures its CPU on the first frames instead). Each decision is also logged on the
    ``arraybridge`` logger at INFO level."""
    d = _native.last_decision()
    return None if d is None else dict(d)


def _border(exclude_border: Union[bool, int, Tuple[int, int]]) -> Tuple[int, int]:
    if exclude_border is False or exclude_border is None:
        return (0, 0)
    if exclude_border is True:
        return (1, 1)  # scikit-image 0.26 reads True as the int 1
    if isinstance(exclude_border, (tuple, list)):
        if len(exclude_border) != 2:
            raise InvalidInput("exclude_border takes (rows, cols) for 2-D images")
        return (_int("exclude_border", exclude_border[0]), _int("exclude_border", exclude_border[1]))
    return (_int("exclude_border", exclude_border), _int("exclude_border", exclude_border))


def blob_log(
    image: Any,
    min_sigma: Union[float, Sequence[float]] = 1,
    max_sigma: Union[float, Sequence[float]] = 50,
    num_sigma: int = 10,
    threshold: Optional[float] = 0.2,
    overlap: float = 0.5,
    log_scale: bool = False,
    *,
    threshold_rel: Optional[float] = None,
    exclude_border: Union[bool, int, Sequence[int]] = False,
    prescale: str = "legacy",
    device: str = "auto",
    batch_size: int = 4,
) -> np.ndarray:
    """scikit-image's ``skimage.feature.blob_log``: its parameters, its semantics and its
    result, on one image of any number of dimensions.

    A 2-D image gives ``(n, 3)`` rows ``(row, col, sigma)``; an n-D image (a 3-D volume) gives
    its ``n`` coordinates then the sigma, or one sigma per axis when ``min_sigma`` or
    ``max_sigma`` is a sequence (anisotropic blobs), exactly as scikit-image. A movie of frames
    is :func:`batch_blob_log`. ``prescale`` is how pixels are scaled first: ``"legacy"`` is
    scikit-image's ``img_as_float`` (integers divided by their type's maximum), ``"none"``,
    ``"minmax"`` or ``"range:C,D"``. Pixels may be uint8, uint16, float32 or float64 (read in
    place), or bool, float16, signed integers, uint32 and uint64, converted as scikit-image
    converts them (``img_as_float``; float16 in float32).

    2-D images with one sigma run on any device (``device``, device lists included). Other
    images (volumes, sigmas per axis) run on the CPU or on one OpenCL or CUDA device with
    float64 (``device="opencl:0"``): the scale space is computed there with the CPU's
    arithmetic, the peaks and the pruning on the host, so the rows are the CPU's; ``"auto"`` is
    the image's device when it lives on one, else the CPU (an image on a device is read to the
    host first). ``batch_size`` is for movies (checked, otherwise unused here).

    A ``dask.array`` image (a 2-D frame, a 3-D volume, any n-D image) is computed whole, since
    its blobs depend on all of it (``threshold_rel`` is relative to the maximum of the whole
    scale space, overlapping blobs are pruned across any split, ``exclude_border`` is the
    image's border): its bytes are checked against the host memory budget first
    (:class:`OutOfMemory`, nothing computed, when it does not fit; see
    :func:`set_memory_limit`), then its blocks are stored into one host array. The rows are
    those of the same image as a NumPy array. A movie larger than memory is
    :func:`batch_blob_log`, which computes a dask movie a chunk of frames at a time.
    """
    if _dask.is_dask(image):
        image = _dask.to_host(image, "blob_log (a dask image is computed whole)")
    if prescale == "minmax":
        _warn_minmax_overflow(image)
    # scikit-image's rows are in the image's float type: float32 for float16 and float32
    # images (their values are float32 numbers here too), float64 otherwise and when empty
    kind = str(getattr(image, "dtype", "")).rsplit(".", 1)[-1]
    out_type = np.float32 if kind in ("float16", "float32") else np.float64

    def as_skimage(rows: np.ndarray) -> np.ndarray:
        return rows.astype(out_type, copy=False) if len(rows) else rows

    shape = tuple(getattr(image, "shape", np.shape(image)))
    scalar = np.ndim(min_sigma) == 0 and np.ndim(max_sigma) == 0
    if len(shape) == 2 and scalar:
        rows, _ = _blob_log_frames(
            image, min_sigma, max_sigma, num_sigma, threshold, overlap, log_scale,
            threshold_rel=threshold_rel, exclude_border=exclude_border, prescale=prescale,
            device=device, batch_size=batch_size,
        )
        return as_skimage(rows[:, 1:])
    bs = _int("batch_size", batch_size)
    if bs < 1 or bs > 100_000:
        raise InvalidInput(f"batch_size must be in 1..=100000, got {bs}")
    if not isinstance(device, str):
        raise InvalidInput(f"device must be a string such as 'cpu' or 'opencl:0', got {device!r}")
    image = _as_blob_log_input(image, prescale)
    if isinstance(exclude_border, (tuple, list)):
        border: Any = [_int("exclude_border", b) for b in exclude_border]
    elif isinstance(exclude_border, (bool, np.bool_)):
        border = bool(exclude_border)
    else:
        border = _int("exclude_border", exclude_border)
    return as_skimage(_native.blob_log_nd(
        image,
        min_sigma=_sigma_arg(min_sigma),
        max_sigma=_sigma_arg(max_sigma),
        num_sigma=_int("num_sigma", num_sigma),
        threshold=None if threshold is None else float(threshold),
        threshold_rel=None if threshold_rel is None else float(threshold_rel),
        overlap=float(overlap),
        log_scale=bool(log_scale),
        exclude_border=border,
        prescale=prescale,
        device=device,
    ))


def _warn_minmax_overflow(image: Any) -> None:
    """scikit-image's (main branch) ``RuntimeWarning`` for ``prescale="minmax"`` on a float
    image whose range overflows its own type (``max - min`` is infinite in float32, say),
    pointing at the caller of :func:`blob_log`. scikit-image then halves the values before
    rescaling; arraybridge rescales in float64, where the range fits, so the image is scaled
    without the halving."""
    if not (isinstance(image, np.ndarray) and image.dtype.kind == "f" and image.size):
        return
    lo, hi = image.min(), image.max()
    with np.errstate(over="ignore", invalid="ignore"):
        span = hi - lo
    if np.isfinite(lo) and np.isfinite(hi) and not np.isfinite(span):
        warnings.warn(
            f"Overflow while attempting to rescale: the range of this {image.dtype} image "
            f"({lo} to {hi}) overflows {image.dtype}; arraybridge rescales it in float64",
            RuntimeWarning,
            stacklevel=3,
        )


def _sigma_arg(v: Any) -> Any:
    """A sigma as a float, or a list of floats (one per axis)."""
    return float(v) if np.ndim(v) == 0 else [float(x) for x in np.asarray(v).ravel()]


def _blob_log_frames(
    image: Any,
    min_sigma: float = 1,
    max_sigma: float = 50,
    num_sigma: int = 10,
    threshold: Optional[float] = 0.2,
    overlap: float = 0.5,
    log_scale: bool = False,
    *,
    threshold_rel: Optional[float] = None,
    exclude_border: Union[bool, int, Tuple[int, int]] = False,
    prescale: str = "legacy",
    device: str = "auto",
    batch_size: int = 4,
) -> Tuple[np.ndarray, bool]:
    """``blob_log`` on a 2-D frame or on each frame of a ``(T, H, W)`` movie, on any device:
    rows ``(frame, row, col, sigma)`` and whether the input was a movie."""
    image = _as_blob_log_input(image, prescale)
    rows, movie = _native.blob_log(
        image,
        min_sigma=float(min_sigma),
        max_sigma=float(max_sigma),
        num_sigma=_int("num_sigma", num_sigma),
        threshold=None if threshold is None else float(threshold),
        threshold_rel=None if threshold_rel is None else float(threshold_rel),
        overlap=float(overlap),
        log_scale=bool(log_scale),
        exclude_border=_border(exclude_border),
        prescale=prescale,
        device=device,
        batch_size=_int("batch_size", batch_size),
    )
    _log_auto(device)
    return rows, movie


def _as_blob_log_input(image: Any, prescale: str) -> Any:
    """scikit-image's conversions of the pixel types the pipelines do not read directly
    (``img_as_float``, then float16 computed in float32): ``bool`` to float64 0/1, ``float16``
    to float32, signed integers to ``x / max`` (the most negative value to -1) and ``uint32``/
    ``uint64`` to ``x / max`` under the legacy prescale (as raw values with
    ``prescale="none"``). Other inputs are passed on as they are (read in place)."""
    image = _native_order(image, "blob_log")
    dt = getattr(image, "dtype", None)
    if not isinstance(dt, np.dtype) or dt in (np.uint8, np.uint16, np.float32, np.float64):
        return image
    if dt.kind not in "biuf":
        return image  # refused with its message by the pipeline
    x = np.asarray(image)
    out_dtype = np.float32 if dt == np.float16 else np.float64
    _native.check_host_allocation(
        int(x.size) * np.dtype(out_dtype).itemsize,
        f"blob_log: a {out_dtype.__name__} copy of a {dt} image of shape {x.shape}",
    )
    if dt.kind == "b" or dt == np.float16:
        return x.astype(out_dtype)
    if str(prescale).strip().lower() != "legacy":
        return x.astype(np.float64)
    imax = np.iinfo(dt).max
    y = np.multiply(x, 1.0 / imax, dtype=np.float64)
    if dt.kind == "i":
        np.maximum(y, -1.0, out=y)
    return y


def locate(
    raw_image: Any,
    diameter: Union[int, Sequence[int]],
    minmass: Optional[float] = None,
    maxsize: Optional[float] = None,
    separation: Optional[Union[float, Sequence[float]]] = None,
    noise_size: Union[float, Sequence[float]] = 1,
    smoothing_size: Optional[Union[int, Sequence[int]]] = None,
    threshold: Optional[float] = None,
    invert: bool = False,
    percentile: float = 64,
    topn: Optional[int] = None,
    preprocess: bool = True,
    max_iterations: int = 10,
    filter_before: Optional[bool] = None,
    filter_after: Optional[bool] = None,
    characterize: bool = True,
    engine: str = "auto",
    *,
    device: str = "auto",
    batch_size: int = 4,
):
    """trackpy's ``locate``: a 2-D array is an image (columns ``y, x, mass, size, ecc, signal,
    raw_mass, ep``; ``y, x, mass`` with ``characterize=False``), a 3-D array is one volume
    (columns ``z, y, x, ...``); a pandas DataFrame when pandas is installed, a structured NumPy
    array otherwise. Movies go through :func:`batch`. ``diameter``, ``separation``,
    ``noise_size`` and ``smoothing_size`` may be a tuple per axis (``(z, y, x)`` or ``(y, x)``);
    anisotropic sizes give trackpy's ``size_z, size_y, size_x`` and ``ep_z, ep_y, ep_x``
    columns, and a volume has ``ecc`` NaN (as trackpy). Volumes and sizes per axis run their
    bandpass (the part that reads every voxel many times) on ``device`` (``"cpu"``, or one
    ``"opencl:N"``/``"cuda:N"`` with float64; ``"auto"``: the image's device, else the CPU, and
    an image on a device without float64 is an :class:`ArrayBridgeError`, as for ``blob_log``) and
    the rest on the host, with the CPU's features bit for bit; a 2-D image with one size per
    axis runs where ``device`` says. ``engine`` is trackpy's choice of its own implementation
    (``"auto"``, ``"python"``, ``"numba"``), which gives the same features: accepted and a no-op
    here (``device`` chooses where to run).

    A dask image or volume is computed whole, after its bytes are checked against the host
    memory budget (:class:`OutOfMemory`); a dask movie is streamed by :func:`batch`.

    trackpy's ``UserWarning`` s are emitted with trackpy's texts and conditions on a 2-D image
    (and by :func:`batch` for each frame, as trackpy's ``batch`` calls ``locate`` on each):
    ``"Image is completely black."``, ``"Image contains no local maxima."``, ``"All local
    maxima were in the margins."``, ``"No maxima survived mass- and size-based filtering.
    ..."``, and ``"I am interpreting the image as N-dimensional. If it is actually a
    (N-1)-dimensional color image, convert it to grayscale first."`` when an axis has 3 or 4
    pixels."""
    if engine not in ("auto", "python", "numba"):
        raise InvalidInput(f"engine must be 'auto', 'python' or 'numba', got {engine!r}")
    _trackpy_deprecated(filter_before, filter_after, 2)
    if _dask.is_dask(raw_image):
        _dask.check(raw_image, "locate")
        raw_image = _dask.to_host(raw_image, "locate (a dask image is computed whole)")
    raw_image = _native_order(raw_image, "locate")
    diameter, separation, noise_size, smoothing_size = (
        _per_axis("diameter", diameter),
        _per_axis("separation", separation),
        _per_axis("noise_size", noise_size),
        _per_axis("smoothing_size", smoothing_size),
    )
    ndim = _ndim(raw_image)
    _warn_color(getattr(raw_image, "shape", ()), 2, whole=True)
    if ndim in (2, 3):
        _check_axes(ndim, {"diameter": diameter, "separation": separation,
                           "noise_size": noise_size, "smoothing_size": smoothing_size})
    if ndim != 2 or not _isotropic(diameter, separation, noise_size, smoothing_size):
        if ndim not in (2, 3):
            raise InvalidInput(
                f"locate takes a 2-D image or a 3-D volume, got {ndim} dimensions (a movie of "
                "frames or of volumes goes through batch)"
            )
        return _locate_nd(
            raw_image, diameter, device, 3, minmass=minmass, maxsize=maxsize,
            separation=separation, noise_size=noise_size, smoothing_size=smoothing_size,
            threshold=threshold, invert=invert, percentile=percentile, topn=topn,
            preprocess=preprocess, characterize=characterize, max_iterations=max_iterations,
        )
    return _locate(
        raw_image, _scalar(diameter), minmass=minmass, maxsize=maxsize,
        separation=_scalar(separation), noise_size=_scalar(noise_size),
        smoothing_size=_scalar(smoothing_size), threshold=threshold, invert=invert,
        percentile=percentile, topn=topn, preprocess=preprocess, characterize=characterize,
        engine=engine, device=device, batch_size=batch_size, stacklevel=3,
        max_iterations=max_iterations,
    )


# trackpy 0.7's warnings (trackpy/find.py, trackpy/feature.py), by algorithms::detect::Empty
_EMPTY_WARNINGS = {
    "black": "Image is completely black.",
    "no_maxima": "Image contains no local maxima.",
    "margins": "All local maxima were in the margins.",
    "filtered": (
        "No maxima survived mass- and size-based filtering. Be advised that the mass "
        "computation was changed from version 0.2.4 to 0.3.0 and from 0.3.3 to 0.4.0. "
        "See the documentation and the convenience functions 'minmass_v03_change' and "
        "'minmass_v04_change'."
    ),
}
_NO_FEATURES_IN_MOVIE = "No maxima found in any frame."


def _warn_color(shape: Any, stacklevel: int, whole: bool = False) -> None:
    """trackpy's warning for an image with an axis of 3 or 4 pixels: the whole ``shape`` (an
    image or volume, ``whole``) or its last two axes (the frames of a movie)."""
    try:
        dims = tuple(int(n) for n in tuple(shape))
    except (TypeError, ValueError):
        return
    image = dims if whole else dims[-2:]
    if len(image) >= 2 and (3 in image or 4 in image):
        n = len(image)
        warnings.warn(
            f"I am interpreting the image as {n}-dimensional. If it is actually a "
            f"{n - 1}-dimensional color image, convert it to grayscale first.",
            UserWarning,
            stacklevel=stacklevel + 1,
        )


def _locate(
    raw_image: Any,
    diameter: int,
    *,
    minmass,
    maxsize,
    separation,
    noise_size,
    smoothing_size,
    threshold,
    invert,
    percentile,
    topn,
    preprocess,
    characterize,
    engine,
    device,
    batch_size,
    stacklevel: int,
    max_iterations: int = 10,
    filter_before: Any = None,
    filter_after: Any = None,
):
    """trackpy's ``locate`` of a 2-D image, or of each frame of a ``(T, H, W)`` movie (then
    with a ``frame`` column, as trackpy's ``batch``), with one size per axis, where ``device``
    says; its warnings pointing ``stacklevel`` frames up from here."""
    if engine not in ("auto", "python", "numba"):
        raise InvalidInput(f"engine must be 'auto', 'python' or 'numba', got {engine!r}")
    if _ndim(raw_image) == 3:
        _warn_color(getattr(raw_image, "shape", ()), stacklevel)
    cols, movie, empty = _native.locate(
        raw_image,
        diameter=_int("diameter", diameter),
        minmass=0.0 if minmass is None else float(minmass),
        maxsize=None if maxsize is None else float(maxsize),
        separation=None if separation is None else float(separation),
        noise_size=float(noise_size),
        smoothing_size=None if smoothing_size is None else _int("smoothing_size", smoothing_size),
        threshold=None if threshold is None else float(threshold),
        invert=bool(invert),
        percentile=float(percentile),
        topn=None if topn is None else _int("topn", topn),
        preprocess=bool(preprocess),
        characterize=bool(characterize),
        device=device,
        batch_size=_int("batch_size", batch_size),
        max_iterations=_int("max_iterations", max_iterations),
    )
    _log_auto(device)
    for _, why in empty:
        if why in _EMPTY_WARNINGS:
            warnings.warn(_EMPTY_WARNINGS[why], UserWarning, stacklevel=stacklevel)
    # trackpy's columns: characterize=False gives y, x, mass; a 2-D image (trackpy's locate)
    # has no frame column, a movie (trackpy's batch) has one
    keep = ["y", "x", "mass"] if not characterize else list(cols)
    if not movie:
        keep = [k for k in keep if k != "frame"]
    elif "frame" not in keep:
        keep.append("frame")
    return _table({k: cols[k] for k in keep})


_LINK_STRATEGIES = ("recursive", "nonrecursive", "numba", "hybrid", "auto", "drop")

# trackpy-compatible subclasses of SubnetOversizeException, by trackpy's exception class
_OVERSIZE_TYPES: dict = {}


def _as_trackpy_oversize(e: SubnetOversizeException) -> BaseException:
    """``e`` as an instance of trackpy's ``SubnetOversizeException`` too, when trackpy is
    imported (so that trackpy's ``except SubnetOversizeException`` catches it); ``e`` as it is
    otherwise. trackpy is never imported here."""
    utils = sys.modules.get("trackpy.linking.utils")
    base = getattr(utils, "SubnetOversizeException", None)
    if not (isinstance(base, type) and issubclass(base, Exception)) or isinstance(e, base):
        return e
    cls = _OVERSIZE_TYPES.get(base)
    if cls is None:
        try:
            cls = type(
                "SubnetOversizeException",
                (SubnetOversizeException, base),
                {"__module__": __name__, "__doc__": SubnetOversizeException.__doc__},
            )
        except TypeError:  # a layout that cannot be combined: arraybridge's alone
            return e
        _OVERSIZE_TYPES[base] = cls
    out = cls(*e.args)
    out.frames = getattr(e, "frames", None)
    return out
_NEIGHBOR_STRATEGIES = ("kdtree", "btree")


def _search_range(search_range: Any) -> "tuple[float, Optional[np.ndarray]]":
    """trackpy's ``search_range``: a number, or one per position column. Equal values are one
    range; different ones are returned as an array (then the range is 1, in the space where the
    positions are divided by them, as trackpy links). Anything else is an InvalidInput."""
    if isinstance(search_range, (str, bytes)):
        raise InvalidInput(f"search_range is a number or one per axis, got {search_range!r}")
    if hasattr(search_range, "__iter__") and np.ndim(search_range) != 0:
        try:
            v = np.asarray(list(search_range), dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidInput(
                f"search_range is a number or one per axis, got {search_range!r}"
            ) from None
        if v.ndim != 1 or v.size == 0:
            raise InvalidInput(f"search_range is a number or one per axis, got {search_range!r}")
        if not np.all(np.isfinite(v) & (v > 0)):
            raise InvalidInput(f"every search_range must be finite and > 0, got {search_range!r}")
        if np.all(v[1:] == v[:-1]):
            return float(v[0]), None
        return 1.0, v
    try:
        return float(search_range), None
    except (TypeError, ValueError):
        raise InvalidInput(f"search_range is a number or one per axis, got {search_range!r}") from None


def link(
    f: Any,
    search_range: Any,
    pos_columns: Optional[Sequence[str]] = None,
    t_column: str = "frame",
    memory: int = 0,
    *,
    max_subnet: Optional[int] = None,
    adaptive_stop: Optional[float] = None,
    adaptive_step: float = 0.95,
    link_strategy: Optional[str] = None,
    neighbor_strategy: Optional[str] = None,
    to_eucl: Any = None,
    predictor: Any = None,
    dist_func: Any = None,
):
    """trackpy's ``link``: the table ``f`` (a pandas DataFrame, a structured NumPy array or a
    dict of columns, with a frame column and the position columns) with a ``particle`` column
    added (an existing one is replaced, as trackpy does), of the same type as ``f``; rows, the
    index and the other columns' dtypes are kept. ``pos_columns`` defaults to trackpy's guess:
    ``z, y, x`` when there is a ``z`` column (3-D linking), else ``y, x``; one, two or three
    position columns are linked (``pos_columns=['y', 'x']`` links in 2-D despite a ``z``
    column). Distances are Euclidean over the position columns in their order, as trackpy's.

    Every subnet is solved optimally, however large (trackpy raises
    ``SubnetOversizeException`` instead); ``max_subnet`` caps the sources of an optimally
    solved subnet, larger ones are then linked greedily. ``adaptive_stop`` / ``adaptive_step``
    are trackpy's adaptive search. ``link_strategy`` (``recursive``, ``nonrecursive``,
    ``numba``, ``hybrid``, ``auto``) and ``neighbor_strategy`` (``KDTree``, ``BTree``) are
    accepted and change nothing: they are trackpy's ways of solving the same subnets and
    finding the same neighbours. ``link_strategy="drop"`` is trackpy's: in every subnet other
    than one particle with one candidate, the particles go unlinked (the tracks end, or wait
    ``memory`` frames; the new points start tracks), and a subnet of more than 30 particles
    (with ``adaptive_stop``: a part still above 15 once the range reached it) raises
    :class:`SubnetOversizeException` as trackpy does (an :class:`InvalidInput`, and an instance
    of trackpy's ``SubnetOversizeException`` when trackpy is imported); ``max_subnet`` does not
    apply to it. ``to_eucl`` maps the positions (an ``(n, d)`` array) to the Euclidean
    coordinates linking uses. ``search_range`` is a number or, as in trackpy, one per position
    column (``(2, 1, 1)`` for ``z, y, x``): the positions are then divided by their ranges and
    linked within 1, and ``adaptive_stop`` is scaled the same way."""
    drop = False
    if link_strategy is not None:
        drop = str(link_strategy).lower() == "drop"
        if str(link_strategy).lower() not in _LINK_STRATEGIES:
            raise InvalidInput(
                f"link_strategy must be one of {', '.join(_LINK_STRATEGIES)}, got {link_strategy!r}"
            )
    if neighbor_strategy is not None and str(neighbor_strategy).lower() not in _NEIGHBOR_STRATEGIES:
        raise InvalidInput(
            f"neighbor_strategy must be 'KDTree' or 'BTree', got {neighbor_strategy!r}"
        )
    if dist_func is not None:
        raise InvalidInput("dist_func is not supported: map positions with to_eucl instead")
    if drop and max_subnet is not None:
        raise InvalidInput(
            "max_subnet caps the subnets that are solved; link_strategy='drop' solves none"
        )
    if predictor is not None:
        raise InvalidInput(
            "a trackpy predictor object is not supported here (the command line's "
            "`arraybridge track --predict velocity` has trackpy's NearestVelocityPredict)"
        )
    search_range, per_axis = _search_range(search_range)
    if per_axis is not None and to_eucl is not None:
        raise InvalidInput(
            "a search_range per axis cannot be combined with to_eucl (as in trackpy): scale "
            "the axes in to_eucl instead"
        )
    adaptive = None
    if adaptive_stop is not None:
        stop, step = float(adaptive_stop), float(adaptive_step)
        if per_axis is not None:
            # trackpy links in the space where every range is 1, its stop scaled likewise
            stop = float(np.max(stop / per_axis))
        if not (np.isfinite(stop) and 0 < stop <= search_range):
            raise InvalidInput(
                f"adaptive_stop must be in (0, search_range], got {adaptive_stop!r}"
            )
        if not (0 < step < 1):
            raise InvalidInput(f"adaptive_step must be in (0, 1), got {adaptive_step!r}")
        adaptive = (stop, step)
    pd = _pandas()
    is_df = pd is not None and isinstance(f, pd.DataFrame)
    is_dict = isinstance(f, dict)
    if is_df and isinstance(f.columns, pd.MultiIndex):
        shown = ", ".join(map(repr, list(f.columns)[:6]))
        more = ", ..." if len(f.columns) > 6 else ""
        raise InvalidInput(
            f"columns must be a flat Index; got a MultiIndex: [{shown}{more}]; flatten them "
            "first, e.g. df.columns = ['_'.join(c) for c in df.columns]"
        )
    if is_df or is_dict:
        names = list(f.keys()) if is_dict else list(f.columns)
    else:
        names = list(getattr(getattr(f, "dtype", None), "names", None) or [])
    if not names:
        raise InvalidInput(
            "link takes a pandas DataFrame, a structured NumPy array or a dict of columns"
        )
    if pos_columns is None:
        pos_columns = ["z", "y", "x"] if "z" in names else ["y", "x"]
    pos_columns = list(pos_columns)
    for c in [t_column, *pos_columns]:
        if c not in names:
            raise InvalidInput(f"no column {c!r} (columns: {', '.join(map(str, names))})")
    if not 1 <= len(pos_columns) <= 3:
        raise InvalidInput(
            f"link takes one to three position columns (1-D, 2-D or 3-D positions), got "
            f"{pos_columns}"
        )
    frames = np.asarray(f[t_column])
    if frames.dtype.kind == "f":
        if not np.all(np.isfinite(frames)) or not np.all(frames == np.round(frames)):
            raise InvalidInput(f"column {t_column!r} must hold integer frame numbers")
    elif frames.dtype.kind not in "iu":
        raise InvalidInput(f"column {t_column!r} must hold integer frame numbers")
    # frame numbers are int64 on the way in: larger ones would wrap around (and reorder)
    if frames.size and (
        (frames.dtype.kind == "u" and frames.max() > np.uint64(2**63 - 1))
        or (frames.dtype.kind == "f" and not (-(2.0**63) <= frames.min() and frames.max() < 2.0**63))
    ):
        raise InvalidInput(
            f"column {t_column!r} holds frame numbers outside the 64-bit integers' range "
            f"(largest {frames.max().item()!r}, smallest {frames.min().item()!r})"
        )
    frames = np.ascontiguousarray(frames, dtype=np.int64)
    try:
        pos = np.stack([np.asarray(f[c], dtype=np.float64) for c in pos_columns], axis=1)
    except (TypeError, ValueError) as e:
        raise InvalidInput(f"position columns must be numeric: {e}") from None
    if per_axis is not None:
        if len(per_axis) != len(pos_columns):
            raise InvalidInput(
                f"search_range has {len(per_axis)} values, one per position column is "
                f"{len(pos_columns)} ({', '.join(map(str, pos_columns))})"
            )
        # trackpy's anisotropic search: positions divided by their ranges, linked within 1
        pos = pos / per_axis
    if to_eucl is not None:
        pos = np.asarray(to_eucl(pos), dtype=np.float64)
        if pos.ndim != 2 or pos.shape[0] != len(frames) or pos.shape[1] != len(pos_columns):
            raise InvalidInput(
                f"to_eucl must return an array of shape {(len(frames), len(pos_columns))}, "
                f"got {pos.shape}"
            )
    try:
        ids = _native.link(
            frames,
            np.ascontiguousarray(pos),
            search_range=search_range,
            memory=_int("memory", memory),
            max_subnet=None if max_subnet is None else _int("max_subnet", max_subnet),
            adaptive=adaptive,
            drop=drop,
        )
    except SubnetOversizeException as e:
        raise _as_trackpy_oversize(e) from None
    if is_df:
        out = f.copy()
        out["particle"] = ids
        if out[t_column].dtype.kind == "f":  # trackpy returns integer frame numbers
            out[t_column] = frames
        return out
    if is_dict:
        return {**f, "particle": ids}
    from numpy.lib import recfunctions  # noqa: PLC0415

    if "particle" in names:
        out = f.copy()
        if np.can_cast(ids.dtype, out.dtype["particle"]):
            out["particle"] = ids
            return out
        f = recfunctions.drop_fields(f, "particle", usemask=False)
    return recfunctions.append_fields(f, "particle", ids, usemask=False)

