"""PACO from Python: Ctrl-C stops a run within a band of rows (``KeyboardInterrupt``, well
before the run would end), ``progress=True`` shows the rows done, and neither changes the
maps."""

import time

import numpy as np
import pytest

import arraybridge as ab


def _adi(t: int, n: int, seed: int = 3):
    """A synthetic ADI cube (noise, a rotating companion), its angles and a Gaussian PSF."""
    rng = np.random.default_rng(seed)
    angles = np.linspace(0.0, 60.0, t)
    yy, xx = np.mgrid[0:n, 0:n] - (n - 1) / 2.0
    cube = rng.normal(0.0, 1.0, (t, n, n))
    for k, a in enumerate(np.deg2rad(angles)):
        cy, cx = 12.0 * np.sin(a), 12.0 * np.cos(a)
        cube[k] += 4.0 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * 1.5**2))
    p = np.mgrid[0:11, 0:11] - 5.0
    psf = np.exp(-(p[0] ** 2 + p[1] ** 2) / (2 * 1.5**2))
    return cube, angles, psf


KW = dict(psf_norm_factor=9.54, device="cpu")


def test_progress_shows_the_rows_and_changes_nothing(capsys):
    cube, angles, psf = _adi(12, 40)
    plain = ab.paco(cube, angles, psf, **KW)
    shown = ab.paco(cube, angles, psf, progress=True, **KW)
    assert np.array_equal(plain.snr, shown.snr, equal_nan=True)
    err = capsys.readouterr().err
    assert "paco" in err and "row" in err, err


def test_ctrl_c_stops_a_run_within_a_band(interrupted_after):
    cube, angles, psf = _adi(48, 128)
    t0 = time.perf_counter()
    ab.paco(cube, angles, psf, **KW)
    whole = time.perf_counter() - t0
    stopped = interrupted_after(min(0.1, whole / 10), lambda: ab.paco(cube, angles, psf, **KW))
    assert stopped < 0.6 * whole + 0.1, (stopped, whole)
    # the package is usable at once, with the same maps as before
    again = ab.paco(cube[:12, :40, :40], angles[:12], psf, **KW)
    assert np.isfinite(again.snr).any()


def test_unbiased_flux_shows_its_positions(capsys):
    cube, angles, psf = _adi(12, 40)
    pos = [(20.0, 31.0), (8.0, 19.5)]
    plain = ab.unbiased_flux(cube, angles, psf, pos, psf_norm_factor=9.54)
    shown = ab.unbiased_flux(cube, angles, psf, pos, psf_norm_factor=9.54, progress=True)
    assert np.array_equal(np.asarray(plain["flux"]), np.asarray(shown["flux"]), equal_nan=True)
    err = capsys.readouterr().err
    assert "unbiased_flux" in err and "position" in err, err


def test_ctrl_c_stops_link_before_its_next_frame(interrupted_after):
    rng = np.random.default_rng(5)
    t, n = 1500, 400
    frames = np.repeat(np.arange(t), n)
    start = rng.uniform(0, 1000, (n, 2))
    pos = (start[None] + np.cumsum(rng.normal(0, 0.5, (t, n, 2)), axis=0)).reshape(-1, 2)
    table = {"frame": frames, "y": pos[:, 0], "x": pos[:, 1]}
    t0 = time.perf_counter()
    ab.link(table, 3.0, memory=1)
    whole = time.perf_counter() - t0
    stopped = interrupted_after(min(0.05, whole / 10), lambda: ab.link(table, 3.0, memory=1))
    assert stopped < 0.6 * whole + 0.1, (stopped, whole)
