#!/usr/bin/env python3
"""Registers, spills and barriers of the shipped CUDA kernels, with no GPU: NVRTC compiles a
kernel source (the CUDA preamble of crates/bridge-cuda/src/kernel.rs + the .cl file) for a real
architecture with `-Xptxas=-v` and prints ptxas's line per entry point.

    source scripts/env.sh   # ARRAYBRIDGE_NVRTC_LIB (scripts/nvrtc.sh installs the wheel)
    python3 scripts/ptxas_info.py crates/algorithms/src/detect/kernels/blob_log.cl \
        --arch sm_90 --kernel log_pass_block -- -DREAL=float -DACC=float -DACC_DOUBLE=0 \
        -DPASS_FMA=1 -DLOG_ROWS=8 -DBLOCK_ROWS=16 -DBLOCK_COLS=3 -DREGION_ROWS=16 \
        -DREGION_COLS=192

Everything after `--` is passed to NVRTC as build options (the pipeline's, see the kernel's
Rust caller). `--fmad=false` is added as the executor adds it by default
(ARRAYBRIDGE_NVRTC_OPTIONS).
"""
import argparse
import ctypes
import glob
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="the kernel source (.cl)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--kernel", action="append", help="only these entry points")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    a.options = argv[cut + 1:]
    libdir = os.environ.get("ARRAYBRIDGE_NVRTC_LIB", "")
    libs = sorted(glob.glob(os.path.join(libdir, "libnvrtc.so*")))
    if not libs:
        print("no libnvrtc: run scripts/nvrtc.sh and source scripts/env.sh", file=sys.stderr)
        return 2
    rs = (ROOT / "crates/bridge-cuda/src/kernel.rs").read_text()
    pre = re.search(r'pub const PREAMBLE: &str = r#"(.*?)"#;', rs, re.S).group(1)
    src = pre + '\n#line 1 "kernel"\n' + pathlib.Path(a.source).read_text()
    nv = ctypes.CDLL(libs[0])
    prog = ctypes.c_void_p()
    rc = nv.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel", 0, None, None)
    if rc != 0:
        print(f"nvrtcCreateProgram failed: {rc}", file=sys.stderr)
        return 1
    opts = [o.encode() for o in a.options]
    opts += [f"-arch={a.arch}".encode(), b"-Xptxas=-v", b"--fmad=false"]
    rc = nv.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nv.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    if rc != 0:
        print(text, file=sys.stderr)
        return 1
    name = None
    for line in text.splitlines():
        m = re.search(r"Function properties for (\w+)", line)
        if m:
            name = m.group(1)
            continue
        if name and (not a.kernel or name in a.kernel) and ("spill" in line or "Used" in line):
            info = re.sub(r"^ptxas(\s+info\s*:)?[\s.]*", "", line.strip())
            print(f"{name}: {info}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
