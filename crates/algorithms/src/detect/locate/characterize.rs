//! Refinement and characterisation of each candidate on the circular mask: iterated centre of
//! mass, then mass, size, eccentricity, signal and raw mass, and the background noise the static
//! error `ep` needs (the columns of spec §2.7).

/// The mask offsets in raster order, as indices `0..=2r` (trackpy's `maskY`, `maskX`).
pub(super) fn mask_offsets(r: usize) -> Vec<(usize, usize)> {
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

/// Iterated centre of mass + characterisation, following trackpy's numba 2-D engine.
#[allow(clippy::too_many_arguments)]
pub(super) fn refine_one(
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

/// Per mask pixel: squared radius and the cosine and sine of twice its angle.
pub(super) struct MaskGeometry {
    pub(super) r2: Vec<f64>,
    pub(super) cos2: Vec<f64>,
    pub(super) sin2: Vec<f64>,
}

/// [`MaskGeometry`] of the mask of radius `r`.
pub(super) fn mask_geometry(r: usize, mask: &[(usize, usize)]) -> MaskGeometry {
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

/// Mean and population std of the raw pixels not covered by a dilation of `img != 0` with the
/// mask (spec §2.7). The sums run per row, then over the rows (as on the devices).
pub(super) fn measure_noise(
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
    // sums per row (each from zero, in column order), then over the rows in row order: the
    // order the device back ends use too, so that both give the same bits
    let (mut n, mut sum) = (0usize, 0.0f64);
    for (crow, rrow) in covered.chunks_exact(w).zip(raw.chunks_exact(w)) {
        let mut rs = 0.0f64;
        for (c, &v) in crow.iter().zip(rrow) {
            if *c == 0 {
                n += 1;
                rs += v;
            }
        }
        sum += rs;
    }
    match n {
        0 => (f64::NAN, f64::NAN),
        1 => (sum, f64::NAN),
        _ => {
            let mean = sum / n as f64;
            let mut sq = 0.0f64;
            for (crow, rrow) in covered.chunks_exact(w).zip(raw.chunks_exact(w)) {
                let mut rs = 0.0f64;
                for (c, &v) in crow.iter().zip(rrow) {
                    if *c == 0 {
                        rs += (v - mean) * (v - mean);
                    }
                }
                sq += rs;
            }
            let var = sq / n as f64;
            (mean, var.sqrt())
        }
    }
}
