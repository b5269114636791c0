//! The dtype mapping between arraybridge's [`DType`] and torch's scalar types.
//!
//! | DType | torch dtype | c10::ScalarType | [`tch::Kind`] |
//! |---|---|---|---|
//! | `u8` | `torch.uint8` | `Byte` (0) | `Uint8` |
//! | `u16` | `torch.uint16` | `UInt16` (27) | — (tch 0.24 has no variant) |
//! | `i32` | `torch.int32` | `Int` (3) | `Int` |
//! | `i64` | `torch.int64` | `Long` (4) | `Int64` |
//! | `f16` | `torch.float16` | `Half` (5) | `Half` |
//! | `bf16` | `torch.bfloat16` | `BFloat16` (15) | `BFloat16` |
//! | `f32` | `torch.float32` | `Float` (6) | `Float` |
//! | `f64` | `torch.float64` | `Double` (7) | `Double` |
//!
//! Every other torch dtype (bool, int8, int16, complex, quantized, float8, uint32/64, ...) has no
//! [`DType`] and is reported as [`BridgeError::Unsupported`] naming the torch dtype.
//!
//! **`u16` tensors are real `torch.uint16` tensors** (PyTorch ≥ 2.3 supports them for copies,
//! device moves and basic ops). tch 0.24's `Kind` has no `UInt16`, so `Tensor::kind()` panics on
//! them: use [`dtype_of`] (never panics) to read any tensor's dtype, and [`kind_of`] to get a
//! `Kind` where one exists.

use bridge_core::{BridgeError, DType, Result};
use tch::{Kind, Tensor};

use crate::ffi;

/// The c10::ScalarType code torch uses for `dtype` (the codes are the C side's, in `ffi`).
pub fn scalar_type(dtype: DType) -> i32 {
    ffi::scalar_type_code(dtype)
}

/// torch's name of a c10::ScalarType code, for messages.
pub fn scalar_type_name(code: i32) -> &'static str {
    const NAMES: [&str; 46] = [
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
        "complex32",
        "complex64",
        "complex128",
        "bool",
        "qint8",
        "quint8",
        "qint32",
        "bfloat16",
        "quint4x2",
        "quint2x4",
        "bits1x8",
        "bits2x4",
        "bits4x2",
        "bits8",
        "bits16",
        "float8_e5m2",
        "float8_e4m3fn",
        "float8_e5m2fnuz",
        "float8_e4m3fnuz",
        "uint16",
        "uint32",
        "uint64",
        "uint1",
        "uint2",
        "uint3",
        "uint4",
        "uint5",
        "uint6",
        "uint7",
        "int1",
        "int2",
        "int3",
        "int4",
        "int5",
        "int6",
        "int7",
        "float8_e8m0fnu",
        "float4_e2m1fn_x2",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i).copied())
        .unwrap_or("unknown")
}

/// The [`DType`] of a c10::ScalarType code, or [`BridgeError::Unsupported`] naming the torch
/// dtype when arraybridge has none for it.
pub fn scalar_type_to_dtype(code: i32) -> Result<DType> {
    ffi::dtype_of_code(code).ok_or_else(|| {
        BridgeError::Unsupported(format!(
            "torch dtype {} (c10::ScalarType {code}) has no arraybridge dtype \
             (supported: uint8, uint16, int32, int64, float16, bfloat16, float32, float64)",
            scalar_type_name(code)
        ))
    })
}

/// The [`tch::Kind`] of `dtype`; [`BridgeError::UnsupportedDType`] for `u16`, which tch 0.24
/// cannot name (the tensors themselves are `torch.uint16`; see the module docs).
pub fn kind_of(dtype: DType) -> Result<Kind> {
    Ok(match dtype {
        DType::U8 => Kind::Uint8,
        DType::U16 => {
            return Err(BridgeError::UnsupportedDType {
                dtype,
                device: bridge_core::Device::TorchCpu,
                reason: "tch 0.24's Kind has no UInt16; the tensor is torch.uint16, \
                         read its dtype with bridge_torch::dtype_of"
                    .into(),
            });
        }
        DType::I32 => Kind::Int,
        DType::I64 => Kind::Int64,
        DType::F16 => Kind::Half,
        DType::BF16 => Kind::BFloat16,
        DType::F32 => Kind::Float,
        DType::F64 => Kind::Double,
    })
}

/// The [`DType`] of a [`tch::Kind`], or [`BridgeError::Unsupported`] for kinds arraybridge has no
/// dtype for (bool, int8, int16, complex, quantized, float8).
pub fn dtype_of_kind(kind: Kind) -> Result<DType> {
    Ok(match kind {
        Kind::Uint8 => DType::U8,
        Kind::Int => DType::I32,
        Kind::Int64 => DType::I64,
        Kind::Half => DType::F16,
        Kind::BFloat16 => DType::BF16,
        Kind::Float => DType::F32,
        Kind::Double => DType::F64,
        other => {
            return Err(BridgeError::Unsupported(format!(
                "torch kind {other:?} has no arraybridge dtype \
                 (supported: uint8, uint16, int32, int64, float16, bfloat16, float32, float64)"
            )));
        }
    })
}

/// The [`DType`] of any tensor (including `torch.uint16`, which `Tensor::kind()` cannot name).
/// Never panics: undefined tensors and dtypes with no [`DType`] are errors.
pub fn dtype_of(tensor: &Tensor) -> Result<DType> {
    if !tensor.defined() {
        return Err(BridgeError::invalid_argument(
            "tensor",
            "undefined tensor has no dtype",
        ));
    }
    scalar_type_to_dtype(ffi::scalar_type(tensor)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_round_trips_through_scalar_types() {
        for d in DType::ALL {
            assert_eq!(scalar_type_to_dtype(scalar_type(d)).ok(), Some(d), "{d}");
        }
    }

    #[test]
    fn kinds_match_tch_codes() {
        // tch's Kind and c10's codes agree for every DType tch can name.
        for d in DType::ALL {
            match kind_of(d) {
                Ok(k) => assert_eq!(dtype_of_kind(k).ok(), Some(d)),
                Err(e) => {
                    assert_eq!(d, DType::U16);
                    assert!(matches!(e, BridgeError::UnsupportedDType { .. }));
                }
            }
        }
    }

    #[test]
    fn foreign_dtypes_are_typed_errors() {
        for code in [1, 2, 8, 9, 10, 11, 12, 23, 28, 29, 44, 99, -1] {
            let e = scalar_type_to_dtype(code);
            assert!(matches!(e, Err(BridgeError::Unsupported(_))), "{code}");
        }
        assert!(
            scalar_type_to_dtype(11)
                .err()
                .is_some_and(|e| e.to_string().contains("bool"))
        );
        for k in [
            Kind::Bool,
            Kind::Int8,
            Kind::Int16,
            Kind::ComplexFloat,
            Kind::QInt8,
        ] {
            assert!(matches!(dtype_of_kind(k), Err(BridgeError::Unsupported(_))));
        }
    }
}
