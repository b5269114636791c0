//! `arraybridge paco`: PACO exoplanet detection from FITS files.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use algorithms::paco::{
    Center, FluxOptions, PacoMaps, PacoParams, PsfNorm, Rounding, Strategy, SubPixel, Variant,
    backend_for, calibrated_snr, paco, unbiased_flux,
};
use bridge_core::{BridgeError, Device, Result};
use ndarray::{Array1, Array2, Array3, ArrayD, Ix2, Ix3};

use arraybridge::io::fits;

/// Arguments of `arraybridge paco`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// ADI cube (T, H, W) in FITS.
    #[arg(long)]
    pub cube: PathBuf,
    /// Derotation angles in degrees, (T,) or (T, 1), in FITS.
    #[arg(long)]
    pub angles: PathBuf,
    /// Off-axis PSF (odd, centred) in FITS.
    #[arg(long)]
    pub psf: PathBuf,
    /// Output directory (created if needed).
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// Patch radius in pixels (psf_rad); 4 gives 49-pixel patches.
    #[arg(long, default_value_t = 4)]
    pub radius: usize,
    /// Covariance formulas: `paper` or `vip` (VIP 2.1.1 quirks).
    #[arg(long, default_value = "paper")]
    pub mode: String,
    /// Sub-pixel PSF templates (table of exact FFT shifts, q = 32, bilinear blend).
    #[arg(long)]
    pub subpixel: bool,
    /// Sub-pixel templates by VIP's exact FFT shift for every (φ0, frame) (slow; implies --subpixel).
    #[arg(long)]
    pub exact_subpixel: bool,
    /// Round trajectory positions to the nearest pixel instead of truncating (VIP truncates).
    #[arg(long)]
    pub nearest: bool,
    /// PSF FWHM in pixels (default: fitted with an Airy model).
    #[arg(long)]
    pub fwhm: Option<f64>,
    /// Divide the PSF by exactly this factor instead of the aperture flux.
    #[arg(long, conflicts_with = "fwhm")]
    pub psf_norm_factor: Option<f64>,
    /// Star centre `y,x` (default N/2 for even N, (N−1)/2 for odd N).
    #[arg(long, value_parser = parse_center, allow_hyphen_values = true)]
    pub center: Option<(f64, f64)>,
    /// Reproduce VIP's half-pixel centre shift for odd frame sizes (compatibility only).
    #[arg(long, conflicts_with = "center")]
    pub vip_odd_center: bool,
    /// Unbiased flux (paper Algorithm 3) for the N best candidates.
    #[arg(long, value_name = "N")]
    pub flux: Option<usize>,
    /// Memory strategy: `fast` (precomputed matched filter) or `full` (on demand, bounded).
    #[arg(long, default_value = "fast")]
    pub strategy: String,
    /// Upper bound of one statistics band, MiB (bands split further on allocation failure).
    #[arg(long, default_value_t = 256)]
    pub tile_mb: usize,
    /// Also write `snr_calibrated.fits`: S/N divided by a robust per-annulus spread (1.4826·MAD in
    /// 1-px annuli, excluding 2 FWHM around the listed candidates above S/N 5).
    #[arg(long)]
    pub calibrate: bool,
    /// Number of candidates to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Device: cpu, opencl:N, cuda:N or auto.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn parse_center(s: &str) -> std::result::Result<(f64, f64), String> {
    let mut it = s.split(',').map(|p| p.trim().parse::<f64>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(y)), Some(Ok(x)), None) if y.is_finite() && x.is_finite() => Ok((y, x)),
        _ => Err(format!("expected y,x (two numbers), got {s:?}")),
    }
}

/// One detection candidate.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Candidate {
    /// Row.
    pub y: usize,
    /// Column.
    pub x: usize,
    /// Distance from the star in pixels.
    pub separation_px: f64,
    /// Angle counter-clockwise from +x, degrees in [0, 360).
    pub angle_deg: f64,
    /// S/N.
    pub snr: f64,
    /// b/a.
    pub flux: f64,
    /// Unbiased flux (with --flux).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unbiased_flux: Option<f64>,
    /// Its standard deviation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unbiased_flux_err: Option<f64>,
}

