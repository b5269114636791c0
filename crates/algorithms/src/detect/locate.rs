//! `trackpy.locate` (trackpy 0.7, Crocker–Grier feature finding), spec §2.
//!
//! Chain: optional inversion → bandpass (Gaussian lowpass with zero padding minus a boxcar with
//! edge replication computed in the input dtype) → rescale to the integer gamut (truncation) →
//! grey-dilation local maxima above a percentile of the non-zero pixels, outside the margin →
//! iterated centre-of-mass refinement on the circular mask → characterisation (mass, size, ecc,
//! signal, raw_mass) → duplicate removal within `separation` → `mass > minmass` → static error.

use bridge_core::{BridgeError, Result};

use super::FrameView;
use super::filters::{Boundary, half_kernel, kernel_radius, numpy_sum, pass_x, pass_y};

/// Parameters of [`locate`]; `LocateParams::new(diameter)` gives trackpy's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LocateParams {
    /// Feature diameter in pixels (odd).
    pub diameter: usize,
    /// Minimum integrated brightness (strict `mass > minmass`); trackpy's `None` is 0.
    pub minmass: f64,
    /// Maximum radius of gyration (`size < maxsize`).
    pub maxsize: Option<f64>,
    /// Minimum separation between features (default `diameter + 1`).
    pub separation: Option<f64>,
    /// Width of the Gaussian lowpass (default 1).
    pub noise_size: f64,
    /// Boxcar width of the background (default `diameter`, odd).
    pub smoothing_size: Option<usize>,
    /// Bandpass clipping threshold (default 1 for integers, 1/255 for floats).
    pub threshold: Option<f64>,
    /// Look for dark features on a bright background.
    pub invert: bool,
    /// Percentile of the non-zero pixels that a maximum must exceed (default 64).
    pub percentile: f64,
    /// Keep only the `topn` brightest features.
    pub topn: Option<usize>,
    /// Apply the bandpass (default true).
    pub preprocess: bool,
    /// Maximum centroid iterations (default 10).
    pub max_iterations: usize,
    /// Compute size, ecc, signal, raw_mass and ep (default true).
    pub characterize: bool,
}

impl LocateParams {
    /// trackpy's defaults for a given diameter.
    pub fn new(diameter: usize) -> Self {
        LocateParams {
            diameter,
            minmass: 0.0,
            maxsize: None,
            separation: None,
            noise_size: 1.0,
            smoothing_size: None,
            threshold: None,
            invert: false,
            percentile: 64.0,
            topn: None,
            preprocess: true,
            max_iterations: 10,
            characterize: true,
        }
    }

    /// Check every parameter.
    pub fn validate(&self) -> Result<()> {
        let bad = |n: &str, r: String| Err(BridgeError::invalid_argument(n, r));
        if self.diameter == 0 || self.diameter.is_multiple_of(2) {
            return bad(
                "diameter",
                format!("must be a positive odd integer, got {}", self.diameter),
            );
        }
        let sm = self.smoothing_size.unwrap_or(self.diameter);
        if sm.is_multiple_of(2) {
            return bad("smoothing_size", format!("must be odd, got {sm}"));
        }
        if !(self.noise_size.is_finite() && self.noise_size >= 0.0)
            || (sm as f64) <= self.noise_size
        {
            return bad(
                "noise_size",
                format!(
                    "must be non-negative and smaller than smoothing_size ({sm}), got {}",
                    self.noise_size
                ),
            );
        }
        if let Some(s) = self.separation
            && !(s.is_finite() && s >= 0.0)
        {
            return bad("separation", format!("must be non-negative, got {s}"));
        }
        if !(0.0..=100.0).contains(&self.percentile) {
            return bad(
                "percentile",
                format!("must lie in [0, 100], got {}", self.percentile),
            );
        }
        if !self.minmass.is_finite() {
            return bad("minmass", "must be finite".into());
        }
        Ok(())
    }
}

