//! Candidate features: grey-dilation local maxima (box of `2·separation/√2`, zero padding)
//! above a percentile of the non-zero pixels, outside the margin.

/// Offsets `(lo, hi)` of grey_dilation's box of `s` pixels: `−lo..=hi`, i.e. `−s/2..=s/2` for
/// odd `s`, `−(s/2−1)..=s/2` for even `s`.
pub(super) fn dilation_reach(s: usize) -> (usize, usize) {
    if s % 2 == 1 {
        (s / 2, s / 2)
    } else {
        ((s / 2).saturating_sub(1), s / 2)
    }
}

/// First half of the maximum filter with zero padding over a box of `s` pixels per axis
/// (grey_dilation): the maximum along each row.
pub(super) fn dilate_rows(img: &[u32], h: usize, w: usize, s: usize) -> Vec<u32> {
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
pub(super) fn local_maxima(
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
pub(super) fn percentile_nonzero(img: &[u32], q: f64) -> Option<f64> {
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