fn squeeze(a: ArrayD<f64>) -> ArrayD<f64> {
    let shape: Vec<usize> = a.shape().iter().copied().filter(|&n| n != 1).collect();
    if shape.len() == a.ndim() {
        return a;
    }
    let v: Vec<f64> = a.iter().copied().collect();
    ArrayD::from_shape_vec(shape, v).unwrap_or(a)
}

fn load(path: &Path, what: &str) -> Result<ArrayD<f64>> {
    fits::read_image(path).map_err(|e| match e {
        BridgeError::InvalidInput(m) => BridgeError::InvalidInput(format!("{what}: {m}")),
        other => other,
    })
}

/// Run `arraybridge paco`.
pub fn run(args: Args) -> Result<()> {
    let t0 = Instant::now();
    let device = match args.device.trim().to_ascii_lowercase().as_str() {
        "auto" => Device::Cpu,
        s => s.parse::<Device>()?,
    };
    backend_for(device)?;
    let variant = match args.mode.as_str() {
        "paper" => Variant::Paper,
        "vip" => Variant::Vip,
        m => {
            return Err(BridgeError::invalid_argument(
                "--mode",
                format!("{m:?}: expected paper or vip"),
            ));
        }
    };
    eprintln!("paco: reading {}", args.cube.display());
    let cube = load(&args.cube, "cube")?;
    let cube: Array3<f64> = if cube.ndim() == 3 {
        cube.into_dimensionality::<Ix3>()
            .map_err(|e| BridgeError::InvalidInput(e.to_string()))?
    } else {
        return Err(BridgeError::shape_mismatch(
            "a 3-D cube (T, H, W)",
            format!("{:?}", cube.shape()),
            "--cube",
        ));
    };
    let angles = squeeze(load(&args.angles, "angles")?);
    if angles.ndim() > 1 {
        return Err(BridgeError::shape_mismatch(
            "angles of shape (T,) or (T, 1)",
            format!("{:?}", angles.shape()),
            "--angles",
        ));
    }
    let angles: Array1<f64> = angles.iter().copied().collect();
    let psf = squeeze(load(&args.psf, "psf")?);
    let psf: Array2<f64> = match psf.ndim() {
        2 => psf
            .into_dimensionality::<Ix2>()
            .map_err(|e| BridgeError::InvalidInput(format!("psf: {e}")))?,
        // A cube of PSFs: their per-pixel median, as VIP does.
        3 => {
            let (n, ph, pw) = (psf.shape()[0], psf.shape()[1], psf.shape()[2]);
            eprintln!("paco: the PSF file holds {n} PSFs; using their per-pixel median");
            Array2::from_shape_fn((ph, pw), |(y, x)| {
                let mut v: Vec<f64> = (0..n)
                    .map(|i| psf[[i, y, x]])
                    .filter(|v| !v.is_nan())
                    .collect();
                v.sort_by(f64::total_cmp);
                match v.len() {
                    0 => f64::NAN,
                    m if m % 2 == 1 => v[m / 2],
                    m => 0.5 * (v[m / 2 - 1] + v[m / 2]),
                }
            })
        }
        d => {
            return Err(BridgeError::shape_mismatch(
                "a 2-D PSF image (or a cube of PSFs)",
                format!("{d}-D"),
                "--psf",
            ));
        }
    };
    let (t, h, w) = cube.dim();
    if angles.len() != t {
        return Err(BridgeError::shape_mismatch(
            format!("{t} angles (one per frame of the cube)"),
            format!("{} angles", angles.len()),
            "--angles",
        ));
    }
    let (ph, pw) = psf.dim();
    if ph > h || pw > w {
        return Err(BridgeError::InvalidInput(format!(
            "the PSF ({ph}×{pw}) is larger than the frames ({h}×{w})"
        )));
    }
    if !cube.iter().any(|v| v.is_finite()) {
        return Err(BridgeError::InvalidInput(
            "the cube contains only NaN/inf values".into(),
        ));
    }
    let params = PacoParams {
        psf_rad: args.radius,
        variant,
        rounding: if args.nearest {
            Rounding::Nearest
        } else {
            Rounding::Trunc
        },
        subpixel: if args.exact_subpixel {
            SubPixel::VipFft
        } else if args.subpixel {
            SubPixel::Table { q: 32 }
        } else {
            SubPixel::Off
        },
        psf_norm: match (args.psf_norm_factor, args.fwhm) {
            (Some(f), _) => PsfNorm::Factor(f),
            (None, Some(f)) => PsfNorm::Fwhm(f),
            (None, None) => PsfNorm::FitAiry,
        },
        center: match (args.center, args.vip_odd_center) {
            (Some((y, x)), _) => Center::At(y, x),
            (None, true) => Center::VipOdd,
            (None, false) => Center::Auto,
        },
        strategy: match args.strategy.as_str() {
            "fast" => Strategy::Fast,
            "full" => Strategy::Full,
            s => {
                return Err(BridgeError::invalid_argument(
                    "--strategy",
                    format!("{s:?}: expected fast or full"),
                ));
            }
        },
        max_tile_bytes: args
            .tile_mb
            .checked_mul(1 << 20)
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                BridgeError::invalid_argument("--tile-mb", "must be a positive number of MiB")
            })?,
        device,
        ..Default::default()
    };
    eprintln!(
        "paco: {t} frames of {h}×{w}, radius {}, mode {}, sub-pixel {:?}, device {device}",
        args.radius, args.mode, params.subpixel
    );
    let t1 = Instant::now();
    let maps = paco(cube.view(), angles.view(), psf.view(), &params)?;
    eprintln!(
        "paco: maps in {:.3} s (PSF divided by {:.6}{})",
        t1.elapsed().as_secs_f64(),
        maps.psf_norm_factor,
        maps.fwhm
            .map(|f| format!(", FWHM {f:.4} px"))
            .unwrap_or_default()
    );
    let (cy, cx) = match params.center {
        Center::At(y, x) => (y, x),
        _ => ((h / 2) as f64, (w / 2) as f64),
    };
    let mut cands = candidates(&maps, args.top, cy, cx);
    if let Some(n) = args.flux {
        let n = n.min(cands.len());
        eprintln!("paco: unbiased flux for {n} candidate(s)");
        let pos: Vec<(f64, f64)> = cands[..n]
            .iter()
            .map(|c| (c.y as f64, c.x as f64))
            .collect();
        let est = unbiased_flux(
            cube.view(),
            angles.view(),
            psf.view(),
            &params,
            &pos,
            FluxOptions::default(),
        )?;
        for (c, e) in cands.iter_mut().zip(est) {
            c.unbiased_flux = Some(e.flux);
            c.unbiased_flux_err = Some(e.std);
        }
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| BridgeError::io(args.out.display().to_string(), e))?;
    for (name, m) in [
        ("snr", &maps.snr),
        ("flux", &maps.flux),
        ("a", &maps.a),
        ("b", &maps.b),
    ] {
        fits::write_image(args.out.join(format!("{name}.fits")), &m.clone().into_dyn())?;
    }
    if args.calibrate {
        let strong: Vec<(usize, usize)> = cands
            .iter()
            .filter(|c| c.snr >= 5.0)
            .map(|c| (c.y, c.x))
            .collect();
        let radius = 2.0 * maps.fwhm.unwrap_or(4.0);
        let cal = calibrated_snr(&maps.snr, (cy, cx), &strong, radius);
        fits::write_image(args.out.join("snr_calibrated.fits"), &cal.into_dyn())?;
    }
    write_csv(
        &args.out.join("candidates.csv"),
        &cands,
        args.flux.is_some(),
    )?;
    write_png(&args.out.join("snr.png"), &maps.snr, &cands)?;
    eprintln!(
        "paco: wrote {} in {:.3} s total",
        args.out.display(),
        t0.elapsed().as_secs_f64()
    );
    if args.json {
        let v = serde_json::json!({
            "frames": t, "height": h, "width": w, "mode": args.mode,
            "psf_norm_factor": maps.psf_norm_factor, "fwhm": maps.fwhm,
            "candidates": cands,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v)
                .map_err(|e| BridgeError::InvalidInput(e.to_string()))?
        );
    } else {
        print_table(&cands, args.flux.is_some());
    }
    Ok(())
}

