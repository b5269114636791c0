//! Element types and the casting policy.
//!
//! [`DType`] names the eight element types arraybridge moves: `u8`, `u16`, `i32`, `i64`, `f16`,
//! `bf16` (from the `half` crate), `f32`, `f64`. The [`Element`] trait ties each Rust type to its
//! tag; it is sealed and built on `bytemuck::Pod`, so any element buffer can be viewed as bytes.
//!
//! # Casting policy
//! [`cast_slice`] never wraps silently. The default [`CastMode::Lossless`] succeeds only when every
//! value is represented exactly in the target type and otherwise names the first value that does
//! not fit. [`CastMode::Saturate`] and [`CastMode::RescaleMinMax`] are explicit opt-ins:
//!
//! | mode | integer target | float target |
//! |---|---|---|
//! | `Lossless` | exact integral value in range, else error; NaN is an error | exact value (NaN and ±inf carry over), else error |
//! | `Saturate` | round half to even, clamp to `[MIN, MAX]` (±inf clamp); NaN is an error | nearest value, clamped to the largest finite value (±inf and NaN carry over) |
//! | `RescaleMinMax` | source `[min, max]` mapped linearly onto `[MIN, MAX]`, rounded half to even | source `[min, max]` mapped onto `[0, 1]` |
//!
//! `RescaleMinMax` rejects NaN and infinite inputs (the range would be undefined) and maps a
//! constant input to the low end of the target range.
//!
//! ```
//! use bridge_core::dtype::{cast_slice, CastMode};
//! let ok: Vec<u8> = cast_slice(&[0u16, 7, 255], CastMode::Lossless)?;
//! assert_eq!(ok, [0, 7, 255]);
//! assert!(cast_slice::<u16, u8>(&[256], CastMode::Lossless).is_err());
//! let sat: Vec<u8> = cast_slice(&[-3.0f32, 2.5, 300.0], CastMode::Saturate)?;
//! assert_eq!(sat, [0, 2, 255]);
//! # Ok::<(), bridge_core::BridgeError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use bytemuck::Pod;
use half::{bf16, f16};

use crate::error::{BridgeError, Result};

/// The element type of an array. Serialised as its [`DType::name`] (`"f32"`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// IEEE 754 half precision (`half::f16`).
    F16,
    /// Brain floating point (`half::bf16`).
    BF16,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision.
    F64,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 8] = [
        DType::U8,
        DType::U16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Size of one element in bytes.
    pub fn size_of(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The canonical lower-case name (`u8`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// True for the four floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// True for the 16-bit float types (which many devices lack).
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = BridgeError;
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        let d = match t.as_str() {
            "u8" | "uint8" => DType::U8,
            "u16" | "uint16" => DType::U16,
            "i32" | "int32" => DType::I32,
            "i64" | "int64" => DType::I64,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            _ => {
                return Err(BridgeError::ParseDType {
                    input: s.to_owned(),
                });
            }
        };
        Ok(d)
    }
}

/// How [`cast_slice`] treats values that do not fit the target type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum CastMode {
    /// Exact or error (the default). See the module docs.
    #[default]
    Lossless,
    /// Clamp to the target range (integers round half to even). Opt-in.
    Saturate,
    /// Map the source's `[min, max]` linearly onto the target range (`[0, 1]` for floats). Opt-in.
    RescaleMinMax,
}

impl fmt::Display for CastMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CastMode::Lossless => "lossless",
            CastMode::Saturate => "saturate",
            CastMode::RescaleMinMax => "rescale-min-max",
        })
    }
}

/// A value in a form wide enough for any element: integers as `i128`, floats as `f64`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    /// An integer value.
    Int(i128),
    /// A floating-point value.
    Float(f64),
}

