//! Colours of the figures: the [`Rgb`] type and the fixed marker colours, the [`viridis`] colour
//! map, the categorical [`palette`] of tracks, and the linear grey stretch ([`grey`],
//! [`percentile`]) of microscopy frames.

/// An RGB colour.
pub type Rgb = [u8; 3];

/// Pure red, the marker colour of recovered sources (absent from [`viridis`]).
pub const RED: Rgb = [255, 0, 0];
/// Pure green, the marker colour of detections on greyscale overlays.
pub const GREEN: Rgb = [0, 255, 0];
/// White.
pub const WHITE: Rgb = [255, 255, 255];
/// Black.
pub const BLACK: Rgb = [0, 0, 0];

/// The viridis colour map at `t ∈ [0, 1]` (clamped; NaN gives the low end), by linear
/// interpolation between six anchor colours.
pub fn viridis(t: f64) -> Rgb {
    const C: [[f64; 3]; 6] = [
        [68.0, 1.0, 84.0],
        [65.0, 68.0, 135.0],
        [42.0, 120.0, 142.0],
        [34.0, 168.0, 132.0],
        [122.0, 209.0, 81.0],
        [253.0, 231.0, 37.0],
    ];
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) } * 5.0;
    let i = (t.floor() as usize).min(4);
    let f = t - i as f64;
    let mut out = [0u8; 3];
    for (k, o) in out.iter_mut().enumerate() {
        *o = (C[i][k] * (1.0 - f) + C[i + 1][k] * f).round() as u8;
    }
    out
}

/// A distinct, saturated colour for index `i` (cycles through 10 hues; never grey, never
/// [`GREEN`]).
pub fn palette(i: usize) -> Rgb {
    const P: [Rgb; 10] = [
        [255, 99, 71],
        [30, 144, 255],
        [255, 215, 0],
        [238, 130, 238],
        [0, 206, 209],
        [255, 140, 0],
        [186, 85, 211],
        [255, 20, 147],
        [135, 206, 250],
        [173, 255, 47],
    ];
    P[i % P.len()]
}

/// Grey level of `v` stretched linearly from `lo` (black) to `hi` (white), clamped.
pub fn grey(v: f64, lo: f64, hi: f64) -> Rgb {
    let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let g = (t.clamp(0.0, 1.0) * 255.0).round() as u8;
    [g, g, g]
}

/// The `p`-th percentile (0–100, nearest rank) of the finite values, `None` if there are none.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let k = ((p.clamp(0.0, 100.0) / 100.0) * (v.len() - 1) as f64).round() as usize;
    Some(v[k.min(v.len() - 1)])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn colours() {
        assert_eq!(viridis(0.0), [68, 1, 84]);
        assert_eq!(viridis(1.0), [253, 231, 37]);
        assert_eq!(viridis(f64::NAN), [68, 1, 84]);
        for i in 0..=100 {
            assert_ne!(viridis(i as f64 / 100.0), RED);
        }
        for i in 0..20 {
            let p = palette(i);
            assert!(p != GREEN && !(p[0] == p[1] && p[1] == p[2]));
        }
        assert_eq!(grey(5.0, 0.0, 10.0), [128, 128, 128]);
        assert_eq!(percentile(&[3.0, f64::NAN, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[f64::NAN], 50.0), None);
    }
}