/// Local maxima of the S/N map (strict maximum over a 5×5 window), best first.
fn candidates(maps: &PacoMaps, top: usize, cy: f64, cx: f64) -> Vec<Candidate> {
    let snr = &maps.snr;
    let (h, w) = snr.dim();
    let mut out = Vec::new();
    for y in 0..h {
        for x in 0..w {
            let v = snr[[y, x]];
            if !v.is_finite() {
                continue;
            }
            let mut is_max = true;
            'win: for yy in y.saturating_sub(2)..(y + 3).min(h) {
                for xx in x.saturating_sub(2)..(x + 3).min(w) {
                    if (yy, xx) == (y, x) {
                        continue;
                    }
                    let u = snr[[yy, xx]];
                    if u > v || (u == v && (yy, xx) < (y, x)) {
                        is_max = false;
                        break 'win;
                    }
                }
            }
            if is_max {
                let (dy, dx) = (y as f64 - cy, x as f64 - cx);
                out.push(Candidate {
                    y,
                    x,
                    separation_px: (dy * dy + dx * dx).sqrt(),
                    angle_deg: dy.atan2(dx).to_degrees().rem_euclid(360.0),
                    snr: v,
                    flux: maps.flux[[y, x]],
                    unbiased_flux: None,
                    unbiased_flux_err: None,
                });
            }
        }
    }
    out.sort_by(|a, b| b.snr.total_cmp(&a.snr));
    out.truncate(top);
    out
}

