//! Portable kernel sources: one source text for OpenCL and CUDA.
//!
//! Kernels are plain C source strings compiled at run time (OpenCL's compiler, NVRTC for CUDA).
//! Each backend prepends a small preamble that defines the portable vocabulary below, so the
//! kernels PoCL runs in CI are the very kernels NVRTC compiles for the GPU.
//!
//! | macro | OpenCL | CUDA |
//! |---|---|---|
//! | `KERNEL` | `__kernel void` | `extern "C" __global__ void` |
//! | `GLOBAL` | `__global` | (nothing) |
//! | `LOCAL` (a shared array declared inside a kernel) | `__local` | `__shared__` |
//! | `LOCAL_PTR` (a pointer into local memory) | `__local` | (nothing) |
//! | `LOCAL_ARG(T, name)` (last kernel parameter: local memory sized at launch) | `__local T* name` | `const unsigned int name_bytes_` (the size; the memory is the launch's dynamic shared memory) |
//! | `DYN_LOCAL(T, name)` (first statement of a kernel with `LOCAL_ARG`: makes `name` usable) | (nothing) | `T* name` over `extern __shared__` memory |
//! | `DEVICE_FN` (helper functions) | `inline` | `__device__ inline` |
//! | `RESTRICT` | `restrict` | `__restrict__` |
//! | `GID(d)`, `LID(d)`, `GROUP_ID(d)`, `LOCAL_SIZE(d)`, `NUM_GROUPS(d)` | `get_global_id(d)` ... | from `blockIdx`, `threadIdx`, `blockDim`, `gridDim` |
//! | `BARRIER()` | `barrier(CLK_LOCAL_MEM_FENCE)` | `__syncthreads()` |
//! | `ATOMIC_ADD_INT(p, v)` | `atomic_add(p, v)` | `atomicAdd(p, v)` |
//! | types `uint`, `ulong`, `ushort`, `uchar` | built in | typedefs |
//! | `HAS_FP64` | defined when the device supports doubles (and the extension is enabled) | always defined |
//!
//! Local memory sized at launch time: a kernel declares `LOCAL_ARG(T, name)` as a parameter and
//! opens with `DYN_LOCAL(T, name);`; the host passes `exec::KernelArg::Local(bytes)` for it
//! (OpenCL: a `__local` argument of that size; CUDA: the launch's dynamic shared memory, with
//! the opt-in above 48 KiB). A kernel has at most one such parameter.
//!
//! Launches are expressed in *global* work size (OpenCL style: total threads per dimension) and
//! local size; the CUDA backend converts to a grid of blocks, and kernels guard with
//! `if (GID(0) >= n) return;` so the global size may be rounded up.
//!
//! Any further macros (`-D` options such as `REAL=float`) are passed as build options, which are
//! part of each backend's program-cache key.

/// The macros every backend preamble must define (the table above), as they appear after
/// `#define`.
pub const PORTABLE_MACROS: &[&str] = &[
    "KERNEL",
    "GLOBAL",
    "LOCAL",
    "LOCAL_PTR",
    "LOCAL_ARG(T, name)",
    "DYN_LOCAL(T, name)",
    "DEVICE_FN",
    "RESTRICT",
    "GID(d)",
    "LID(d)",
    "GROUP_ID(d)",
    "LOCAL_SIZE(d)",
    "NUM_GROUPS(d)",
    "BARRIER()",
    "ATOMIC_ADD_INT(p, v)",
    "HAS_FP64",
];

/// The [`PORTABLE_MACROS`] a backend `preamble` does not `#define` (empty when it fulfils the
/// contract).
pub fn missing_portable_macros(preamble: &str) -> Vec<&'static str> {
    PORTABLE_MACROS
        .iter()
        .copied()
        .filter(|m| !preamble.contains(&format!("#define {m}")))
        .collect()
}

/// A kernel source shipped by a crate of the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSource {
    /// Program name (used in logs and errors).
    pub name: &'static str,
    /// The portable source, without a preamble.
    pub source: &'static str,
    /// Kernel entry points the program defines.
    pub entry_points: &'static [&'static str],
    /// Build option sets (`-D` defines) the program is compiled with; each is checked in CI.
    pub option_sets: &'static [&'static [&'static str]],
}

/// The per-launch cache key of a shipped source built with `options`: the text's address and
/// length (a `'static` text, so equal keys are the same bytes; no hashing of the text) and a
/// hash of the options. A cache keeps the options with its entry and checks them on a hit with
/// [`same_options`], so a hash collision cannot return another build.
pub fn launch_key(src: &'static KernelSource, options: &[&str]) -> (usize, usize, u64) {
    (
        src.source.as_ptr() as usize,
        src.source.len(),
        source_hash("", options),
    )
}

/// Whether the options kept with a cache entry are `options` (no allocation).
pub fn same_options(kept: &[String], options: &[&str]) -> bool {
    kept.iter().map(String::as_str).eq(options.iter().copied())
}

/// A stable 64-bit FNV-1a hash of a source text plus options: the program-cache key.
pub fn source_hash(source: &str, options: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(source.as_bytes());
    for o in options {
        eat(&[0]);
        eat(o.as_bytes());
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_macros_are_named() {
        let full: String = super::PORTABLE_MACROS
            .iter()
            .map(|m| format!("#define {m} x\n"))
            .collect();
        assert!(super::missing_portable_macros(&full).is_empty());
        let partial = full.replace("#define BARRIER() x\n", "");
        assert_eq!(super::missing_portable_macros(&partial), vec!["BARRIER()"]);
    }

    #[test]
    fn hash_depends_on_options() {
        let a = super::source_hash("k", &["-DREAL=float"]);
        let b = super::source_hash("k", &["-DREAL=double"]);
        assert_ne!(a, b);
        assert_eq!(a, super::source_hash("k", &["-DREAL=float"]));
    }
}
