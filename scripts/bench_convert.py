"""The cost of ``ab.convert`` of a host NumPy array against NumPy's own ``np.from_dlpack``
(issue 33; docs/perf.md). Run with the interpreter that imports the build to measure:

    python scripts/bench_convert.py [--number 200000] [--repeat 7]

Prints ns per call, best of ``repeat`` rounds of ``number`` calls each (``timeit``), for a
1024-element float32 array, and each row's ratio to ``np.from_dlpack(x)`` in the same run.
"""

import argparse
import timeit

import numpy as np

import arraybridge as ab


class _Sub(np.ndarray):
    """An ndarray subclass: it may override ``__dlpack__``, so arraybridge imports it through
    DLPack (the path every NumPy array took before the fast path)."""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--number", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()

    x = np.arange(1024, dtype=np.float32)
    xs = x.view(_Sub)
    env = {"np": np, "ab": ab, "x": x, "xs": xs}
    rows = [
        ("np.from_dlpack(x)", "np.from_dlpack(x)"),
        ("x.__dlpack__(max_version=(1, 0))", "x.__dlpack__(max_version=(1, 0))"),
        ("ab.convert(x)", "ab.convert(x)"),
        ('ab.convert(x, "cpu")', 'ab.convert(x, "cpu")'),
        ('ab._native.convert(x, "cpu")', 'ab._native.convert(x, "cpu")'),
        ("ab.convert(xs)  (ndarray subclass: DLPack)", "ab.convert(xs)"),
        ('ab.convert(x, "cpu", to="numpy")', 'ab.convert(x, "cpu", to="numpy")'),
    ]
    results = []
    for label, stmt in rows:
        t = timeit.Timer(stmt, globals=env)
        best = min(t.repeat(repeat=args.repeat, number=args.number)) / args.number * 1e9
        results.append((label, best))
    ref = results[0][1]
    print("| call | ns per call | / np.from_dlpack |")
    print("|---|---|---|")
    for label, ns in results:
        print(f"| `{label}` | {ns:,.0f} | {ns / ref:.2f} |")


if __name__ == "__main__":
    main()