fn write_csv(path: &Path, cands: &[Candidate], with_flux: bool) -> Result<()> {
    let io = |e| BridgeError::io(path.display().to_string(), e);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let mut head = "y,x,separation_px,angle_deg,snr,flux".to_string();
    if with_flux {
        head.push_str(",unbiased_flux,unbiased_flux_err");
    }
    writeln!(f, "{head}").map_err(io)?;
    for c in cands {
        write!(
            f,
            "{},{},{:.4},{:.4},{:.6},{:.6}",
            c.y, c.x, c.separation_px, c.angle_deg, c.snr, c.flux
        )
        .map_err(io)?;
        if with_flux {
            let g = |v: Option<f64>| v.map(|v| format!("{v:.6}")).unwrap_or_default();
            write!(f, ",{},{}", g(c.unbiased_flux), g(c.unbiased_flux_err)).map_err(io)?;
        }
        writeln!(f).map_err(io)?;
    }
    f.flush().map_err(io)
}

fn print_table(cands: &[Candidate], with_flux: bool) {
    print!(
        "{:>4} {:>5} {:>5} {:>9} {:>9} {:>9} {:>11}",
        "rank", "y", "x", "sep_px", "angle", "S/N", "flux"
    );
    if with_flux {
        print!(" {:>14} {:>10}", "unbiased_flux", "error");
    }
    println!();
    for (i, c) in cands.iter().enumerate() {
        print!(
            "{:>4} {:>5} {:>5} {:>9.3} {:>9.2} {:>9.3} {:>11.3}",
            i + 1,
            c.y,
            c.x,
            c.separation_px,
            c.angle_deg,
            c.snr,
            c.flux
        );
        if let (Some(f), Some(e)) = (c.unbiased_flux, c.unbiased_flux_err) {
            print!(" {f:>14.3} {e:>10.3}");
        }
        println!();
    }
}

/// Viridis-like colour map (anchor points, linear interpolation).
fn colour(t: f64) -> [u8; 3] {
    const C: [[f64; 3]; 6] = [
        [68.0, 1.0, 84.0],
        [65.0, 68.0, 135.0],
        [42.0, 120.0, 142.0],
        [34.0, 168.0, 132.0],
        [122.0, 209.0, 81.0],
        [253.0, 231.0, 37.0],
    ];
    let t = t.clamp(0.0, 1.0) * 5.0;
    let i = (t.floor() as usize).min(4);
    let f = t - i as f64;
    let mut out = [0u8; 3];
    for (k, o) in out.iter_mut().enumerate() {
        *o = (C[i][k] * (1.0 - f) + C[i + 1][k] * f).round() as u8;
    }
    out
}

