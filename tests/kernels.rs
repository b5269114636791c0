//! Every kernel source the workspace ships compiles for CUDA (NVRTC, no GPU needed) and builds
//! on OpenCL — the same source text, with each backend's preamble.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "cuda")]
#[test]
fn every_kernel_compiles_with_nvrtc() {
    let all = arraybridge::kernels::all();
    assert!(!all.is_empty());
    let mut compiled = 0;
    for (krate, k) in &all {
        match bridge_cuda::kernel::compile_check(k) {
            Ok(true) => compiled += 1,
            Ok(false) => {
                eprintln!(
                    "skipping NVRTC checks: libnvrtc not found (set ARRAYBRIDGE_REQUIRE_NVRTC=1 to fail instead)"
                );
                return;
            }
            Err(e) => panic!("{krate}/{}: {e}", k.name),
        }
    }
    assert_eq!(compiled, all.len());
}

#[cfg(feature = "opencl")]
#[test]
fn every_kernel_builds_on_opencl() {
    use arraybridge::Device;
    let Some(dev) = test_support::device_or_skip(arraybridge::registry(), Device::OpenCl(0)) else {
        return;
    };
    let cl = arraybridge::registry()
        .backend_of::<bridge_opencl::OpenClBackend>()
        .expect("the registry holds the OpenCL back end");
    for (krate, k) in arraybridge::kernels::all() {
        for opts in k
            .option_sets
            .iter()
            .copied()
            .chain(k.option_sets.is_empty().then_some(&[][..]))
        {
            let p = cl
                .program_from(dev, &k, opts)
                .unwrap_or_else(|e| panic!("{krate}/{} {opts:?}: {e}", k.name));
            for entry in k.entry_points {
                p.kernel(entry)
                    .unwrap_or_else(|e| panic!("{krate}/{}::{entry}: {e}", k.name));
            }
        }
    }
}
