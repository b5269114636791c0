"""The "First steps" of docs/python.md, run: every ```python block in order, in one
namespace, from the repository's root; what it prints must be the ```text block under it. A
block whose first line is ``# needs: MODULE`` is skipped (with the rest of the guide going
on) when MODULE is not installed."""

import contextlib
import importlib.util
import io
import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _blocks():
    text = (ROOT / "docs" / "python.md").read_text()
    section = text.split("## First steps", 1)[1].split("\n## ", 1)[0]
    pairs = re.findall(r"```python\n(.*?)```\s*```text\n(.*?)```", section, re.S)
    assert len(pairs) == 5, f"{len(pairs)} examples"
    return pairs


def test_the_first_steps_print_what_the_guide_shows(monkeypatch):
    monkeypatch.chdir(ROOT)
    ns: dict = {}
    ran = 0
    for code, want in _blocks():
        first = code.splitlines()[0]
        if first.startswith("# needs:"):
            mod = first.split(":", 1)[1].strip()
            if importlib.util.find_spec(mod) is None:
                continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/python.md", "exec"), ns)  # noqa: S102
        assert out.getvalue() == want, f"{code}\nprinted:\n{out.getvalue()}\nthe guide shows:\n{want}"
        ran += 1
    assert ran >= 4
    if os.environ.get("ARRAYBRIDGE_GUIDE_ALL"):
        assert ran == 5