/// 3×5 bitmap glyphs for the colour-bar labels.
fn glyph(c: char) -> [u8; 5] {
    match c {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 1, 1],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        '-' => [0, 0, 7, 0, 0],
        '.' => [0, 0, 0, 0, 2],
        _ => [0, 0, 0, 0, 0],
    }
}

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: isize, y: isize, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            let i = (y as usize * self.w + x as usize) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    fn text(&mut self, x: isize, y: isize, s: &str, scale: isize, c: [u8; 3]) {
        for (n, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            for (r, bits) in g.iter().enumerate() {
                for col in 0..3 {
                    if bits & (4 >> col) != 0 {
                        for dy in 0..scale {
                            for dx in 0..scale {
                                self.set(
                                    x + (n as isize * 4 + col) * scale + dx,
                                    y + r as isize * scale + dy,
                                    c,
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Write the S/N map as a PNG: row 0 at the bottom (astronomical display), colour bar with its
/// range on the right, the five best candidates circled (red at S/N ≥ 5, white below).
fn write_png(path: &Path, snr: &Array2<f64>, cands: &[Candidate]) -> Result<()> {
    let (h, w) = snr.dim();
    let s = (512 / h.max(w)).max(1);
    let (lo, hi) = snr
        .iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let (lo, hi) = if lo.is_finite() {
        (lo, if hi > lo { hi } else { lo + 1.0 })
    } else {
        (0.0, 1.0)
    };
    let bar_x = w * s + 10;
    let label_w = 4 * 4 * 2 * 2;
    let cw = bar_x + 20 + 8 + label_w;
    let ch = (h * s).max(60);
    let mut cv = Canvas {
        w: cw,
        h: ch,
        px: vec![255; cw * ch * 3],
    };
    for y in 0..h {
        for x in 0..w {
            let v = snr[[y, x]];
            let c = if v.is_finite() {
                colour((v - lo) / (hi - lo))
            } else {
                [40, 40, 40]
            };
            let py = (h - 1 - y) * s;
            for dy in 0..s {
                for dx in 0..s {
                    cv.set((x * s + dx) as isize, (py + dy) as isize, c);
                }
            }
        }
    }
    let bar_h = h * s;
    for py in 0..bar_h {
        let c = colour(1.0 - py as f64 / (bar_h.max(2) - 1) as f64);
        for dx in 0..20 {
            cv.set((bar_x + dx) as isize, py as isize, c);
        }
    }
    let fmt = |v: f64| format!("{v:.1}");
    cv.text((bar_x + 24) as isize, 2, &fmt(hi), 2, [0, 0, 0]);
    cv.text(
        (bar_x + 24) as isize,
        (bar_h as isize - 12).max(12),
        &fmt(lo),
        2,
        [0, 0, 0],
    );
    for c in cands.iter().take(5) {
        let cx = (c.x * s + s / 2) as f64;
        let cy = ((h - 1 - c.y) * s + s / 2) as f64;
        let r = (3 * s) as f64;
        // Red above the usual S/N 5 threshold, white otherwise.
        let ring = if c.snr >= 5.0 {
            [255, 40, 40]
        } else {
            [255, 255, 255]
        };
        let steps = (2.0 * std::f64::consts::PI * r * 2.0).ceil() as usize;
        for i in 0..steps {
            let a = i as f64 / steps as f64 * 2.0 * std::f64::consts::PI;
            for dr in [0.0, 1.0] {
                cv.set(
                    (cx + (r + dr) * a.cos()).round() as isize,
                    (cy + (r + dr) * a.sin()).round() as isize,
                    ring,
                );
            }
        }
    }
    let io = |e| BridgeError::io(path.display().to_string(), e);
    let file = std::fs::File::create(path).map_err(io)?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), cw as u32, ch as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut wr = enc
        .write_header()
        .map_err(|e| BridgeError::InvalidInput(format!("{}: {e}", path.display())))?;
    wr.write_image_data(&cv.px)
        .map_err(|e| BridgeError::InvalidInput(format!("{}: {e}", path.display())))?;
    wr.finish()
        .map_err(|e| BridgeError::InvalidInput(format!("{}: {e}", path.display())))?;
    Ok(())
}
