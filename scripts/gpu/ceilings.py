#!/usr/bin/env python3
"""The two ceilings of the GPU machine, measured through PyTorch in the same call as the
arraybridge figures (docs/gpu.md): device-memory bandwidth (a large device-to-device copy,
bytes read + written) and arithmetic throughput (large matrix products), plus the pinned and
pageable host<->device copy rates that bound transfers, and the host's own copy rates
(into pinned memory; into a new array, page faults included). Prints a markdown table.

Each figure is the median of CUDA-event timings (wall clock for the host copies) after a
warm-up, on random data.
"""
import statistics
import sys
import time

import torch


def timed(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def timed_host(fn, reps=5, warm=1):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda:0")
    p = torch.cuda.get_device_properties(dev)
    print(f"device: {p.name}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.1f} GiB")
    rows = []
    n = 1 << 30  # 1 GiB
    x = torch.randint(0, 255, (n,), dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x))
    rows.append(("d2d copy 1 GiB (read+write)", f"{2 * n / t / 1e9:.0f} GB/s", f"{t * 1e3:.3f} ms"))
    for size in (1 << 20, 16 << 20, 256 << 20, 1 << 30):
        hp = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        hp.random_(0, 255)
        hq = torch.empty(size, dtype=torch.uint8)
        hq.random_(0, 255)
        d = torch.empty(size, dtype=torch.uint8, device=dev)
        t = timed(lambda: d.copy_(hp, non_blocking=True), reps=10)
        rows.append((f"h2d pinned {size >> 20} MiB", f"{size / t / 1e9:.1f} GB/s", f"{t * 1e3:.3f} ms"))
        t = timed(lambda: hp.copy_(d, non_blocking=True), reps=10)
        rows.append((f"d2h pinned {size >> 20} MiB", f"{size / t / 1e9:.1f} GB/s", f"{t * 1e3:.3f} ms"))
        t = timed(lambda: d.copy_(hq), reps=10)
        rows.append((f"h2d pageable {size >> 20} MiB", f"{size / t / 1e9:.1f} GB/s", f"{t * 1e3:.3f} ms"))
    # The host's own copy rate bounds a staged transfer of pageable memory (every byte is
    # copied into a pinned chunk first), and first-touch page faults bound a download into a
    # new array: wall-clock medians, PyTorch's CPU copy with all its threads.
    hq = torch.empty(n, dtype=torch.uint8)
    hq.random_(0, 255)
    hp = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    t = timed_host(lambda: hp.copy_(hq))
    rows.append((f"host memcpy 1 GiB pageable->pinned ({torch.get_num_threads()} threads)",
                 f"{n / t / 1e9:.1f} GB/s", f"{t * 1e3:.3f} ms"))
    t = timed_host(lambda: torch.empty(n, dtype=torch.uint8).copy_(hp))
    rows.append(("host memcpy 1 GiB pinned->new array (first touch)",
                 f"{n / t / 1e9:.1f} GB/s", f"{t * 1e3:.3f} ms"))
    del x, y, hq, hp
    torch.backends.cuda.matmul.allow_tf32 = False
    for dtype, m in ((torch.bfloat16, 8192), (torch.float32, 8192), (torch.float64, 4096)):
        a = torch.randn(m, m, dtype=dtype, device=dev)
        b = torch.randn(m, m, dtype=dtype, device=dev)
        t = timed(lambda: a @ b, reps=10)
        rows.append((f"matmul {dtype} {m}^3", f"{2 * m**3 / t / 1e12:.1f} TFLOP/s", f"{t * 1e3:.3f} ms"))
    # elementwise f32 / f64 FMA rate (vector units, not tensor cores): a long dependent chain
    for dtype in (torch.float32, torch.float64):
        v = torch.rand(1 << 24, dtype=dtype, device=dev)
        k = 64
        def chain():
            z = v
            for _ in range(k):
                z = torch.addcmul(z, z, v)  # 2 flops/element but memory bound; see note
            return z
        t = timed(chain, reps=5)
        rows.append((f"addcmul chain {dtype} (memory bound)", f"{2 * k * v.numel() / t / 1e12:.2f} TFLOP/s", f"{t * 1e3:.3f} ms"))
    print("| ceiling | rate | median |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
