//! Every portable kernel source the workspace ships, in one list, so that one test can compile
//! all of them with NVRTC (CUDA) and build all of them on OpenCL.

use bridge_core::kernel::KernelSource;

/// Every kernel source shipped by the workspace's crates, with the crate that ships it.
pub fn all() -> Vec<(&'static str, KernelSource)> {
    let mut v: Vec<(&'static str, KernelSource)> = Vec::new();
    #[cfg(feature = "opencl")]
    v.extend(
        bridge_opencl::kernels::ALL
            .iter()
            .map(|k| ("bridge-opencl", *k)),
    );
    #[cfg(feature = "cuda")]
    v.extend(
        bridge_cuda::kernel::KERNELS
            .iter()
            .map(|k| ("bridge-cuda", *k)),
    );
    v.extend(
        algorithms::detect::kernels::ALL
            .iter()
            .map(|k| ("algorithms/detect", *k)),
    );
    v.extend(
        algorithms::paco::gpu_kernels::ALL
            .iter()
            .map(|k| ("algorithms/paco", *k)),
    );
    v
}
