//! Sub-pixel refinement and per-particle measures for LoG detections (spec §1.9, off by default).
//!
//! For each blob, on the raw frame (as f64, before any prescale):
//! 1. mask radius `r = params.radius` or, by default, `max(2, round(2σ))` (a disk
//!    `dy² + dx² ≤ r²`), pixels outside the frame are skipped;
//! 2. local background `b` = median of the square ring of pixels at Chebyshev distance `r+1`
//!    and `r+2` from the integer centre (inside the frame);
//! 3. weights `N = max(I − b, 0)` in the disk; trackpy-style iterated centre of mass (spec §2.5:
//!    the centre moves by one pixel on an axis whose offset exceeds 0.6, at most
//!    `max_iterations` times, the result comes from the last evaluated neighbourhood);
//! 4. measures on that neighbourhood: `mass = ΣN`, `size` = radius of gyration
//!    `sqrt(Σ(dy²+dx²)N / mass)`, `ecc` as trackpy, `signal = max N`, and `background = b`.

use super::FrameView;
use super::blob_log::Blob;

/// Parameters of [`refine_blobs`].
#[derive(Debug, Clone, PartialEq)]
pub struct RefineParams {
    /// Mask radius; `None` = `max(2, round(2σ))` per blob.
    pub radius: Option<usize>,
    /// Maximum centre moves (default 10).
    pub max_iterations: usize,
}

impl Default for RefineParams {
    fn default() -> Self {
        RefineParams {
            radius: None,
            max_iterations: 10,
        }
    }
}

/// Refined position and measures of one detection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refined {
    /// Sub-pixel row.
    pub y: f64,
    /// Sub-pixel column.
    pub x: f64,
    /// Background-subtracted integrated intensity in the mask.
    pub mass: f64,
    /// Radius of gyration.
    pub size: f64,
    /// Eccentricity (0 = circular).
    pub ecc: f64,
    /// Largest background-subtracted pixel in the mask.
    pub signal: f64,
    /// Local background level.
    pub background: f64,
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let n = v.len();
    let mid = n / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, |a, b| {
        a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal)
    });
    let m = *m;
    if n % 2 == 1 {
        m
    } else {
        let lo = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        0.5 * (lo + m)
    }
}

/// Refine a frame's blobs (one [`Refined`] per blob, same order). An empty frame, or a blob
/// whose position or σ is not finite, is a [`bridge_core::BridgeError::InvalidInput`].
pub fn refine_blobs(
    frame: FrameView<'_>,
    blobs: &[Blob],
    p: &RefineParams,
) -> bridge_core::Result<Vec<Refined>> {
    let (h, w) = frame.dim();
    if h == 0 || w == 0 {
        return Err(bridge_core::BridgeError::InvalidInput(
            format!("refine_blobs: an empty frame ({h}x{w}) has no blob to refine").into(),
        ));
    }
    if let Some(b) = blobs
        .iter()
        .find(|b| !(b.y.is_finite() && b.x.is_finite() && b.sigma.is_finite()))
    {
        return Err(bridge_core::BridgeError::InvalidInput(
            format!(
                "refine_blobs: a blob at ({}, {}) of σ {} is not finite",
                b.y, b.x, b.sigma
            )
            .into(),
        ));
    }
    Ok(refine_frame(frame, blobs, p))
}

/// [`refine_blobs`] on a frame the blobs were detected in (not empty; finite blobs).
pub(crate) fn refine_frame(frame: FrameView<'_>, blobs: &[Blob], p: &RefineParams) -> Vec<Refined> {
    let (h, w) = frame.dim();
    let img = frame.to_f64_vec();
    blobs.iter().map(|b| refine_one(&img, h, w, b, p)).collect()
}

fn refine_one(img: &[f64], h: usize, w: usize, b: &Blob, p: &RefineParams) -> Refined {
    let r = p
        .radius
        .unwrap_or_else(|| ((2.0 * b.sigma).round() as usize).max(2))
        .min(h.max(w)) as isize;
    let (hi, wi) = (h as isize, w as isize);
    let at = |y: isize, x: isize| -> Option<f64> {
        if y >= 0 && y < hi && x >= 0 && x < wi {
            Some(img[y as usize * w + x as usize])
        } else {
            None
        }
    };
    let mut cy = (b.y.round() as isize).clamp(0, hi - 1);
    let mut cx = (b.x.round() as isize).clamp(0, wi - 1);
    let background = |cy: isize, cx: isize| {
        let mut ring = Vec::new();
        for dy in -(r + 2)..=(r + 2) {
            for dx in -(r + 2)..=(r + 2) {
                if dy.abs().max(dx.abs()) > r
                    && let Some(v) = at(cy + dy, cx + dx)
                {
                    ring.push(v);
                }
            }
        }
        median(&mut ring)
    };
    let measure = |cy: isize, cx: isize, bg: f64| {
        let (mut m, mut sy, mut sx, mut rg, mut e1, mut e2, mut sig) =
            (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0f64);
        let mut centre = 0.0;
        for dy in -r..=r {
            for dx in -r..=r {
                if dy * dy + dx * dx > r * r {
                    continue;
                }
                let Some(v) = at(cy + dy, cx + dx) else {
                    continue;
                };
                let n = (v - bg).max(0.0);
                let (fy, fx) = (dy as f64, dx as f64);
                m += n;
                sy += n * fy;
                sx += n * fx;
                rg += n * (fy * fy + fx * fx);
                let th = fy.atan2(fx);
                e1 += n * (2.0 * th).cos();
                e2 += n * (2.0 * th).sin();
                sig = sig.max(n);
                if dy == 0 && dx == 0 {
                    centre = n;
                }
            }
        }
        (m, sy, sx, rg, e1, e2, sig, centre)
    };
    let mut bg = background(cy, cx);
    let mut res = measure(cy, cx, bg);
    for _ in 0..p.max_iterations {
        if res.0 <= 0.0 {
            break;
        }
        let oy = res.1 / res.0;
        let ox = res.2 / res.0;
        if oy.abs() <= 0.6 && ox.abs() <= 0.6 {
            break;
        }
        let ny = (cy
            + if oy > 0.6 {
                1
            } else if oy < -0.6 {
                -1
            } else {
                0
            })
        .clamp(0, hi - 1);
        let nx = (cx
            + if ox > 0.6 {
                1
            } else if ox < -0.6 {
                -1
            } else {
                0
            })
        .clamp(0, wi - 1);
        if (ny, nx) == (cy, cx) {
            break;
        }
        cy = ny;
        cx = nx;
        bg = background(cy, cx);
        res = measure(cy, cx, bg);
    }
    let (m, sy, sx, rg, e1, e2, sig, centre) = res;
    let (y, x, size) = if m > 0.0 {
        (cy as f64 + sy / m, cx as f64 + sx / m, (rg / m).sqrt())
    } else {
        (cy as f64, cx as f64, 0.0)
    };
    Refined {
        y,
        x,
        mass: m,
        size,
        ecc: (e1 * e1 + e2 * e2).sqrt() / (m - centre + 1e-6),
        signal: sig,
        background: bg,
    }
}