/// One located feature (spec §2.7 columns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Feature {
    /// Row of the centroid.
    pub y: f64,
    /// Column of the centroid.
    pub x: f64,
    /// Integrated brightness of the bandpassed image (original units).
    pub mass: f64,
    /// Radius of gyration.
    pub size: f64,
    /// Eccentricity (0 = circular).
    pub ecc: f64,
    /// Maximum bandpassed value in the mask (original units).
    pub signal: f64,
    /// Sum of the raw pixels in the mask.
    pub raw_mass: f64,
    /// Static localisation error (Savin & Doyle).
    pub ep: f64,
}

/// The mask offsets in raster order, as indices `0..=2r` (trackpy's `maskY`, `maskX`).
fn mask_offsets(r: usize) -> Vec<(usize, usize)> {
    let rf = r as f64;
    let mut out = Vec::new();
    for i in 0..=2 * r {
        for j in 0..=2 * r {
            let a = (i as f64 - rf) / rf;
            let b = (j as f64 - rf) / rf;
            if r == 0 || a * a + b * b <= 1.0 {
                out.push((i, j));
            }
        }
    }
    out
}

/// `uniform_filter1d` along one axis, SciPy's running mean (running sum of the window, divided
/// by the size at each output), `nearest` edges; `store` rounds each output to the input dtype.
fn boxcar_pass(
    data: &mut [f64],
    h: usize,
    w: usize,
    size: usize,
    axis: usize,
    store: impl Fn(f64) -> f64,
) {
    let s1 = size / 2;
    let fs = size as f64;
    if axis == 1 {
        let mut line = vec![0.0f64; w + size];
        for row in data.chunks_mut(w) {
            for (k, v) in line.iter_mut().enumerate() {
                *v = row[(k as isize - s1 as isize).clamp(0, w as isize - 1) as usize];
            }
            let mut tmp = 0.0f64;
            for &v in &line[..size] {
                tmp += v;
            }
            row[0] = store(tmp / fs);
            for k in 1..w {
                tmp += line[k + size - 1] - line[k - 1];
                row[k] = store(tmp / fs);
            }
        }
        return;
    }
    // axis 0: the same arithmetic for every column at once (rows as vectors)
    let src = data.to_vec();
    boxcar_cols(&src, data, h, w, size, store);
}

/// [`boxcar_pass`] along axis 0 from `src` into `data`: every column at once (rows as vectors).
fn boxcar_cols(
    src: &[f64],
    data: &mut [f64],
    h: usize,
    w: usize,
    size: usize,
    store: impl Fn(f64) -> f64,
) {
    let s1 = size / 2;
    let fs = size as f64;
    let row = |k: isize| {
        let j = (k - s1 as isize).clamp(0, h as isize - 1) as usize;
        &src[j * w..(j + 1) * w]
    };
    let mut tmp = vec![0.0f64; w];
    for k in 0..size as isize {
        for (t, &v) in tmp.iter_mut().zip(row(k)) {
            *t += v;
        }
    }
    for (o, &t) in data[..w].iter_mut().zip(&tmp) {
        *o = store(t / fs);
    }
    for k in 1..h {
        let (add, sub) = (row((k + size - 1) as isize), row(k as isize - 1));
        let out = &mut data[k * w..(k + 1) * w];
        for (((t, &a), &b), o) in tmp.iter_mut().zip(add).zip(sub).zip(out.iter_mut()) {
            *t += a - b;
            *o = store(*t / fs);
        }
    }
}

/// `v as i32 as f64` for `0 ≤ v < 2⁵²` (means of integer pixels), in a form that vectorises:
/// adding and removing 2⁵² rounds to an integer, stepped down by one where it rounded up.
#[inline]
fn trunc_small(v: f64) -> f64 {
    const TWO52: f64 = 4_503_599_627_370_496.0;
    let t = (v + TWO52) - TWO52;
    if t > v { t - 1.0 } else { t }
}

