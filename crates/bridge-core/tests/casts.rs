//! Every cast rule, for every pair of dtypes, on random values including out-of-range ones.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bridge_core::dtype::{CastMode, Element, Num, cast_slice};
use bridge_core::{BridgeError, DType, bf16, dispatch_dtype, f16};
use rand::Rng;

/// Random values of `T` drawn across its whole range, plus the edges.
fn random_values<T: Element>(n: usize) -> Vec<T> {
    let mut rng = rand::rng();
    let mut v: Vec<f64> = match T::DTYPE {
        DType::U8 => (0..n).map(|_| rng.random_range(0..=255) as f64).collect(),
        DType::U16 => (0..n).map(|_| rng.random_range(0..=65535) as f64).collect(),
        DType::I32 => (0..n).map(|_| rng.random::<i32>() as f64).collect(),
        DType::I64 => {
            return (0..n)
                .map(|i| {
                    if i % 3 == 0 {
                        rng.random_range(-1000..1000i64)
                    } else {
                        rng.random::<i64>()
                    }
                })
                .map(|x| T::from_num_exact(Num::Int(x as i128)).unwrap())
                .collect();
        }
        _ => (0..n)
            .map(|i| match i % 4 {
                0 => rng.random_range(-300.0..300.0f64).round(),
                1 => rng.random_range(-1.0..1.0f64),
                2 => rng.random_range(-1e6..1e6f64),
                _ => rng.random_range(-1e40..1e40f64),
            })
            .collect(),
    };
    v.extend([0.0, 1.0]);
    v.into_iter().map(|x| T::from_f64_saturating(x)).collect()
}

/// Exact equality of two widened values (an integer equals a float only if it is that integer).
fn num_eq(a: Num, b: Num) -> bool {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => x == y,
        (Num::Float(x), Num::Float(y)) => x == y || (x.is_nan() && y.is_nan()),
        (Num::Int(i), Num::Float(f)) | (Num::Float(f), Num::Int(i)) => {
            f.is_finite() && f.fract() == 0.0 && f as i128 == i && i as f64 == f
        }
    }
}

fn range_of<D: Element>() -> (f64, f64) {
    match D::DTYPE {
        DType::U8 => (0.0, 255.0),
        DType::U16 => (0.0, 65535.0),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::I64 => (i64::MIN as f64, i64::MAX as f64),
        DType::F16 => (-65504.0, 65504.0),
        DType::BF16 => (-bf16::MAX.to_f64(), bf16::MAX.to_f64()),
        DType::F32 => (-(f32::MAX as f64), f32::MAX as f64),
        DType::F64 => (f64::MIN, f64::MAX),
    }
}

fn check_pair<S: Element, D: Element>() {
    let src = random_values::<S>(500);
    // Lossless: success iff every value round-trips exactly; the error names the first failure.
    let first_bad = src.iter().position(|v| {
        D::from_num_exact(v.to_num()).is_none_or(|d| !num_eq(d.to_num(), v.to_num()))
    });
    match (cast_slice::<S, D>(&src, CastMode::Lossless), first_bad) {
        (Ok(out), None) => {
            for (a, b) in src.iter().zip(&out) {
                assert_eq!(a.to_f64(), b.to_f64(), "{} -> {}", S::DTYPE, D::DTYPE);
            }
        }
        (
            Err(BridgeError::CastOutOfRange {
                index, from, to, ..
            }),
            Some(i),
        ) => {
            assert_eq!((index, from, to), (i, S::DTYPE, D::DTYPE));
        }
        (r, fb) => panic!(
            "{} -> {}: {:?} vs first bad {fb:?}",
            S::DTYPE,
            D::DTYPE,
            r.map(|v| v.len())
        ),
    }
    // Saturate: never errors on non-NaN input, always within range, monotonic, exact where exact.
    let sat = cast_slice::<S, D>(&src, CastMode::Saturate).unwrap();
    let (lo, hi) = range_of::<D>();
    let mut pairs: Vec<(f64, f64)> = src
        .iter()
        .zip(&sat)
        .map(|(a, b)| (a.to_f64(), b.to_f64()))
        .collect();
    for &(a, b) in &pairs {
        assert!(
            b >= lo && b <= hi,
            "{} -> {}: {a} saturated to {b}",
            S::DTYPE,
            D::DTYPE
        );
        if let Some(d) = D::from_num_exact(Num::Float(a)) {
            assert_eq!(d.to_f64(), b, "exact values are kept");
        }
    }
    pairs.sort_by(|x, y| x.0.total_cmp(&y.0));
    for w in pairs.windows(2) {
        assert!(
            w[0].1 <= w[1].1,
            "{} -> {} not monotonic: {:?}",
            S::DTYPE,
            D::DTYPE,
            w
        );
    }
    // Rescale: min → low end, max → high end, monotonic.
    let resc = cast_slice::<S, D>(&src, CastMode::RescaleMinMax).unwrap();
    let (tlo, thi) = if D::DTYPE.is_float() {
        (0.0, 1.0)
    } else {
        (lo, hi)
    };
    let imin = (0..src.len())
        .min_by(|&i, &j| src[i].to_f64().total_cmp(&src[j].to_f64()))
        .unwrap();
    let imax = (0..src.len())
        .max_by(|&i, &j| src[i].to_f64().total_cmp(&src[j].to_f64()))
        .unwrap();
    assert_eq!(resc[imin].to_f64(), D::from_f64_saturating(tlo).to_f64());
    assert_eq!(resc[imax].to_f64(), D::from_f64_saturating(thi).to_f64());
    let mut pairs: Vec<(f64, f64)> = src
        .iter()
        .zip(&resc)
        .map(|(a, b)| (a.to_f64(), b.to_f64()))
        .collect();
    pairs.sort_by(|x, y| x.0.total_cmp(&y.0));
    for w in pairs.windows(2) {
        assert!(
            w[0].1 <= w[1].1,
            "rescale {} -> {} not monotonic",
            S::DTYPE,
            D::DTYPE
        );
    }
}

