//! What `arraybridge paco` reports: the candidates (local maxima of the S/N map) and their
//! writers: the FITS maps, `candidates.csv`, `snr.png`, and the table or JSON on stdout.

use crate::cli::common::{outln, outp};
use std::path::Path;

use crate::figures::{self, Marker, RED, SnrMapOptions, WHITE};
use algorithms::paco::{PacoMaps, PacoShare, calibrated_snr};
use arraybridge::io::csv::create_writer;
use arraybridge::io::fits;
use bridge_core::Result;
use ndarray::Array2;

use super::super::common::Global;
use super::runner::Runner;
use super::{Args, Settings};

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
    /// Refined row (with --refine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub y_sub: Option<f64>,
    /// Refined column.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub x_sub: Option<f64>,
    /// S/N at the refined position.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snr_sub: Option<f64>,
}

/// Local maxima of the S/N map (strict maximum over a 5×5 window), best first
/// ([`algorithms::paco::snr_peaks`]).
pub(super) fn candidates(maps: &PacoMaps, top: usize, cy: f64, cx: f64) -> Vec<Candidate> {
    algorithms::paco::snr_peaks(&maps.snr, top)
        .into_iter()
        .map(|(y, x)| {
            let (dy, dx) = (y as f64 - cy, x as f64 - cx);
            Candidate {
                y,
                x,
                separation_px: (dy * dy + dx * dx).sqrt(),
                angle_deg: dy.atan2(dx).to_degrees().rem_euclid(360.0),
                snr: maps.snr[[y, x]],
                flux: maps.flux[[y, x]],
                unbiased_flux: None,
                unbiased_flux_err: None,
                y_sub: None,
                x_sub: None,
                snr_sub: None,
            }
        })
        .collect()
}

/// `candidates.csv`: one row per candidate, the unbiased-flux columns with `with_flux`, the
/// refined-position columns with `with_sub`. Fluxes are written in full (the shortest text that
/// reads back as the same number); S/N with six decimals, separations and angles with four.
pub(super) fn write_csv(
    path: &Path,
    cands: &[Candidate],
    with_flux: bool,
    with_sub: bool,
) -> Result<()> {
    let mut w = create_writer(path)?;
    let mut head = vec!["y", "x", "separation_px", "angle_deg", "snr", "flux"];
    if with_flux {
        head.extend(["unbiased_flux", "unbiased_flux_err"]);
    }
    if with_sub {
        head.extend(["y_sub", "x_sub", "snr_sub"]);
    }
    w.write_record(head)?;
    for c in cands {
        let mut row = vec![
            c.y.to_string(),
            c.x.to_string(),
            format!("{:.4}", c.separation_px),
            format!("{:.4}", c.angle_deg),
            format!("{:.6}", c.snr),
            // fluxes in the cube's units, whatever their scale: the shortest text that reads
            // back as the same number (as `detect`'s CSV writes its values), not six decimals,
            // which wrote a cube scaled by 1e-10 as 0.000000
            c.flux.to_string(),
        ];
        if with_flux {
            let g = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
            row.extend([g(c.unbiased_flux), g(c.unbiased_flux_err)]);
        }
        if with_sub {
            let g = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_default();
            row.extend([g(c.y_sub), g(c.x_sub), g(c.snr_sub)]);
        }
        w.write_record(row.iter().map(String::as_str))?;
    }
    w.finish()
}

/// The candidates as a table on stdout (the same optional columns as [`write_csv`]).
pub(super) fn print_table(cands: &[Candidate], with_flux: bool, with_sub: bool) -> Result<()> {
    outp!(
        "{:>4} {:>5} {:>5} {:>9} {:>9} {:>9} {:>11}",
        "rank",
        "y",
        "x",
        "sep_px",
        "angle",
        "S/N",
        "flux"
    )?;
    if with_flux {
        outp!(" {:>14} {:>10}", "unbiased_flux", "error")?;
    }
    if with_sub {
        outp!(" {:>8} {:>8} {:>9}", "y_sub", "x_sub", "S/N_sub")?;
    }
    outln!()?;
    for (i, c) in cands.iter().enumerate() {
        outp!(
            "{:>4} {:>5} {:>5} {:>9.3} {:>9.2} {:>9.3} {:>11.3}",
            i + 1,
            c.y,
            c.x,
            c.separation_px,
            c.angle_deg,
            c.snr,
            c.flux
        )?;
        if let (Some(f), Some(e)) = (c.unbiased_flux, c.unbiased_flux_err) {
            outp!(" {f:>14.3} {e:>10.3}")?;
        } else if with_flux && with_sub {
            outp!(" {:>14} {:>10}", "", "")?;
        }
        if let (Some(y), Some(x), Some(v)) = (c.y_sub, c.x_sub, c.snr_sub) {
            outp!(" {y:>8.2} {x:>8.2} {v:>9.3}")?;
        }
        outln!()?;
    }
    Ok(())
}

