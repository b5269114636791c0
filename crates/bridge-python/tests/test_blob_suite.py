"""`scripts/bench_blob_suite.py`'s checks, without its timings: on images of every dtype and
scale range of issue 34's table, `ab.blob_log` gives scikit-image's rows, or exactly
scikit-image's rows with its overlap pruning visiting the pairs in ascending (i, j) order
(docs/python.md, "Where blob_log can differ from scikit-image")."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import arraybridge as ab

skf = pytest.importorskip("skimage.feature")

_SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "bench_blob_suite.py"


def _suite():
    spec = importlib.util.spec_from_file_location("bench_blob_suite", _SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_suite_rows_are_scikit_images():
    suite = _suite()
    sorted_pairs = suite.blob_log_sorted_pairs(skf.blob_log)
    order_only = []
    rows = suite.rows({"bright", "gallery", "small"})
    assert len(rows) == 15
    for _, name, img, kw in rows:
        got = ab.blob_log(img, **kw)
        want = skf.blob_log(img, **kw)
        if suite.same(got, want):
            continue
        assert suite.same(got, sorted_pairs(img, **kw)), name
        order_only.append((name, suite.differing(got, want)))
    # the bright-field frame's chain at (175, 48): one row, in each of its four dtypes
    assert order_only == [(name, 1) for _, name, _, _ in rows[:4]], order_only


def test_the_chain_of_the_bright_field_frame():
    suite = _suite()
    f = suite.brightfield(424, 640, 700)
    kw = dict(min_sigma=1, max_sigma=3, num_sigma=10, threshold=None, threshold_rel=0.2)
    got = {tuple(r) for r in np.asarray(ab.blob_log(f, **kw), float)}
    want = {tuple(r) for r in np.asarray(skf.blob_log(f, **kw), float)}
    assert want - got == {(175.0, 48.0, 1.8888888888888888)}
    assert got - want == set()


def test_a_dev_or_release_build_says_so():
    info = ab.build_info()
    assert info["profile"] in ("dev", "release")
    assert info["version"] == ab.__version__