/// [`boxcar_pass`] along axis 1 for integer-valued data with `0 ≤ v < 2³²` (integer frames):
/// every partial sum of a window is an integer far below 2⁵³, hence exact, so summing each
/// window directly (vectorisable) gives the running sum's value bit for bit.
fn boxcar_rows_int(data: &mut [f64], w: usize, size: usize) {
    let s1 = size / 2;
    let fs = size as f64;
    let mut line = vec![0.0f64; w + size];
    let mut acc = vec![0.0f64; w];
    for row in data.chunks_mut(w) {
        for (k, v) in line.iter_mut().enumerate() {
            *v = row[(k as isize - s1 as isize).clamp(0, w as isize - 1) as usize];
        }
        acc.copy_from_slice(&line[..w]);
        for o in 1..size {
            for (a, &v) in acc.iter_mut().zip(&line[o..o + w]) {
                *a += v;
            }
        }
        for (r, &a) in row.iter_mut().zip(&acc) {
            *r = trunc_small(a / fs);
        }
    }
}

/// Offsets `(lo, hi)` of grey_dilation's box of `s` pixels: `−lo..=hi`, i.e. `−s/2..=s/2` for
/// odd `s`, `−(s/2−1)..=s/2` for even `s`.
fn dilation_reach(s: usize) -> (usize, usize) {
    if s % 2 == 1 {
        (s / 2, s / 2)
    } else {
        ((s / 2).saturating_sub(1), s / 2)
    }
}

/// First half of the maximum filter with zero padding over a box of `s` pixels per axis
/// (grey_dilation): the maximum along each row.
fn dilate_rows(img: &[u32], h: usize, w: usize, s: usize) -> Vec<u32> {
    let (lo, hi) = dilation_reach(s);
    let mut tmp = vec![0u32; h * w];
    let mut pad = vec![0u32; w + lo + hi];
    for y in 0..h {
        pad[lo..lo + w].copy_from_slice(&img[y * w..(y + 1) * w]);
        let out = &mut tmp[y * w..(y + 1) * w];
        out.copy_from_slice(&pad[..w]);
        for o in 1..=lo + hi {
            for (d, &v) in out.iter_mut().zip(&pad[o..o + w]) {
                *d = (*d).max(v);
            }
        }
    }
    tmp
}

/// Pixels outside the margin equal to the grey dilation (box of `s`, zero padding) of `img` and
/// above `thr`, in raster order; `rows` is [`dilate_rows`] of `img`. The column maxima are
/// formed one output row at a time, only for the rows inside the margin.
#[allow(clippy::too_many_arguments)]
fn local_maxima(
    img: &[u32],
    rows: &[u32],
    h: usize,
    w: usize,
    s: usize,
    margin: usize,
    thr: f64,
) -> Vec<(usize, usize)> {
    let (lo, hi) = dilation_reach(s);
    let mut maxima = Vec::new();
    let mut dst = vec![0u32; w];
    for y in margin..h - margin {
        let a = y.saturating_sub(lo);
        let b = (y + hi).min(h - 1);
        dst.copy_from_slice(&rows[a * w..(a + 1) * w]);
        for yy in a + 1..=b {
            for (d, &v) in dst.iter_mut().zip(&rows[yy * w..(yy + 1) * w]) {
                *d = (*d).max(v);
            }
        }
        let row = &img[y * w..(y + 1) * w];
        for x in margin..w - margin {
            let v = row[x];
            if v == dst[x] && f64::from(v) > thr {
                maxima.push((y, x));
            }
        }
    }
    maxima
}

/// NumPy `percentile(img[img != 0], q)` (linear interpolation) from a histogram; `None` when
/// every pixel is 0.
fn percentile_nonzero(img: &[u32], q: f64) -> Option<f64> {
    let max = img.iter().copied().max().unwrap_or(0) as usize;
    let mut hist = vec![0usize; max + 1];
    for &v in img {
        hist[v as usize] += 1;
    }
    let n: usize = hist[1..].iter().sum();
    if n == 0 {
        return None;
    }
    let vi = (n - 1) as f64 * (q / 100.0);
    let prev = vi.floor();
    let gamma = vi - prev;
    let pi = (prev as usize).min(n - 1);
    let ni = (pi + 1).min(n - 1);
    // value of the k-th (0-based) non-zero order statistic
    let kth = |k: usize| {
        let mut acc = 0usize;
        for (v, &c) in hist.iter().enumerate().skip(1) {
            acc += c;
            if acc > k {
                return v as f64;
            }
        }
        max as f64
    };
    let (a, b) = (kth(pi), kth(ni));
    let diff = b - a;
    Some(if gamma >= 0.5 {
        b - diff * (1.0 - gamma)
    } else {
        a + diff * gamma
    })
}