/// How many of the best candidates `snr.png` circles.
const PNG_CANDIDATES: usize = 5;

/// `snr.png`: the S/N map ([`figures::render_snr_map`]: row 0 at the bottom, NaN in dark grey, a
/// colour bar with its range), the [`PNG_CANDIDATES`] best candidates circled (red at S/N ≥ 5,
/// white below; the best drawn last, on top), the settings in the caption.
pub(super) fn write_png(
    path: &Path,
    snr: &Array2<f64>,
    cands: &[Candidate],
    title: String,
) -> Result<()> {
    let markers = cands
        .iter()
        .take(PNG_CANDIDATES)
        .rev()
        .map(|c| {
            let colour = if c.snr >= 5.0 { RED } else { WHITE };
            Marker::circle(c.y as f64, c.x as f64, colour)
        })
        .collect();
    let opts = SnrMapOptions {
        title: Some(title),
        markers,
        ..Default::default()
    };
    figures::render_snr_map(snr.view(), &opts)?.write_png(path)
}

/// Every file of the output folder, written into `dir` (the staging folder of `--output`):
/// the maps (`snr`, `flux`, `a`, `b` `.fits`), with `--calibrate` `snr_calibrated.fits` (star
/// at `(cy, cx)`), then `candidates.csv` and `snr.png`.
pub(super) fn write_files(
    args: &Args,
    dir: &std::path::Path,
    maps: &PacoMaps,
    cands: &[Candidate],
    (cy, cx): (f64, f64),
    settings: &Settings,
) -> Result<()> {
    for (name, m) in [
        ("snr", &maps.snr),
        ("flux", &maps.flux),
        ("a", &maps.a),
        ("b", &maps.b),
    ] {
        fits::write_image(dir.join(format!("{name}.fits")), &m.clone().into_dyn())?;
    }
    if args.calibrate {
        let strong: Vec<(usize, usize)> = cands
            .iter()
            .filter(|c| c.snr >= 5.0)
            .map(|c| (c.y, c.x))
            .collect();
        let radius = 2.0 * maps.fwhm.unwrap_or(4.0);
        let cal = calibrated_snr(&maps.snr, (cy, cx), &strong, radius);
        fits::write_image(dir.join("snr_calibrated.fits"), &cal.into_dyn())?;
    }
    write_csv(&dir.join("candidates.csv"), cands, args.flux, args.refine)?;
    let Settings {
        mode,
        subpixel,
        edge,
        ..
    } = settings;
    let title = format!("PACO S/N  {mode}  SUB-PIXEL {subpixel}  EDGE {edge}");
    write_png(&dir.join("snr.png"), &maps.snr, cands, title)
}

/// The result on stdout: the JSON document with `--json` (the run, the devices and their
/// shares, the candidates), else the candidates' table.
pub(super) fn summary(
    args: &Args,
    g: Global,
    settings: &Settings,
    runner: &Runner,
    shares: Option<Vec<PacoShare>>,
    maps: &PacoMaps,
    cands: &[Candidate],
) -> Result<()> {
    let Settings {
        dims: (t, h, w),
        radius,
        mode,
        subpixel,
        edge,
    } = settings;
    let by_rank = runner.by_rank();
    if g.json {
        g.print_json(&serde_json::json!({
            "command": "paco",
            "output": args.output.display().to_string(),
            "frames": t, "height": h, "width": w, "mode": mode,
            "radius": radius, "subpixel": subpixel, "edge": edge,
            "device": runner.name(),
            "device_reason": match runner {
                Runner::One(c) => Some(c.reason.clone()),
                Runner::Several(_) | Runner::Ranks(..) => None,
            },
            "devices": shares.map(|v| v.iter().enumerate().map(|(i, s)| {
                let mut j = serde_json::to_value(s).unwrap_or_default();
                if by_rank {
                    j["rank"] = i.into();
                }
                j
            }).collect::<Vec<_>>()),
            "psf_norm_factor": maps.psf_norm_factor, "fwhm": maps.fwhm,
            "candidates": cands,
        }))?;
    } else {
        print_table(cands, args.flux, args.refine)?;
    }
    Ok(())
}
