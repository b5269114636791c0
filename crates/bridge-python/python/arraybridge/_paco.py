"""PACO from Python: :func:`paco` and :func:`unbiased_flux` (exported by the package)."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _native, _progress
from ._common import _dask_inputs, _int, _log_auto, _table
from ._native import BackendUnavailable, InvalidInput


@dataclasses.dataclass
class PacoResult:
    """What :func:`paco` returns: the maps (``snr``, ``flux`` = b/a, ``a``, ``b``, ``std`` =
    1/sqrt(a)), the factor the PSF was divided by, the FWHM used, the device, and the
    candidates (local maxima of the S/N map, best first: ``y, x, snr, flux``)."""

    snr: np.ndarray
    flux: np.ndarray
    a: np.ndarray
    b: np.ndarray
    std: np.ndarray
    psf_norm_factor: float
    fwhm: Optional[float]
    device: str
    candidates: Any


def _paco_settings(radius, mode, fwhm, psf_norm_factor, subpixel, edge, nearest, center):
    """The PACO settings ``paco`` and ``unbiased_flux`` share, as the native keywords."""
    return dict(
        radius=_int("radius", radius),
        mode=mode,
        fwhm=None if fwhm is None else float(fwhm),
        psf_norm_factor=None if psf_norm_factor is None else float(psf_norm_factor),
        subpixel=subpixel,
        edge=edge,
        nearest=bool(nearest),
        center=None if center is None else _center(center),
    )


def _center(center: Any) -> Tuple[float, float]:
    """``center`` as ``(y, x)``: exactly two finite numbers."""
    try:
        c = tuple(float(v) for v in center)
    except (TypeError, ValueError):
        raise InvalidInput(f"center must be two numbers (y, x), got {center!r}") from None
    if len(c) != 2 or not all(np.isfinite(c)):
        raise InvalidInput(f"center must be two finite numbers (y, x), got {center!r}")
    return c


def paco(
    cube: Any,
    angles: Any,
    psf: Any,
    *,
    radius: int = 4,
    mode: str = "paper",
    fwhm: Optional[float] = None,
    psf_norm_factor: Optional[float] = None,
    subpixel: str = "off",
    edge: str = "box",
    nearest: bool = False,
    center: Optional[Tuple[float, float]] = None,
    stats_strategy: str = "fast",
    top: int = 10,
    device: str = "auto",
    progress: bool = False,
) -> PacoResult:
    """PACO on an ADI cube ``(T, H, W)`` with its angles ``(T,)`` (degrees) and an odd,
    centred PSF: the same maps as ``arraybridge paco`` writes (same options: ``mode`` paper or
    vip, ``subpixel`` off / table / table:Q / fft / spline5, ``edge`` box or disk, ...).
    Inputs are used as float64 (a ``dask.array`` input is computed whole, checked against the
    host memory budget first). ``device="auto"`` chooses as for the other pipelines
    (:func:`last_decision`).

    Ctrl-C stops the run within one band of rows (a row on the CPU) or one device batch and
    raises ``KeyboardInterrupt``; ``progress=True`` shows the statistics rows done (the pairs,
    with sub-pixel templates on the CPU): a ``tqdm`` bar when tqdm is installed, else a line
    on standard error."""
    cube, angles, psf = _dask_inputs("paco", cube=cube, angles=angles, psf=psf)
    bar = _progress.bar(progress, None, "paco", unit="row")
    try:
        r = _native.paco(
            cube,
            angles,
            psf,
            **_paco_settings(
                radius, mode, fwhm, psf_norm_factor, subpixel, edge, nearest, center
            ),
            stats_strategy=stats_strategy,
            top=_int("top", top),
            device=device,
            progress=_progress.follow(bar) if progress else None,
        )
    finally:
        bar.close()
    _log_auto(device)
    cands = _table(
        {
            "y": r["candidates_y"],
            "x": r["candidates_x"],
            "snr": r["candidates_snr"],
            "flux": r["candidates_flux"],
        }
    )
    return PacoResult(
        snr=r["snr"],
        flux=r["flux"],
        a=r["a"],
        b=r["b"],
        std=r["std"],
        psf_norm_factor=r["psf_norm_factor"],
        fwhm=r["fwhm"],
        device=r["device"],
        candidates=cands,
    )


def unbiased_flux(
    cube: Any,
    angles: Any,
    psf: Any,
    positions: Sequence[Tuple[float, float]],
    *,
    radius: int = 4,
    mode: str = "paper",
    fwhm: Optional[float] = None,
    psf_norm_factor: Optional[float] = None,
    subpixel: str = "off",
    edge: str = "box",
    nearest: bool = False,
    center: Optional[Tuple[float, float]] = None,
    eps: float = 1e-3,
    max_iter: int = 50,
    alpha0: float = 0.0,
    device: str = "auto",
    progress: bool = False,
):
    """PACO's unbiased flux (paper Algorithm 3) at each ``(y, x)`` position (sub-pixel
    allowed): columns ``y, x, flux, std, snr, iterations, converged`` (a DataFrame with
    pandas, else a structured array). Runs on the CPU (``device`` may be ``"auto"`` or
    ``"cpu"``); a ``dask.array`` input is computed whole, checked against the host memory
    budget first. Ctrl-C stops it between two iterations (``KeyboardInterrupt``);
    ``progress=True`` shows the positions done."""
    if device not in ("auto", "cpu"):
        raise BackendUnavailable(f"unbiased_flux runs on the CPU only (asked for {device})")
    cube, angles, psf = _dask_inputs("unbiased_flux", cube=cube, angles=angles, psf=psf)
    pos = [(float(y), float(x)) for y, x in positions]
    bad = [p for p in pos if not (np.isfinite(p[0]) and np.isfinite(p[1]))]
    if bad:
        raise InvalidInput(
            f"positions must be finite (y, x) pairs; {len(bad)} are not, the first {bad[0]!r}"
        )
    bar = _progress.bar(progress, len(pos), "unbiased_flux", unit="position")
    try:
        rows = _native.unbiased_flux(
            cube,
            angles,
            psf,
            pos,
            **_paco_settings(
                radius, mode, fwhm, psf_norm_factor, subpixel, edge, nearest, center
            ),
            eps=float(eps),
            max_iter=_int("max_iter", max_iter),
            alpha0=float(alpha0),
            progress=_progress.follow(bar) if progress else None,
        )
    finally:
        bar.close()
    return _table(
        {
            "y": rows[:, 0],
            "x": rows[:, 1],
            "flux": rows[:, 2],
            "std": rows[:, 3],
            "snr": rows[:, 4],
            "iterations": rows[:, 5].astype(np.int64),
            "converged": rows[:, 6] != 0,
        }
    )
