#!/usr/bin/env python3
"""Compare two detection CSVs (the CPU's and a device's): byte-identical or not, and if not,
how many rows are identical, how many have identical positions (the columns named y, x (and
frame) where the header has them), and the largest relative difference of every other numeric
column with the number of rows where it differs. Prints one markdown table row; exits 0 (the comparison is a finding, not a failure)
unless a file is missing or unreadable; then up to five differing pairs of rows, indented.

    compare_csv.py LABEL CPU.csv DEVICE.csv
"""
import csv
import sys


def main():
    label, a_path, b_path = sys.argv[1:4]
    try:
        a_bytes = open(a_path, "rb").read()
        b_bytes = open(b_path, "rb").read()
    except OSError as e:
        print(f"compare_csv: {e}", file=sys.stderr)
        return 2
    a = list(csv.reader(a_bytes.decode().splitlines()))
    b = list(csv.reader(b_bytes.decode().splitlines()))
    if not a or not b or a[0] != b[0]:
        print(f"| {label} | headers differ: {a[:1]} vs {b[:1]} | | | | |")
        return 0
    head, a, b = a[0], a[1:], b[1:]
    same = sum(1 for x, y in zip(a, b) if x == y)
    pos_cols = [i for i, h in enumerate(head) if h in ("frame", "y", "x", "z")]
    pos = sum(1 for x, y in zip(a, b) if [x[i] for i in pos_cols] == [y[i] for i in pos_cols])
    worst, count = {}, {}
    for x, y in zip(a, b):
        for i, h in enumerate(head):
            if i in pos_cols:
                continue
            try:
                u, v = float(x[i]), float(y[i])
            except (ValueError, IndexError):
                continue
            d = abs(u - v) / max(abs(u), abs(v), 1e-300) if u != v else 0.0
            worst[h] = max(worst.get(h, 0.0), d)
            count[h] = count.get(h, 0) + (u != v)
    diffs = ", ".join(f"{h} {d:.1e} ({count[h]} rows)" for h, d in worst.items() if d > 0) or "none"
    verdict = "byte-identical" if a_bytes == b_bytes else "differ"
    print(f"| {label} | {verdict} | {len(a)} / {len(b)} | {same} | {pos} | {diffs} |")
    shown = 0
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and shown < 5:
            print(f"    row {i + 1}: cpu    {','.join(x)}")
            print(f"    row {i + 1}: device {','.join(y)}")
            shown += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
