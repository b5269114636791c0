#![allow(clippy::unwrap_used, clippy::expect_used)]
//! NVRTC compiles every CUDA kernel source this crate ships (no GPU needed). Skips when libnvrtc
//! is missing unless `ARRAYBRIDGE_REQUIRE_NVRTC=1`.

use bridge_core::BridgeError;
use bridge_core::kernel::KernelSource;
use bridge_cuda::kernel::{KERNELS, PREAMBLE, compile_check};
use test_support::require::{NVRTC as REQUIRE_NVRTC, or_skip};

fn nvrtc_or_skip() -> bool {
    or_skip(REQUIRE_NVRTC, "libnvrtc", bridge_cuda::nvrtc::available()).is_some()
}

#[test]
fn every_shipped_kernel_compiles_for_sm90() {
    let compiled = KERNELS
        .iter()
        .map(|k| compile_check(k).unwrap_or_else(|e| panic!("{e}")))
        .collect::<Vec<_>>();
    if nvrtc_or_skip() {
        assert!(compiled.iter().all(|c| *c));
    }
}

#[test]
fn compile_errors_carry_the_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let bad = KernelSource {
        name: "broken",
        source: "KERNEL k(GLOBAL float* x) { x[0] = undefined_name; }",
        entry_points: &["k"],
        option_sets: &[&[]],
    };
    match compile_check(&bad) {
        Err(BridgeError::KernelCompile { kernel, log, .. }) => {
            assert_eq!(kernel, "broken");
            assert!(log.contains("undefined_name"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    let missing = KernelSource {
        name: "missing_entry",
        source: "KERNEL k(GLOBAL float* x) { x[0] = 1.0f; }",
        entry_points: &["not_there"],
        option_sets: &[],
    };
    assert!(matches!(
        compile_check(&missing),
        Err(BridgeError::KernelCompile { .. })
    ));
}

#[test]
fn preamble_defines_the_whole_portable_table() {
    let missing = bridge_core::kernel::missing_portable_macros(PREAMBLE);
    assert!(missing.is_empty(), "missing: {missing:?}");
    for t in ["uint;", "ulong;", "ushort;", "uchar;"] {
        assert!(PREAMBLE.contains(t), "{t} missing");
    }
    if !nvrtc_or_skip() {
        return;
    }
    // A kernel using every macro in 3-D, with ulong/ushort/uchar and doubles under HAS_FP64.
    let all = KernelSource {
        name: "all_macros",
        source: r#"
DEVICE_FN ulong widen(uint v) { return (ulong)v; }
KERNEL every(GLOBAL int* RESTRICT out, GLOBAL const uchar* a, GLOBAL const ushort* b, const uint n) {
    LOCAL int tile[64];
    size_t g = GID(0) + GID(1) + GID(2);
    tile[LID(0) % 64] = (int)(GROUP_ID(0) + LOCAL_SIZE(1) + NUM_GROUPS(2));
    BARRIER();
    if (g >= n) return;
#ifdef HAS_FP64
    double d = (double)a[g] + (double)b[g] + (double)widen(n);
    out[g] = (int)d + tile[0];
#endif
    ATOMIC_ADD_INT(out, 1);
}
"#,
        entry_points: &["every"],
        option_sets: &[&[], &["-DEXTRA=1"]],
    };
    assert!(compile_check(&all).unwrap());
}
