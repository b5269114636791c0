//! # test-support
//!
//! Helpers shared by the workspace's tests (a dev-dependency only; never published):
//!
//! - [`fixtures`]: where the golden data lives (it honours `ARRAYBRIDGE_FIXTURES`, which the GPU
//!   harness `scripts/gpu-check.sh` sets);
//! - [`require`]: the one rule for tests that need a device or a library: skip (pass with a note
//!   on stderr) when it is absent, fail instead when `ARRAYBRIDGE_REQUIRE_GPU`,
//!   `ARRAYBRIDGE_REQUIRE_OPENCL` or `ARRAYBRIDGE_REQUIRE_NVRTC` says so ([`env_flag`],
//!   [`or_skip`], [`device_or_skip`]);
//! - [`npy`]: a minimal `.npy` reader for fixtures; [`tiff`]: TIFF files laid out as ImageJ
//!   writes them;
//! - [`fake`]: a fake backend (device memory is host memory with a capacity, every action
//!   logged, deterministic OOM) and a recording observer, for registry and planner tests;
//! - [`spots`]: real-like n-D images (Gaussian spots on a noisy floor) from a seeded stream;
//! - [`device_suite!`]: one test body run on `cpu`, `opencl:0` and `cuda:0`, each device
//!   skipping or failing as [`device_or_skip`] says.
//!
//! Tests of the `arraybridge` crates ask [`device_or_skip`] with `arraybridge::registry()`:
//! test helpers are not public API of the library.
//!
//! ```
//! use bridge_core::convert::Registry;
//! use bridge_core::Device;
//! let reg = Registry::new();
//! assert_eq!(test_support::device_or_skip(&reg, Device::Cpu), Some(Device::Cpu));
//! // Absent, and (unless ARRAYBRIDGE_REQUIRE_OPENCL=1) skipped.
//! if !test_support::env_flag(test_support::require::OPENCL) {
//!     assert_eq!(test_support::device_or_skip(&reg, Device::OpenCl(0)), None);
//! }
//! ```

// Test helpers fail by panicking: that is how a test reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod fake;
pub mod fixtures;
pub mod npy;
pub mod require;
pub mod rerun;
pub mod spots;
pub mod tiff;

pub use require::{device_or_skip, env_flag, or_skip};
pub use rerun::rerun_with_env;

/// Re-export for [`device_suite!`], so that a test crate needs no extra import.
#[doc(hidden)]
pub use bridge_core as __bridge_core;

/// Define one test per device from one body: module `NAME` with tests `cpu`, `opencl` and
/// `cuda` (devices `cpu`, `opencl:0`, `cuda:0`).
///
/// `registry = EXPR` gives the registry that says which devices exist (a `Registry`, a
/// `&Registry` or an `Arc<Registry>`; evaluated once per test). The body is a closure taking
/// `(&Registry, Device)`; a device absent from the registry skips the test, or fails it under
/// `ARRAYBRIDGE_REQUIRE_OPENCL=1` (OpenCL) or `ARRAYBRIDGE_REQUIRE_GPU=1` (CUDA), as
/// [`device_or_skip`] says.
///
/// ```
/// test_support::device_suite!(round_trip, registry = bridge_core::convert::Registry::new(),
///     |reg, device| {
///         assert!(reg.topology().has_device(device));
///     });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! device_suite {
    ($name:ident, registry = $registry:expr, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run(device: $crate::__bridge_core::Device) {
                let registry = $registry;
                let reg: &$crate::__bridge_core::convert::Registry =
                    ::std::borrow::Borrow::borrow(&registry);
                if let Some(d) = $crate::device_or_skip(reg, device) {
                    let f: &dyn Fn(
                        &$crate::__bridge_core::convert::Registry,
                        $crate::__bridge_core::Device,
                    ) = &$body;
                    f(reg, d);
                }
            }

            #[test]
            fn cpu() {
                run($crate::__bridge_core::Device::Cpu);
            }

            #[test]
            fn opencl() {
                run($crate::__bridge_core::Device::OpenCl(0));
            }

            #[test]
            fn cuda() {
                run($crate::__bridge_core::Device::Cuda(0));
            }
        }
    };
}
