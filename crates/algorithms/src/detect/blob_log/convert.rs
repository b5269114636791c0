//! Conversion of a frame to the working type (f32 for f32 input, f64 otherwise) according to
//! its [`Prescale`] (spec §1.2, §1.3).

use bridge_core::{BridgeError, Result};

use super::params::Prescale;
use crate::detect::FrameView;
use crate::detect::real::take_buf;

/// The frame converted to the working type according to `prescale`.
pub enum Converted {
    /// Working type f32.
    F32(Vec<f32>),
    /// Working type f64.
    F64(Vec<f64>),
}

/// `a`'s pixels times `s`, row-major, in a buffer of this thread's pool (see
/// `blob_log_diag_acc`, which gives it back).
fn scaled_copy<P: Copy + Into<f64>>(a: ndarray::ArrayView2<'_, P>, s: f64) -> Vec<f64> {
    let mut out: Vec<f64> = take_buf(a.len());
    match a.as_slice() {
        // a contiguous frame converts in one vectorised loop
        Some(v) => out.iter_mut().zip(v).for_each(|(o, &v)| *o = v.into() * s),
        None => out.iter_mut().zip(a).for_each(|(o, &v)| *o = v.into() * s),
    }
    out
}

fn min_max(v: impl Iterator<Item = f64>) -> (f64, f64) {
    v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    })
}

/// Convert a frame to the working type (spec §1.2, §1.3).
pub fn convert_frame(frame: &FrameView<'_>, prescale: Prescale) -> Result<Converted> {
    let range = match prescale {
        Prescale::MinMax => {
            let (lo, hi) = match frame {
                FrameView::U8(a) => min_max(a.iter().map(|&v| f64::from(v))),
                FrameView::U16(a) => min_max(a.iter().map(|&v| f64::from(v))),
                FrameView::F32(a) => min_max(a.iter().map(|&v| f64::from(v))),
                FrameView::F64(a) => min_max(a.iter().copied()),
            };
            if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
                return Err(BridgeError::InvalidInput(
                    format!("prescale minmax needs min < max, but the frame is constant ({lo})")
                        .into(),
                ));
            }
            Some((lo, hi))
        }
        Prescale::Range(c, d) => Some((c, d)),
        _ => None,
    };
    Ok(match (frame, prescale, range) {
        (FrameView::U8(a), Prescale::Legacy, _) => Converted::F64(scaled_copy(*a, 1.0 / 255.0)),
        (FrameView::U16(a), Prescale::Legacy, _) => Converted::F64(scaled_copy(*a, 1.0 / 65535.0)),
        (FrameView::F32(a), Prescale::Legacy | Prescale::None, _) => {
            Converted::F32(a.iter().copied().collect())
        }
        (FrameView::F64(a), Prescale::Legacy | Prescale::None, _) => {
            Converted::F64(a.iter().copied().collect())
        }
        (FrameView::F32(a), _, Some((c, d))) => {
            let (c, d) = (c as f32, d as f32);
            Converted::F32(match d - c {
                span if span.is_finite() => a.iter().map(|&v| (v - c) / span).collect(),
                // a range past float32's, as scikit-image (main) rescales it: every value
                // halved first
                _ => {
                    let (c, span) = (c / 2.0, d / 2.0 - c / 2.0);
                    a.iter().map(|&v| (v / 2.0 - c) / span).collect()
                }
            })
        }
        (f, _, Some((c, d))) => {
            let v = f.to_f64_vec().into_iter();
            Converted::F64(match d - c {
                span if span.is_finite() => v.map(|v| (v - c) / span).collect(),
                _ => {
                    let (c, span) = (c / 2.0, d / 2.0 - c / 2.0);
                    v.map(|v| (v / 2.0 - c) / span).collect()
                }
            })
        }
        (f, _, None) => Converted::F64(f.to_f64_vec()),
    })
}