impl Num {
    /// The value as `f64` (large `i64` values round to nearest).
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::Int(i) => write!(f, "{i}"),
            Num::Float(x) => write!(f, "{x}"),
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that arraybridge can store: one of the eight [`DType`]s. Sealed.
pub trait Element:
    Pod + Copy + Send + Sync + PartialEq + fmt::Debug + Default + 'static + sealed::Sealed
{
    /// The dtype tag of this type.
    const DTYPE: DType;
    /// The value widened losslessly.
    fn to_num(self) -> Num;
    /// The value as `f64` (exact for every type except large `i64`).
    fn to_f64(self) -> f64 {
        self.to_num().as_f64()
    }
    /// Exact conversion, `None` when the value is not represented exactly.
    fn from_num_exact(n: Num) -> Option<Self>;
    /// Saturating conversion from a non-NaN `f64` (integers round half to even then clamp;
    /// floats round to nearest and clamp to the largest finite value unless the input is infinite).
    fn from_f64_saturating(v: f64) -> Self;
    /// Saturating conversion from an integer.
    fn from_i128_saturating(v: i128) -> Self;
    /// Lower and upper ends of the target range used by [`CastMode::RescaleMinMax`].
    fn rescale_range() -> (f64, f64);
}

macro_rules! int_element {
    ($t:ty, $d:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_num(self) -> Num {
                Num::Int(self as i128)
            }
            fn from_num_exact(n: Num) -> Option<Self> {
                match n {
                    Num::Int(i) => <$t>::try_from(i).ok(),
                    Num::Float(f) => {
                        if f.is_finite()
                            && f.fract() == 0.0
                            && f >= <$t>::MIN as f64
                            && f <= <$t>::MAX as f64
                        {
                            <$t>::try_from(f as i128).ok()
                        } else {
                            None
                        }
                    }
                }
            }
            fn from_f64_saturating(v: f64) -> Self {
                // `as` from float to int saturates in Rust (and maps NaN to 0, which callers exclude).
                let r = v.round_ties_even();
                if r <= <$t>::MIN as f64 {
                    <$t>::MIN
                } else if r >= <$t>::MAX as f64 {
                    <$t>::MAX
                } else {
                    r as $t
                }
            }
            fn from_i128_saturating(v: i128) -> Self {
                v.clamp(<$t>::MIN as i128, <$t>::MAX as i128) as $t
            }
            fn rescale_range() -> (f64, f64) {
                (<$t>::MIN as f64, <$t>::MAX as f64)
            }
        }
    };
}

int_element!(u8, DType::U8);
int_element!(u16, DType::U16);
int_element!(i32, DType::I32);
int_element!(i64, DType::I64);

macro_rules! float_element {
    ($t:ty, $d:expr, $from:expr, $to:expr, $max:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_num(self) -> Num {
                Num::Float($to(self))
            }
            fn from_num_exact(n: Num) -> Option<Self> {
                match n {
                    Num::Int(i) => {
                        let v: $t = $from(i as f64);
                        let back = $to(v);
                        (back.is_finite() && back as i128 == i && (i as f64) == back).then_some(v)
                    }
                    Num::Float(f) => {
                        let v: $t = $from(f);
                        let back = $to(v);
                        (back == f || (f.is_nan() && back.is_nan())).then_some(v)
                    }
                }
            }
            fn from_f64_saturating(v: f64) -> Self {
                let max: f64 = $max;
                if v.is_finite() {
                    $from(v.clamp(-max, max))
                } else {
                    $from(v)
                }
            }
            fn from_i128_saturating(v: i128) -> Self {
                Self::from_f64_saturating(v as f64)
            }
            fn rescale_range() -> (f64, f64) {
                (0.0, 1.0)
            }
        }
    };
}

float_element!(
    f32,
    DType::F32,
    |x: f64| x as f32,
    |x: f32| x as f64,
    f32::MAX as f64
);
float_element!(f64, DType::F64, |x: f64| x, |x: f64| x, f64::MAX);
float_element!(
    f16,
    DType::F16,
    f16::from_f64,
    |x: f16| x.to_f64(),
    f16::MAX.to_f64()
);
float_element!(
    bf16,
    DType::BF16,
    bf16::from_f64,
    |x: bf16| x.to_f64(),
    bf16::MAX.to_f64()
);