#[test]
fn every_pair_every_mode_on_random_values() {
    for s in DType::ALL {
        for d in DType::ALL {
            dispatch_dtype!(s, S => dispatch_dtype!(d, D => check_pair::<S, D>()));
        }
    }
}

#[test]
fn named_examples() {
    // Out of range, lossless.
    let e = cast_slice::<i32, u8>(&[1, 2, -1, 300], CastMode::Lossless).unwrap_err();
    assert!(
        matches!(e, BridgeError::CastOutOfRange { index: 2, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("element 2 = -1"), "{e}");
    // Fractions are not lossless to integers.
    assert!(cast_slice::<f32, i32>(&[1.0, 2.5], CastMode::Lossless).is_err());
    // Saturate rounds half to even and clamps; infinities clamp.
    let v: Vec<u8> = cast_slice(
        &[0.5f64, 1.5, 2.5, -0.4, f64::INFINITY, f64::NEG_INFINITY],
        CastMode::Saturate,
    )
    .unwrap();
    assert_eq!(v, [0, 2, 2, 0, 255, 0]);
    let v: Vec<f16> = cast_slice(&[1e9f32, -1e9, f32::INFINITY], CastMode::Saturate).unwrap();
    assert_eq!(v, [f16::MAX, f16::MIN, f16::INFINITY]);
    let v: Vec<i32> = cast_slice(&[i64::MAX, i64::MIN, 5], CastMode::Saturate).unwrap();
    assert_eq!(v, [i32::MAX, i32::MIN, 5]);
    // NaN: carried to floats, an error to integers in every mode.
    let v: Vec<f32> = cast_slice(&[f64::NAN], CastMode::Lossless).unwrap();
    assert!(v[0].is_nan());
    for mode in [
        CastMode::Lossless,
        CastMode::Saturate,
        CastMode::RescaleMinMax,
    ] {
        let e = cast_slice::<f32, u16>(&[1.0, f32::NAN], mode).unwrap_err();
        assert!(
            matches!(e, BridgeError::CastNaN { index: 1, .. }),
            "{mode}: {e}"
        );
    }
    // Rescale: u16 range onto u8 and onto [0, 1].
    let v: Vec<u8> = cast_slice(&[100u16, 150, 200], CastMode::RescaleMinMax).unwrap();
    assert_eq!(v, [0, 128, 255]);
    let v: Vec<f32> = cast_slice(&[100u16, 150, 200], CastMode::RescaleMinMax).unwrap();
    assert_eq!(v, [0.0, 0.5, 1.0]);
    // Constant input maps to the low end; empty input is empty.
    let v: Vec<u8> = cast_slice(&[7.0f32; 3], CastMode::RescaleMinMax).unwrap();
    assert_eq!(v, [0, 0, 0]);
    assert!(
        cast_slice::<f32, u8>(&[], CastMode::RescaleMinMax)
            .unwrap()
            .is_empty()
    );
    assert!(cast_slice::<f32, u8>(&[1.0, f32::INFINITY], CastMode::RescaleMinMax).is_err());
    // bf16 keeps 8 bits of mantissa.
    assert!(cast_slice::<i32, bf16>(&[256], CastMode::Lossless).is_ok());
    assert!(cast_slice::<i32, bf16>(&[257], CastMode::Lossless).is_err());
}

#[test]
fn array_cast_keeps_shape_and_logical_order() {
    use bridge_core::Array;
    let a = ndarray::Array2::from_shape_fn((3, 2), |(i, j)| (i * 2 + j) as u16).reversed_axes();
    let arr = Array::from_ndarray(a.clone().into_dyn());
    let c = arr
        .cast(DType::F64, CastMode::Lossless)
        .unwrap()
        .into_ndarray::<f64>()
        .unwrap();
    assert_eq!(c, a.mapv(f64::from).into_dyn());
    assert!(arr.cast(DType::U8, CastMode::Lossless).is_ok());
}
