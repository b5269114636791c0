//! Portable kernels shipped by this crate, written against the contract of
//! [`bridge_core::kernel`] so that the CUDA backend (NVRTC) compiles the very same text.
//! [`ALL`] lists them for cross-backend compile checks.

use bridge_core::kernel::KernelSource;

/// `y[i] = a * x[i] + y[i]` for `i < n` (f32). Arguments: `uint n, float a, x, y`.
pub const SAXPY: KernelSource = KernelSource {
    name: "saxpy",
    source: r#"
KERNEL saxpy(const uint n, const float a, GLOBAL const float* RESTRICT x, GLOBAL float* RESTRICT y)
{
    const uint i = (uint)GID(0);
    if (i >= n) return;
    y[i] = a * x[i] + y[i];
}
"#,
    entry_points: &["saxpy"],
    option_sets: &[&[]],
};

/// Sum of `n` ints into `*total` (which must start at 0): a work-group tree reduction in
/// local memory followed by one atomic add per group. The local size must equal `BLOCK`
/// (a power of two, default 256). Arguments: `uint n, x, total`.
pub const BLOCK_SUM_I32: KernelSource = KernelSource {
    name: "block_sum_i32",
    source: r#"
#ifndef BLOCK
#define BLOCK 256
#endif
DEVICE_FN int add_i32(int a, int b) { return a + b; }

KERNEL block_sum_i32(const uint n, GLOBAL const int* RESTRICT x, GLOBAL int* total)
{
    LOCAL int scratch[BLOCK];
    const uint lid = (uint)LID(0);
    const uint gid = (uint)GID(0);
    scratch[lid] = gid < n ? x[gid] : 0;
    BARRIER();
    for (uint s = BLOCK / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] = add_i32(scratch[lid], scratch[lid + s]);
        BARRIER();
    }
    if (lid == 0) ATOMIC_ADD_INT(total, scratch[0]);
}
"#,
    entry_points: &["block_sum_i32"],
    option_sets: &[&[], &["-DBLOCK=64"]],
};

/// Every portable kernel of this crate.
pub const ALL: &[KernelSource] = &[SAXPY, BLOCK_SUM_I32];
