//! Aperture photometry with exact pixel/circle overlap areas (photutils' `exact` method), used
//! to normalise the PSF to unit flux in a 1-FWHM-diameter aperture (spec §5.1).

use ndarray::ArrayView2;

/// Area of the intersection of the disc `u² + v² ≤ r²` with `[0, x] × [0, y]`, x, y ≥ 0.
fn quadrant_area(x: f64, y: f64, r: f64) -> f64 {
    let x = x.min(r);
    let y = y.min(r);
    if x <= 0.0 || y <= 0.0 {
        return 0.0;
    }
    if x * x + y * y <= r * r {
        return x * y;
    }
    let g = |u: f64| {
        0.5 * (u * (r * r - u * u).max(0.0).sqrt() + r * r * (u / r).clamp(-1.0, 1.0).asin())
    };
    let xc = (r * r - y * y).max(0.0).sqrt();
    xc * y + g(x) - g(xc)
}

/// Signed area of the disc ∩ the rectangle spanned by the origin and (x, y).
fn signed_area(x: f64, y: f64, r: f64) -> f64 {
    x.signum() * y.signum() * quadrant_area(x.abs(), y.abs(), r)
}

/// Exact area of the intersection of a disc of radius `r` centred at the origin with the
/// rectangle `[x0, x1] × [y0, y1]` (photutils' `exact` method).
pub fn circle_rect_overlap(x0: f64, x1: f64, y0: f64, y1: f64, r: f64) -> f64 {
    signed_area(x1, y1, r) - signed_area(x0, y1, r) - signed_area(x1, y0, r)
        + signed_area(x0, y0, r)
}

/// Flux of `img` inside a circle of diameter `fwhm` centred on the array centre
/// (`(s−1)/2` per axis), with exact pixel/circle overlap areas.
pub fn aperture_flux(img: ArrayView2<'_, f64>, fwhm: f64) -> f64 {
    let (h, w) = img.dim();
    let cy = (h as f64 - 1.0) / 2.0;
    let cx = (w as f64 - 1.0) / 2.0;
    let r = fwhm / 2.0;
    let mut sum = 0.0;
    for ((i, j), &v) in img.indexed_iter() {
        let y = i as f64 - cy;
        let x = j as f64 - cx;
        if y.abs() - 0.5 > r || x.abs() - 0.5 > r {
            continue;
        }
        sum += v * circle_rect_overlap(x - 0.5, x + 0.5, y - 0.5, y + 0.5, r);
    }
    sum
}

#[cfg(test)]
mod tests {
    use std::f64::consts::PI;

    use super::*;

    #[test]
    fn overlap_full_and_quarter() {
        let r = 1.0;
        let full = circle_rect_overlap(-2.0, 2.0, -2.0, 2.0, r);
        assert!((full - PI).abs() < 1e-12);
        let q = circle_rect_overlap(0.0, 2.0, 0.0, 2.0, r);
        assert!((q - PI / 4.0).abs() < 1e-12);
        let inside = circle_rect_overlap(-0.1, 0.1, -0.2, 0.3, r);
        assert!((inside - 0.2 * 0.5).abs() < 1e-15);
    }
}
