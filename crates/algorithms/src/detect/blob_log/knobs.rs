//! The CPU pipeline's tuning knobs, carried by value from the front end to the kernels.
//!
//! The knobs change only the speed (and the memory a frame takes), never a result: every
//! setting gives the same blobs, bit for bit.

use bridge_core::tuning::Tuning;

pub use crate::detect::filters::FusedKernels;

/// The knobs of `blob_log` on the CPU, by value: a [`crate::detect::CpuBackend`] carries them
/// and hands them to every frame it runs.
///
/// [`CpuKnobs::default`] is every knob's documented default; [`CpuKnobs::from_tuning`] reads a
/// [`Tuning`] (the front ends' view of the environment); [`CpuKnobs::process`] the process's.
///
/// ```
/// use algorithms::detect::blob_log::{CpuKnobs, FusedKernels};
/// use bridge_core::tuning::Tuning;
///
/// let t = Tuning::default()
///     .with("ARRAYBRIDGE_DETECT_CERTIFIED", "0")?
///     .with("ARRAYBRIDGE_DETECT_BAND_ROWS", "16")?;
/// let k = CpuKnobs::from_tuning(&t);
/// assert_eq!(k, CpuKnobs { certified: false, band_rows: Some(16), ..CpuKnobs::default() });
/// assert_eq!(CpuKnobs::from_tuning(&Tuning::default()), CpuKnobs::default());
/// assert_eq!(CpuKnobs::default().fused, FusedKernels::Widest);
/// # Ok::<(), bridge_core::BridgeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuKnobs {
    /// Whether the certified f32 search may run (`ARRAYBRIDGE_DETECT_CERTIFIED`; it also needs
    /// AVX2): the maxima found in an f32 scale space with a proven error bound, the exact value
    /// of every voxel the bound leaves open. `false`: the whole scale space in the working type.
    pub certified: bool,
    /// The f32 kernels of the certified search (`ARRAYBRIDGE_DETECT_FUSED`).
    pub fused: FusedKernels,
    /// Rows of the scale space computed per step, every scale (`ARRAYBRIDGE_DETECT_BAND_ROWS`;
    /// `None`: as many as fit 512 KiB, at least 8). Values past 65 536 count as 65 536, 0 as
    /// `None`.
    pub band_rows: Option<usize>,
}

impl Default for CpuKnobs {
    fn default() -> Self {
        CpuKnobs {
            certified: true,
            fused: FusedKernels::Widest,
            band_rows: None,
        }
    }
}

impl CpuKnobs {
    /// The knobs a [`Tuning`] sets (a knob it leaves unset keeps its default).
    pub fn from_tuning(t: &Tuning) -> Self {
        CpuKnobs {
            certified: t.usize_knob("ARRAYBRIDGE_DETECT_CERTIFIED") != Some(0),
            fused: match t.usize_knob("ARRAYBRIDGE_DETECT_FUSED") {
                Some(0) => FusedKernels::Exact,
                Some(8) => FusedKernels::Eight,
                _ => FusedKernels::Widest,
            },
            band_rows: t
                .usize_knob("ARRAYBRIDGE_DETECT_BAND_ROWS")
                .filter(|&b| b > 0),
        }
    }

    /// The knobs of the process's tuning ([`bridge_core::tuning::process`]: the environment,
    /// read once, or what a front end installed).
    pub fn process() -> Self {
        CpuKnobs::from_tuning(bridge_core::tuning::process())
    }
}