/// Refuse a frame whose prescaled values would overflow the scale space (the cube in float32
/// when `cube_f32`, else float64), instead of letting ±Inf and NaN through the passes: a NaN
/// cube's 3×3×3 maxima differ between the AVX2 and the generic code, and its detections are
/// anywhere. A pass sums `Σ|g| · max|v|`, with `Σ|g2|` up to about `2/σ²` for small σ; the
/// limit keeps a factor 16 · max(1, 1/σ²) below the type's largest value. Integer frames are
/// bounded by their type's range (no scan), float frames by a scan for their largest
/// magnitude; `minmax` maps every frame into [0, 1].
pub(crate) fn check_scale_space_range(
    frame: &FrameView<'_>,
    p: &super::BlobLogParams,
    cube_f32: bool,
) -> Result<()> {
    let raw = match frame {
        FrameView::U8(_) => 255.0,
        FrameView::U16(_) => 65535.0,
        FrameView::F32(a) => a.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs())),
        FrameView::F64(a) => a.iter().fold(0f64, |m, &v| m.max(v.abs())),
    };
    let is_int = matches!(frame, FrameView::U8(_) | FrameView::U16(_));
    check_range_of(raw, is_int, p, cube_f32)
}

/// [`check_scale_space_range`] for frames whose largest magnitude is `raw` (integer pixels
/// when `is_int`).
pub(crate) fn check_range_of(
    raw: f64,
    is_int: bool,
    p: &super::BlobLogParams,
    cube_f32: bool,
) -> Result<()> {
    let bound = match p.prescale {
        Prescale::MinMax => 1.0,
        Prescale::Legacy if is_int => 1.0,
        Prescale::Legacy | Prescale::None => raw,
        Prescale::Range(c, d) => (raw + c.abs()) / (d - c).abs(),
    };
    let top = if cube_f32 {
        f64::from(f32::MAX)
    } else {
        f64::MAX
    };
    let s = p.min_sigma.min(1.0);
    let limit = top * s * s / 16.0;
    if bound.is_nan() || bound > limit {
        return Err(BridgeError::InvalidInput(
            format!(
                "pixel values up to {bound:e} after prescaling would overflow the {} scale space \
             (at most {limit:.1e} with min_sigma {}); rescale the frames or choose a prescale \
             that maps them into a smaller range",
                if cube_f32 { "float32" } else { "float64" },
                p.min_sigma
            )
            .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A float32 frame spanning all of float32: `max − min` overflows, so every value is halved
    /// first (scikit-image main's `rescale_minmax`), giving 0 and 1 instead of NaN and 0.
    #[test]
    fn minmax_past_the_types_range_halves_first() {
        let (lo, hi) = (f32::MIN, f32::MAX);
        let f = ndarray::Array2::from_shape_vec((1, 3), vec![lo, 0.0, hi]).unwrap();
        let Ok(Converted::F32(v)) = convert_frame(&FrameView::F32(f.view()), Prescale::MinMax)
        else {
            panic!("a float32 frame converts to float32")
        };
        let (c, span) = (lo / 2.0, hi / 2.0 - lo / 2.0);
        assert_eq!(v, vec![0.0, (0.0 - c) / span, 1.0]);
        let g = f.mapv(f64::from);
        let Ok(Converted::F64(w)) = convert_frame(&FrameView::F64(g.view()), Prescale::MinMax)
        else {
            panic!("a float64 frame converts to float64")
        };
        assert_eq!(w, vec![0.0, 0.5, 1.0]); // no overflow in float64: as before
        let big = ndarray::Array2::from_shape_vec((1, 2), vec![f64::MIN, f64::MAX]).unwrap();
        let Ok(Converted::F64(w)) = convert_frame(&FrameView::F64(big.view()), Prescale::MinMax)
        else {
            panic!("a float64 frame converts to float64")
        };
        assert_eq!(w, vec![0.0, 1.0]);
    }
}
