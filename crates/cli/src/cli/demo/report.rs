//! The summary: `summary.txt` (printed unless `--json`) and `summary.json` (printed with
//! `--json`), from everything the run measured.

use std::fmt::Write as _;
use std::path::Path;

use crate::figures::{GREEN, NAN_COLOUR, RED, SnrFigure, WHITE};
use algorithms::detect::synth::MatchStats;
use algorithms::synth::adi::AdiWithPlanet;

use super::planet::Recovered;
use super::scenario::{FWHM, IWA, LINK, MATCH_RADIUS, MOVIE, OVERLAY_SCALE, ROTATION};
use crate::cli::device::Choice;

/// Everything the summary reports, borrowed from the run.
pub(super) struct Report<'a> {
    pub(super) seed: u64,
    pub(super) requested: String,
    pub(super) det: &'a Choice,
    pub(super) paco: &'a Choice,
    pub(super) movie: (usize, usize, usize),
    pub(super) score: &'a MatchStats,
    pub(super) detections: usize,
    pub(super) tracks: usize,
    pub(super) long_tracks: usize,
    pub(super) largest_subnet: usize,
    pub(super) adi: &'a AdiWithPlanet,
    pub(super) planet: &'a Recovered,
    pub(super) fwhm_used: Option<f64>,
    pub(super) psf_norm_factor: f64,
    pub(super) timings: &'a [(&'static str, f64)],
    pub(super) frames_per_s: f64,
    pub(super) overlay: (usize, usize),
    pub(super) snr_png: &'a SnrFigure,
    pub(super) out: &'a Path,
    pub(super) inputs: bool,
}