/// trackpy's lowpass: its own kernel `exp(t²/(−2σ²)) / Σ`, zero padding, f64.
fn lowpass(raw: &[f64], h: usize, w: usize, sig: f64) -> Vec<f64> {
    let mut low = raw.to_vec();
    if sig > 0.0 {
        let r = kernel_radius(sig);
        let ri = r as isize;
        let phi: Vec<f64> = (-ri..=ri)
            .map(|t| ((t * t) as f64 / (-2.0 * sig * sig)).exp())
            .collect();
        let sum = numpy_sum(&phi);
        let k: Vec<f64> = phi.iter().map(|v| v / sum).collect();
        let half = half_kernel(&k);
        let mut tmp = vec![0.0f64; h * w];
        pass_y(&low, h, w, &[&half], Boundary::Constant, &mut [&mut tmp]);
        pass_x(&tmp, h, w, &half, Boundary::Constant, &mut low);
    }
    low
}

/// trackpy's background: a boxcar of width `sm` computed in the input dtype.
fn background(raw: &[f64], h: usize, w: usize, sm: usize, is_int: bool, is_f32: bool) -> Vec<f64> {
    if sm <= 1 {
        return raw.to_vec();
    }
    let mut bg = vec![0.0f64; raw.len()];
    if is_int {
        // means of u8/u16 pixels fit i32; truncation toward zero like NumPy's cast
        boxcar_cols(raw, &mut bg, h, w, sm, trunc_small);
    } else if is_f32 {
        boxcar_cols(raw, &mut bg, h, w, sm, |v| f64::from(v as f32));
    } else {
        boxcar_cols(raw, &mut bg, h, w, sm, |v| v);
    }
    if is_int && sm <= 32 {
        boxcar_rows_int(&mut bg, w, sm);
    } else if is_int {
        boxcar_pass(&mut bg, h, w, sm, 1, |v| v as i32 as f64);
    } else if is_f32 {
        boxcar_pass(&mut bg, h, w, sm, 1, |v| f64::from(v as f32));
    } else {
        boxcar_pass(&mut bg, h, w, sm, 1, |v| v);
    }
    bg
}

struct Prepared {
    raw: Vec<f64>,
    img: Vec<u32>,
    scale: f64,
}

fn prepare(frame: &FrameView<'_>, p: &LocateParams) -> Prepared {
    let (h, w) = frame.dim();
    let (is_int, int_max) = match frame {
        FrameView::U8(_) => (true, 255.0),
        FrameView::U16(_) => (true, 65535.0),
        _ => (false, 255.0),
    };
    let is_f32 = matches!(frame, FrameView::F32(_));
    let mut raw = frame.to_f64_vec();
    if p.invert {
        if is_int {
            for v in &mut raw {
                *v = int_max - *v;
            }
        } else if is_f32 {
            for v in &mut raw {
                *v = f64::from(1.0f32 - *v as f32);
            }
        } else {
            for v in &mut raw {
                *v = 1.0 - *v;
            }
        }
    }
    if !p.preprocess && is_int {
        let img = raw.iter().map(|&v| v as u32).collect();
        return Prepared {
            raw,
            img,
            scale: 1.0,
        };
    }
    let bp = if p.preprocess {
        // lowpass and background are independent: compute them on two workers
        let (mut low, bg) = rayon::join(
            || lowpass(&raw, h, w, p.noise_size),
            || {
                background(
                    &raw,
                    h,
                    w,
                    p.smoothing_size.unwrap_or(p.diameter),
                    is_int,
                    is_f32,
                )
            },
        );
        let thr = p
            .threshold
            .unwrap_or(if is_int { 1.0 } else { 1.0 / 255.0 });
        for (l, b) in low.iter_mut().zip(&bg) {
            let v = *l - b;
            *l = if v >= thr { v } else { 0.0 };
        }
        low
    } else {
        raw.clone()
    };
    // the maximum is exact whatever the grouping: eight independent lanes, then combined
    let mut lanes = [f64::NEG_INFINITY; 8];
    let chunks = bp.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = l.max(v);
        }
    }
    let max = lanes
        .iter()
        .chain(tail)
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let scale = if max > 0.0 && max.is_finite() {
        int_max / max
    } else {
        1.0
    };
    let img = bp
        .iter()
        .map(|&v| (scale * v.max(0.0)).min(int_max) as i32 as u32)
        .collect();
    Prepared { raw, img, scale }
}

