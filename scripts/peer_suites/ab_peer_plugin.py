"""pytest plugin of scripts/peer-suites.sh: runs scikit-image's and trackpy's own tests, either
plain (``PEER_SUITES_MODE=plain``) or with arraybridge's functions put in place of theirs
(``PEER_SUITES_MODE=arraybridge``), and writes each test's outcome to ``PEER_SUITES_RESULTS``
(JSON).

Substitution happens when pytest loads this plugin (``-p ab_peer_plugin``), before any test
module is imported, so ``from skimage.feature import blob_log`` and ``from trackpy.linking
import link`` in the test modules bind arraybridge's functions. Each substitute is a thin
wrapper: it binds the call's arguments with the replaced function's own signature (so
positional arguments keep trackpy's / scikit-image's meaning), passes exactly the arguments the
test gave, by name, to arraybridge, and records that it was called. Nothing is mapped or dropped:
an argument arraybridge does not take fails the test, which is then listed.

A test whose substituted run called no arraybridge function ran the peer's own code only (a
trackpy internal such as ``link_iter`` or ``link_partial``); the report lists it as "not
substituted" and does not count it.
"""

import functools
import importlib
import inspect
import json
import os
import re
import sys
import types
import warnings

import pytest

_MODE = os.environ.get("PEER_SUITES_MODE", "plain")
_RESULTS_PATH = os.environ.get("PEER_SUITES_RESULTS")
_SUITE = os.environ.get("PEER_SUITES_SUITE", "")

_called: set = set()
_results: dict = {}


def _substitute(original, replacement, name):
    """``replacement`` called with the arguments ``original`` would have bound, by name.
    Keywords that the installed ``original`` does not know but ``replacement`` takes (a newer
    release's, such as scikit-image main's ``prescale``) are passed on as they are."""
    sig = inspect.signature(original)
    theirs = set(sig.parameters)
    ours = set(inspect.signature(replacement).parameters)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        _called.add(name)
        newer = {k: kwargs.pop(k) for k in list(kwargs) if k not in theirs and k in ours}
        bound = sig.bind(*args, **kwargs)
        named = {}
        for k, v in bound.arguments.items():
            p = sig.parameters[k]
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                named.update(v)
            elif p.kind is inspect.Parameter.VAR_POSITIONAL:
                raise TypeError(f"{name}: extra positional arguments {v!r}")
            else:
                named[k] = v
        # a warning the replacement points at its caller (this wrapper) is given again from
        # here, pointing at the test's line, as the real function's would
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = replacement(**named, **newer)
        for w in caught:
            if w.filename == __file__:
                warnings.warn(w.message, w.category, stacklevel=2)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return result

    wrapper.__arraybridge_substitute__ = name
    return wrapper


def _patch_skimage():
    import arraybridge as ab
    import skimage.feature
    import skimage.feature.blob

    original = skimage.feature.blob.blob_log
    sub = _substitute(original, ab.blob_log, "blob_log")
    skimage.feature.blob.blob_log = sub
    skimage.feature.blob_log = sub  # the lazy loader's attribute, read by `feature.blob_log`


def _patch_trackpy():
    import arraybridge as ab
    import trackpy
    import trackpy.feature
    import trackpy.linking
    import trackpy.linking.linking

    locate = _substitute(trackpy.feature.locate, ab.locate, "locate")
    batch = _substitute(trackpy.feature.batch, ab.batch, "batch")
    link = _substitute(trackpy.linking.linking.link, ab.link, "link")
    for mod in (trackpy, trackpy.feature):
        mod.locate = locate
        mod.batch = batch
    for mod in (trackpy, trackpy.linking, trackpy.linking.linking):
        mod.link = link
        mod.link_df = link  # trackpy's alias of link


def _expose_trackpy_tests():
    """Makes ``trackpy.tests`` (the installed wheel has none) the extracted tests folder, so
    that ``from trackpy.tests.common import ...`` works."""
    tests = os.environ.get("PEER_SUITES_TRACKPY_TESTS_DIR")
    if not tests:
        return
    import trackpy

    pkg = types.ModuleType("trackpy.tests")
    pkg.__path__ = [tests]
    pkg.__file__ = os.path.join(tests, "__init__.py")
    sys.modules["trackpy.tests"] = pkg
    trackpy.tests = pkg


def _alias_skimage2():
    """scikit-image's main branch moved its test helpers to ``_skimage2._shared`` (tests import
    ``assert_stacklevel``, ``numeric_dtype_min_max``, ``is_wasm`` from there); an installed
    release has them under ``skimage._shared``: alias the package so that its tests import."""
    try:
        import _skimage2  # noqa: F401, PLC0415
        return
    except ImportError:
        pass
    import skimage._shared  # noqa: PLC0415

    pkg = types.ModuleType("_skimage2")
    pkg.__path__ = []
    sys.modules["_skimage2"] = pkg
    sys.modules["_skimage2._shared"] = skimage._shared
    pkg._shared = skimage._shared
    for name in ("testing", "dtype", "_dependency_checks"):
        try:
            mod = importlib.import_module(f"skimage._shared.{name}")
        except ImportError:
            continue
        sys.modules[f"_skimage2._shared.{name}"] = mod


def pytest_configure(config):
    if _SUITE not in ("skimage", "trackpy"):
        raise pytest.UsageError(f"PEER_SUITES_SUITE must be skimage or trackpy, got {_SUITE!r}")
    if _SUITE == "trackpy":
        _expose_trackpy_tests()
    else:
        _alias_skimage2()
    if _MODE == "arraybridge" and _SUITE == "skimage":
        _patch_skimage()
    elif _MODE == "arraybridge":
        _patch_trackpy()


def pytest_runtest_logstart(nodeid, location):
    _called.clear()
    _results[nodeid] = {"outcome": "passed", "called": [], "message": ""}


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    if report.skipped and isinstance(report.longrepr, tuple):
        text = report.longrepr[2]
    line = " ".join(text.split())
    return line[:300]


def pytest_runtest_logreport(report):
    rec = _results.setdefault(report.nodeid, {"outcome": "passed", "called": [], "message": ""})
    if report.failed:
        if rec["outcome"] != "failed":
            rec["outcome"] = "failed"
            rec["message"] = _message(report)
    elif report.skipped and rec["outcome"] == "passed":
        rec["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        rec["message"] = _message(report)
    if report.when == "teardown":
        rec["called"] = sorted(_called)


def pytest_sessionfinish(session, exitstatus):
    if _RESULTS_PATH:
        with open(_RESULTS_PATH, "w") as fh:
            json.dump({"mode": _MODE, "suite": _SUITE, "tests": _results}, fh, indent=1)


def pytest_collectreport(report):
    if report.failed:
        # the last line of an import error is its reason
        last = str(report.longrepr).strip().splitlines()[-1]
        _results[report.nodeid or "<collection>"] = {
            "outcome": "failed",
            "called": [],
            "message": "collection error: " + " ".join(re.sub(r"^E\s+", "", last).split())[:300],
        }