/// Cast a slice element by element under `mode`. See the module docs for the policy.
///
/// Errors name the first offending element by its index in `src`.
pub fn cast_slice<S: Element, D: Element>(src: &[S], mode: CastMode) -> Result<Vec<D>> {
    cast_iter(src.iter().copied(), src.len(), mode)
}

/// Cast the elements of any exact-size iterator (in iteration order) under `mode`.
pub fn cast_iter<S: Element, D: Element>(
    src: impl Iterator<Item = S> + Clone,
    len: usize,
    mode: CastMode,
) -> Result<Vec<D>> {
    let mut out = Vec::with_capacity(len);
    match mode {
        CastMode::Lossless => {
            for (index, v) in src.enumerate() {
                let n = v.to_num();
                match D::from_num_exact(n) {
                    Some(d) => out.push(d),
                    None => {
                        if matches!(n, Num::Float(f) if f.is_nan()) {
                            return Err(BridgeError::CastNaN {
                                from: S::DTYPE,
                                to: D::DTYPE,
                                index,
                                mode: "integers cannot represent NaN".into(),
                            });
                        }
                        return Err(BridgeError::CastOutOfRange {
                            from: S::DTYPE,
                            to: D::DTYPE,
                            index,
                            value: n.to_string(),
                        });
                    }
                }
            }
        }
        CastMode::Saturate => {
            for (index, v) in src.enumerate() {
                let d = match v.to_num() {
                    Num::Int(i) => D::from_i128_saturating(i),
                    Num::Float(f) if f.is_nan() => {
                        if D::DTYPE.is_float() {
                            D::from_f64_saturating(f)
                        } else {
                            return Err(BridgeError::CastNaN {
                                from: S::DTYPE,
                                to: D::DTYPE,
                                index,
                                mode: "saturate: integers cannot represent NaN".into(),
                            });
                        }
                    }
                    Num::Float(f) => D::from_f64_saturating(f),
                };
                out.push(d);
            }
        }
        CastMode::RescaleMinMax => {
            let mut lo = f64::INFINITY;
            let mut hi = f64::NEG_INFINITY;
            for (index, v) in src.clone().enumerate() {
                let f = v.to_f64();
                if !f.is_finite() {
                    if f.is_nan() {
                        return Err(BridgeError::CastNaN {
                            from: S::DTYPE,
                            to: D::DTYPE,
                            index,
                            mode: "rescale-min-max needs finite values".into(),
                        });
                    }
                    return Err(BridgeError::CastOutOfRange {
                        from: S::DTYPE,
                        to: D::DTYPE,
                        index,
                        value: format!("{f} (rescale-min-max needs finite values)"),
                    });
                }
                lo = lo.min(f);
                hi = hi.max(f);
            }
            let (tlo, thi) = D::rescale_range();
            let span = hi - lo;
            for v in src {
                let f = v.to_f64();
                let t = if span > 0.0 { (f - lo) / span } else { 0.0 };
                // Interpolate without overflow for the widest integer ranges.
                let x = tlo + t * (thi - tlo);
                out.push(D::from_f64_saturating(x.clamp(tlo, thi)));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_names() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().ok(), Some(d));
        }
        assert_eq!(DType::BF16.size_of(), 2);
        assert!("complex64".parse::<DType>().is_err());
        assert_eq!(<half::bf16 as Element>::DTYPE, DType::BF16);
        assert_eq!(std::mem::size_of::<half::f16>(), DType::F16.size_of());
    }

    #[test]
    fn lossless_int_to_float() {
        let r: Vec<f32> = cast_slice(&[16_777_216i64], CastMode::Lossless).unwrap_or_default();
        assert_eq!(r, [16_777_216.0]);
        assert!(cast_slice::<i64, f32>(&[16_777_217], CastMode::Lossless).is_err());
        assert!(cast_slice::<u16, f16>(&[65535], CastMode::Lossless).is_err());
        assert!(cast_slice::<u16, f16>(&[2049], CastMode::Lossless).is_err());
        assert!(cast_slice::<u16, f16>(&[2048], CastMode::Lossless).is_ok());
        assert!(cast_slice::<i64, f64>(&[i64::MAX], CastMode::Lossless).is_err());
    }
}
