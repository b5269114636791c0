//! [`Precision`]: the one arithmetic setting of every algorithm, on every device.

/// The floating-point arithmetic of an algorithm, wherever it runs.
///
/// | | CPU `blob_log` | device `blob_log` | device `locate` | device PACO |
/// |---|---|---|---|---|
/// | `Auto` | float64 passes (SciPy's cube bit for bit) | the CPU's blobs bit for bit: a float32 cube searched with the CPU's proven bound and settled with exact float64 voxels on the host (the certified search, wherever a threshold is set; no doubles needed on the device), else where the device has doubles as `F64`; without doubles and without a threshold, float32 cube and passes | float64 where the device has doubles, else float32 | double where the device has doubles, else float |
/// | `F64` | as `Auto` | the certified search as `Auto`, or the cube in the CPU's working type (float64 for integer and float64 frames, float32 for float32 frames), passes accumulated in float64: the CPU's blobs bit for bit | float64: the CPU's features bit for bit | double |
/// | `F32` | float32 passes (about twice as fast; spec §1.4: a candidate within ~1e-7 of the threshold may flip) | float32 cube and passes | float32 | float |
///
/// `F64` on a device without doubles is an error ([`bridge_core::BridgeError::Unsupported`]),
/// never a silent fall back to float32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// Each algorithm's default (the table above).
    #[default]
    Auto,
    /// Double precision: the CPU's results, bit for bit.
    F64,
    /// Single precision throughout.
    F32,
}

impl Precision {
    /// Whether the arithmetic is double on a device that has doubles (`fp64`): `Auto` and
    /// `F64` there, `Auto` falls back to single without; `F64` without doubles is an error
    /// naming `device`.
    pub fn doubles(self, fp64: bool, device: impl std::fmt::Display) -> bridge_core::Result<bool> {
        match self {
            Precision::Auto => Ok(fp64),
            Precision::F32 => Ok(false),
            Precision::F64 if fp64 => Ok(true),
            Precision::F64 => Err(bridge_core::BridgeError::Unsupported(format!(
                "float64 arithmetic on {device}, which has no doubles (use Precision::F32 or \
                 Auto)"
            ))),
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = bridge_core::BridgeError;

    fn from_str(s: &str) -> bridge_core::Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Precision::Auto),
            "f64" | "float64" | "double" => Ok(Precision::F64),
            "f32" | "float32" | "float" => Ok(Precision::F32),
            other => Err(bridge_core::BridgeError::invalid_argument(
                "precision",
                format!("{other:?}: expected auto, f64 or f32"),
            )),
        }
    }
}