/// Iterated centre of mass + characterisation, following trackpy's numba 2-D engine.
#[allow(clippy::too_many_arguments)]
fn refine_one(
    img: &[u32],
    raw: &[f64],
    h: usize,
    w: usize,
    r: usize,
    mask: &[(usize, usize)],
    geo: &MaskGeometry,
    c0: (usize, usize),
    max_iterations: usize,
) -> [f64; 7] {
    let rf = r as f64;
    let com = |sy: usize, sx: usize| {
        let (mut cy, mut cx, mut m) = (0.0f64, 0.0f64, 0.0f64);
        for &(i, j) in mask {
            let px = f64::from(img[(sy + i) * w + sx + j]);
            cy += px * i as f64;
            cx += px * j as f64;
            m += px;
        }
        (cy, cx, m)
    };
    let (mut coord_y, mut coord_x) = c0;
    let mut sy = coord_y - r;
    let mut sx = coord_x - r;
    let (cy, cx, m) = com(sy, sx);
    let (mut cmy, mut cmx) = (cy / m, cx / m);
    let mut pos = (cmy - rf + coord_y as f64, cmx - rf + coord_x as f64);
    let mut zero = m == 0.0;
    for _ in 0..max_iterations {
        if zero {
            break;
        }
        let oy = cmy - rf;
        let ox = cmx - rf;
        if oy.abs() < 0.01 && ox.abs() < 0.01 {
            break;
        }
        if !(oy.abs() > 0.6 || ox.abs() > 0.6) {
            break;
        }
        let mut ny = coord_y as isize;
        let mut nx = coord_x as isize;
        if oy > 0.6 {
            ny += 1;
        } else if oy < -0.6 {
            ny -= 1;
        }
        if ox > 0.6 {
            nx += 1;
        } else if ox < -0.6 {
            nx -= 1;
        }
        ny = ny.clamp(r as isize, (h - r - 1) as isize);
        nx = nx.clamp(r as isize, (w - r - 1) as isize);
        coord_y = ny as usize;
        coord_x = nx as usize;
        sy = coord_y - r;
        sx = coord_x - r;
        let (cy, cx, m) = com(sy, sx);
        zero = m == 0.0;
        cmy = cy / m;
        cmx = cx / m;
        pos = (cmy - rf + coord_y as f64, cmx - rf + coord_x as f64);
    }
    if zero {
        pos = (coord_y as f64, coord_x as f64);
    }
    let (mut mass, mut rg, mut e1, mut e2, mut raw_mass, mut signal) =
        (0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (k, &(i, j)) in mask.iter().enumerate() {
        let idx = (sy + i) * w + sx + j;
        let px = f64::from(img[idx]);
        mass += px;
        rg += geo.r2[k] * px;
        e1 += geo.cos2[k] * px;
        e2 += geo.sin2[k] * px;
        raw_mass += raw[idx];
        if px > signal {
            signal = px;
        }
    }
    let centre = f64::from(img[(sy + r) * w + sx + r]);
    let size = if mass > 0.0 { (rg / mass).sqrt() } else { 0.0 };
    let ecc = (e1 * e1 + e2 * e2).sqrt() / (mass - centre + 1e-6);
    [pos.0, pos.1, mass, size, ecc, signal, raw_mass]
}

struct MaskGeometry {
    r2: Vec<f64>,
    cos2: Vec<f64>,
    sin2: Vec<f64>,
}

fn mask_geometry(r: usize, mask: &[(usize, usize)]) -> MaskGeometry {
    let ri = r as isize;
    let mut g = MaskGeometry {
        r2: vec![],
        cos2: vec![],
        sin2: vec![],
    };
    for &(i, j) in mask {
        let dy = i as isize - ri;
        let dx = j as isize - ri;
        g.r2.push((dy * dy + dx * dx) as f64);
        let th = (dy as f64).atan2(dx as f64);
        g.cos2.push((2.0 * th).cos());
        g.sin2.push((2.0 * th).sin());
    }
    g
}

/// `trackpy.locate` on one 2-D frame. Rows follow the raster order of the maxima (or ascending
/// mass with `topn`).
pub fn locate(frame: FrameView<'_>, p: &LocateParams) -> Result<Vec<Feature>> {
    p.validate()?;
    frame.validate()?;
    let (h, w) = frame.dim();
    let d = p.diameter;
    let r = d / 2;
    let sep = p.separation.unwrap_or((d + 1) as f64);
    let sm = p.smoothing_size.unwrap_or(d);
    let margin = r
        .max(((sep / 2.0).floor() as isize - 1).max(0) as usize)
        .max(sm / 2);
    if h <= 2 * margin || w <= 2 * margin || h < d || w < d {
        return Ok(Vec::new());
    }
    let prep = prepare(&frame, p);
    let img = &prep.img;

    let mask_v = mask_offsets(r);
    let mask = mask_v.as_slice();
    // the background noise only needs the prepared image: measure it on a second worker
    let (noise, feats) = rayon::join(
        || {
            p.characterize
                .then(|| measure_noise(img, &prep.raw, h, w, r, mask))
        },
        || {
            // local maxima
            let box_size = (2.0 * sep / std::f64::consts::SQRT_2) as usize;
            let (thr, rows) = rayon::join(
                || percentile_nonzero(img, p.percentile),
                || dilate_rows(img, h, w, box_size.max(1)),
            );
            let Some(thr) = thr else {
                return Vec::new();
            };
            let maxima = local_maxima(img, &rows, h, w, box_size.max(1), margin, thr);

            // refinement
            let geo = mask_geometry(r, mask);
            let mut feats: Vec<[f64; 7]> = maxima
                .iter()
                .map(|&c| refine_one(img, &prep.raw, h, w, r, mask, &geo, c, p.max_iterations))
                .collect();

            // duplicates: all pairs with ‖Δ/sep‖ ≤ 1 − 1e-7, decided at once
            if sep > 0.0 && feats.len() > 1 {
                let pos: Vec<(f64, f64)> = feats.iter().map(|f| (f[0] / sep, f[1] / sep)).collect();
                let pairs = super::blob_log::pairs_within(&pos, 1.0 - 1e-7);
                let mut drop = vec![false; feats.len()];
                for (i, j) in pairs {
                    let (mi, mj) = (feats[i][2], feats[j][2]);
                    let k = if mi > mj {
                        j
                    } else if mi < mj {
                        i
                    } else if pos[i].0 + pos[i].1 > pos[j].0 + pos[j].1 {
                        j
                    } else {
                        i
                    };
                    drop[k] = true;
                }
                feats = feats
                    .into_iter()
                    .zip(drop)
                    .filter(|(_, d)| !d)
                    .map(|(f, _)| f)
                    .collect();
            }
            feats
        },
    );

    let inv = 1.0 / prep.scale;
    let mut out: Vec<Feature> = feats
        .iter()
        .map(|f| Feature {
            y: f[0],
            x: f[1],
            mass: f[2] * inv,
            size: f[3],
            ecc: f[4],
            signal: f[5] * inv,
            raw_mass: f[6],
            ep: f64::NAN,
        })
        .filter(|f| f.mass > p.minmass)
        .filter(|f| p.maxsize.is_none_or(|m| f.size < m))
        .collect();
    if let Some(n) = p.topn
        && out.len() > n
    {
        out.sort_by(|a, b| {
            a.mass
                .partial_cmp(&b.mass)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        out.drain(..out.len() - n);
    }

    if p.characterize && !out.is_empty() {
        let (black, noise) = noise.unwrap_or((f64::NAN, f64::NAN));
        let npx = mask.len() as f64;
        let moment = mask
            .iter()
            .map(|&(i, _)| ((i as f64) - r as f64).powi(2))
            .sum::<f64>()
            .sqrt();
        for f in &mut out {
            let m = f.raw_mass - npx * black;
            f.ep = noise / m * p.noise_size * moment;
        }
    }
    Ok(out)
}

/// Mean and population std of the raw pixels not covered by a dilation of `img != 0` with the
/// mask (spec §2.7).
fn measure_noise(
    img: &[u32],
    raw: &[f64],
    h: usize,
    w: usize,
    r: usize,
    mask: &[(usize, usize)],
) -> (f64, f64) {
    // half-width of the mask per row offset
    let mut hw = vec![-1isize; 2 * r + 1];
    for &(i, j) in mask {
        hw[i] = hw[i].max(j as isize - r as isize);
    }
    // non-zero pixels, each row padded by r zeros on both sides
    let pw = w + 2 * r;
    let mut nzp = vec![0u8; h * pw];
    for (row, dst) in img.chunks_exact(w).zip(nzp.chunks_exact_mut(pw)) {
        for (d, &v) in dst[r..r + w].iter_mut().zip(row) {
            *d = u8::from(v != 0);
        }
    }
    // horizontal dilations: near[L][y][x] ⇔ a non-zero pixel of row y lies within |Δx| ≤ L
    // (grown one step at a time, kept for the half-widths the mask uses)
    let mut near: Vec<Vec<u8>> = vec![Vec::new(); r + 1];
    let mut cur = nzp.clone();
    for l in 0..=r {
        if l > 0 {
            for (c, src) in cur.chunks_exact_mut(pw).zip(nzp.chunks_exact(pw)) {
                let (left, right) = (&src[r - l..r - l + w], &src[r + l..r + l + w]);
                for ((d, &a), &b) in c[r..r + w].iter_mut().zip(left).zip(right) {
                    *d |= a | b;
                }
            }
        }
        if hw.contains(&(l as isize)) {
            let mut v = vec![0u8; h * w];
            for (d, c) in v.chunks_exact_mut(w).zip(cur.chunks_exact(pw)) {
                d.copy_from_slice(&c[r..r + w]);
            }
            near[l] = v;
        }
    }
    // covered(y, x) ⇔ some row offset dy has a non-zero pixel within its half-width
    let mut covered = vec![0u8; h * w];
    for y in 0..h {
        let dst = &mut covered[y * w..(y + 1) * w];
        for (i, &hwi) in hw.iter().enumerate() {
            let yy = y as isize + i as isize - r as isize;
            if hwi < 0 || yy < 0 || yy >= h as isize {
                continue;
            }
            let src = &near[hwi as usize][yy as usize * w..(yy as usize + 1) * w];
            for (c, &s) in dst.iter_mut().zip(src) {
                *c |= s;
            }
        }
    }
    let (mut n, mut sum) = (0usize, 0.0f64);
    for (c, &v) in covered.iter().zip(raw) {
        if *c == 0 {
            n += 1;
            sum += v;
        }
    }
    match n {
        0 => (f64::NAN, f64::NAN),
        1 => (sum, f64::NAN),
        _ => {
            let mean = sum / n as f64;
            let var = covered
                .iter()
                .zip(raw)
                .filter(|(c, _)| **c == 0)
                .map(|(_, v)| (v - mean) * (v - mean))
                .sum::<f64>()
                / n as f64;
            (mean, var.sqrt())
        }
    }
}