impl Report<'_> {
    /// `summary.txt`.
    pub(super) fn text(&self) -> String {
        let (t, h, w) = self.movie;
        let sc = self.score;
        let p = self.planet;
        let tr = &self.adi.planet;
        let (at, an, _) = self.adi.cube.dim();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "arraybridge demo (seed {}, --device {})",
            self.seed, self.requested
        );
        let _ = writeln!(
            s,
            "  detection + tracking on {}: {}",
            self.det.device, self.det.reason
        );
        let _ = writeln!(s, "  PACO on {}: {}", self.paco.device, self.paco.reason);
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "particles: {t} frames of {h}x{w} u16, {} Brownian particles (step {} px/frame), Poisson noise",
            MOVIE.2, MOVIE.3
        );
        let _ = writeln!(
            s,
            "  detections  {} (blob_log σ 1–3, 10 scales, threshold_rel 0.2, sub-pixel refinement), {:.0} frames/s",
            self.detections, self.frames_per_s
        );
        let _ = writeln!(
            s,
            "  recall      {:.3}  precision {:.3}  ({} of {} true positions matched within {MATCH_RADIUS} px, RMS error {:.2} px)",
            sc.recall, sc.precision, sc.matched, sc.truth, sc.rmse
        );
        let _ = writeln!(
            s,
            "  tracks      {} (search range {} px, memory {}); {} cover ≥ 90% of the frames; {} true particles",
            self.tracks, LINK.0, LINK.1, self.long_tracks, MOVIE.2
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "ADI: {at} frames of {an}x{an}, field rotation {ROTATION}°, PSF FWHM {FWHM} px, planet at separation {} px, angle {}°, contrast {:.1e}",
            tr.separation, tr.angle_deg, tr.contrast
        );
        let _ = writeln!(s, "  planet true       (y, x) = ({:.2}, {:.2})", tr.y, tr.x);
        let _ = writeln!(
            s,
            "  planet recovered  (y, x) = ({:.2}, {:.2}), S/N {:.1}, error {:.2} px",
            p.y, p.x, p.snr, p.error
        );
        let _ = writeln!(
            s,
            "  contrast          true {:.2e}, unbiased estimate {}, b/a at the peak {:.2e} (biased low)",
            tr.contrast,
            p.unbiased
                .map_or_else(|| "n/a".to_owned(), |(c, e)| format!("{c:.2e} ± {e:.1e}")),
            p.contrast
        );
        let _ = writeln!(
            s,
            "  strongest other peak: S/N {:.1} (farther than 2 FWHM; search outside {IWA} px from the star)",
            p.false_alarm_snr
        );
        let _ = writeln!(s);
        let times: Vec<String> = self
            .timings
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        let _ = writeln!(s, "timings (s): {}", times.join(", "));
        let _ = writeln!(
            s,
            "outputs in {}: detections.csv tracks.csv overlay.png snr.png snr.fits summary.txt summary.json{}",
            self.out.display(),
            if self.inputs {
                " inputs/ (movie.npy truth.csv adi_cube.fits adi_angles.fits adi_psf.fits)"
            } else {
                ""
            }
        );
        s
    }

    /// `summary.json`.
    pub(super) fn json(&self) -> serde_json::Value {
        let (t, h, w) = self.movie;
        let sc = self.score;
        let p = self.planet;
        let tr = &self.adi.planet;
        let (at, an, _) = self.adi.cube.dim();
        let choice = |c: &Choice| {
            let estimate = c.estimate.as_ref().map(|d| {
                let devices: Vec<serde_json::Value> = d
                    .estimates
                    .iter()
                    .map(|e| {
                        serde_json::json!({
                            "device": e.device.to_string(),
                            "transfer_s": e.transfer_s,
                            "compute_s": e.compute_s,
                            "total_s": e.total_s(),
                            "fits_in_memory": e.fits,
                        })
                    })
                    .collect();
                serde_json::json!({ "cpu_s": d.cpu_s, "devices": devices })
            });
            serde_json::json!({
                "device": c.device.to_string(),
                "reason": c.reason,
                "estimate": estimate,
            })
        };
        let timings: serde_json::Map<String, serde_json::Value> = self
            .timings
            .iter()
            .map(|(k, v)| (k.replace(' ', "_"), serde_json::json!(v)))
            .collect();
        let nan_null = |v: f64| if v.is_finite() { Some(v) } else { None };
        serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "seed": self.seed,
            "device_requested": self.requested,
            "detection": {
                "device": choice(self.det),
                "movie": { "frames": t, "height": h, "width": w, "dtype": "u16",
                           "particles": MOVIE.2, "step_px": MOVIE.3 },
                "method": "blob_log (min_sigma 1, max_sigma 3, num_sigma 10, threshold_rel 0.2) + refinement",
                "detections": self.detections,
                "truth_points": sc.truth,
                "matched": sc.matched,
                "match_radius_px": MATCH_RADIUS,
                "recall": nan_null(sc.recall),
                "precision": nan_null(sc.precision),
                "rmse_px": nan_null(sc.rmse),
                "frames_per_s": self.frames_per_s,
            },
            "tracking": {
                "search_range_px": LINK.0,
                "memory": LINK.1,
                "tracks": self.tracks,
                "tracks_covering_90pct": self.long_tracks,
                "true_particles": MOVIE.2,
                "largest_subnet": self.largest_subnet,
            },
            "paco": {
                "device": choice(self.paco),
                "cube": { "frames": at, "height": an, "width": an,
                          "rotation_deg": ROTATION, "fwhm_px": FWHM,
                          "centre": [self.adi.centre.0, self.adi.centre.1] },
                "psf_norm_factor": self.psf_norm_factor,
                "fwhm_used": self.fwhm_used,
                "planet_true": { "y": tr.y, "x": tr.x, "separation_px": tr.separation,
                                 "angle_deg": tr.angle_deg, "contrast": tr.contrast },
                "planet_recovered": { "y": p.y, "x": p.x, "pixel": [p.pixel.0, p.pixel.1],
                                      "snr": nan_null(p.snr), "contrast_peak_b_over_a": nan_null(p.contrast),
                                      "contrast_unbiased": p.unbiased.and_then(|u| nan_null(u.0)),
                                      "contrast_unbiased_std": p.unbiased.and_then(|u| nan_null(u.1)),
                                      "error_px": nan_null(p.error) },
                "max_other_snr": nan_null(p.false_alarm_snr),
                "inner_working_angle_px": IWA,
            },
            "timings_s": timings,
            "outputs": {
                "detections_csv": "detections.csv",
                "tracks_csv": "tracks.csv",
                "overlay_png": { "file": "overlay.png", "width": self.overlay.0,
                                 "height": self.overlay.1, "scale": OVERLAY_SCALE,
                                 "detection_rgb": GREEN },
                "snr_png": { "file": "snr.png", "width": self.snr_png.canvas.width(),
                             "height": self.snr_png.canvas.height(), "scale": self.snr_png.scale,
                             "row0_at_bottom": true, "marker_rgb": RED,
                             "marker_radius": self.snr_png.marker_radius, "truth_rgb": WHITE,
                             "nan_rgb": NAN_COLOUR },
                "snr_fits": "snr.fits",
                "inputs": if self.inputs { Some("inputs") } else { None },
            },
        })
    }
}
