"""Compare ``ab.link`` with ``trackpy.link`` on random tables: the same tracks, and how many
cases number them id for id as trackpy does (docs/python.md, "ab.link links in 3-D as tp.link
does"). trackpy numbers the tracks that one subnet starts in the order of a Python set, which
varies from run to run, so the count of renumbered cases does too.

    python scripts/diff_link_trackpy.py [seed] [cases]
"""

import sys
import warnings

import numpy as np
import pandas as pd
import trackpy as tp

import arraybridge as ab


def main(seed=0, cases=100):
    warnings.simplefilter("ignore")
    tp.quiet()
    rng = np.random.default_rng(seed)
    same = renumbered = other = 0
    for _ in range(cases):
        frames, n = rng.integers(2, 8), rng.integers(1, 40)
        rows = []
        for t in range(frames):
            for p in rng.uniform(0, 80, (rng.integers(max(0, n - 5), n + 5), 2)):
                rows.append((t, p[0], p[1]))
        f = pd.DataFrame(rows, columns=["frame", "y", "x"])
        sr, memory = float(rng.uniform(1, 5)), int(rng.integers(0, 3))
        want = tp.link(f, sr, memory=memory).sort_index()["particle"].to_numpy()
        got = ab.link(f, sr, memory=memory).sort_index()["particle"].to_numpy()
        if np.array_equal(want, got):
            same += 1
            continue
        pairs = dict(zip(want, got))
        bijective = len(set(pairs.values())) == len(pairs)
        if bijective and all(pairs[w] == g for w, g in zip(want, got)):
            renumbered += 1
        else:
            other += 1
    print(f"equal {same}, renumbered {renumbered}, other tracks {other} (of {cases})")
    return other


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    sys.exit(1 if main(*args) else 0)
