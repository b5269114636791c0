"""``progress=True`` of the streaming calls: a ``tqdm`` bar when tqdm is installed, else one
line on standard error rewritten in place (frames done, of how many when known, frames per
second), at most ten times a second."""

from __future__ import annotations

import sys
import time
from typing import Any, Optional


class _Line:
    """The bar without tqdm."""

    def __init__(self, total: Optional[int], desc: str, unit: str = "frame") -> None:
        self.total, self.desc, self.n, self.unit = total, desc, 0, unit
        self.start = self.last = time.monotonic()

    def update(self, n: int) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= 0.1 or (self.total is not None and self.n >= self.total):
            self.last = now
            self._write()

    def _write(self) -> None:
        of = f"/{self.total}" if self.total is not None else ""
        rate = self.n / max(time.monotonic() - self.start, 1e-9)
        u = self.unit
        sys.stderr.write(f"\r{self.desc}: {self.n}{of} {u}s ({rate:.1f} {u}s/s)")
        sys.stderr.flush()

    def close(self) -> None:
        self._write()
        sys.stderr.write("\n")
        sys.stderr.flush()


class _Off:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def bar(enabled: Any, total: Optional[int], desc: str, unit: str = "frame") -> Any:
    """A progress bar of ``total`` units (frames; ``None``: unknown) when ``enabled``; else
    one that does nothing."""
    if not enabled:
        return _Off()
    try:
        from tqdm.auto import tqdm  # noqa: PLC0415
    except ImportError:
        return _Line(total, desc, unit)
    return tqdm(total=total, desc=desc, unit=unit)


def follow(b: Any) -> Any:
    """A ``progress(done, total)`` callback (the native pipelines' counters) that moves the
    bar ``b`` to ``done`` of ``total``."""

    def update(done: int, total: int) -> None:
        if total and getattr(b, "total", None) != total:
            b.total = total
            if hasattr(b, "refresh"):
                b.refresh()
        if done > b.n:
            b.update(done - b.n)

    return update


def total_frames(frames: Any) -> Optional[int]:
    """The number of frames of a movie when it says (arrays, dask arrays, ``.npy`` paths)."""
    import os  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    if isinstance(frames, (str, os.PathLike)):
        # only a hint for the bar: whatever the file is (empty, truncated, a header declaring
        # absurd sizes), the reader itself reports it with a typed error
        try:
            shape = np.load(os.fspath(frames), mmap_mode="r").shape
        except Exception:  # noqa: BLE001
            return None
        return int(shape[0]) if len(shape) >= 3 else 1
    shape = getattr(frames, "shape", None)
    if shape is not None and len(shape) >= 1:
        try:
            return int(shape[0]) if len(shape) >= 3 else 1
        except (TypeError, ValueError):
            return None
    return None
