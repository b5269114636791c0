//! The stages of one sub-batch of [`Run`], in the order `Run::batch` calls
//! them:
//!
//! * [`Run::stage`] (before the device's turn): host frames uploaded as stored;
//! * [`Run::load`]: those (or a resident movie read in place) converted to the device type
//!   and inverted if asked (`raw`);
//! * [`Run::lowpass`]: trackpy's Gaussian lowpass, along y then along x (with `preprocess`);
//! * [`Run::bandpass`]: the boxcar background (columns, then rows) subtracted from the lowpass
//!   and clipped, with each row's maximum;
//! * [`Run::threshold`]: the per-frame rescale factor, the integer image with its histogram,
//!   and the percentile threshold per frame;
//! * [`Run::maxima`]: the grey dilation, then the local maxima over the threshold, the
//!   candidate buffer grown and the kernel run again until they all fit;
//! * [`Run::refine`]: the iterated centroid and the characterisation of every candidate, read
//!   back with the candidates (only those that can pass `minmass`: `locate_keep`);
//! * [`Run::noise`]: the background mean and deviation per frame, read back (with
//!   `characterize`, where there is a candidate);
//! * [`Run::host_finish`]: per frame, raster order, duplicates, filters and `ep` on the host,
//!   as the CPU does it.

use std::time::Instant;

use bridge_core::exec::{Buffer, DeviceElement, DeviceSlice, Executor, Grid, Local, TypedExecutor};
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::run::{Batch, Run};
use super::{LINE_WG, Pixels, Src, Uploaded, upload_frames, widen};
use crate::detect::gpu::DevReal;
use crate::detect::gpu::pipeline::{round_up_to, to_u32};
use crate::detect::kernels::{NOISE_T, PCT_WG, ROW_MAX_WG};
use crate::detect::locate::{Feature, finish, remove_duplicates};
use crate::detect::real::Real;

/// The mass under which `locate_keep` drops a candidate in a run of device type `R`: a
/// little under `minmass` (2⁻¹⁶ of it, far more than the device's division and `R`'s rounding
/// can move a mass, and `R`'s smallest normal value, so that a device flushing subnormal
/// masses to zero drops nothing for a subnormal `minmass`), so everything the host's exact
/// `mass > minmass` keeps is kept. A NaN threshold (minmass NaN or infinite) keeps every
/// candidate.
fn keep_threshold<R: DevReal>(minmass: f64) -> f64 {
    let tiny = if <R as Real>::IS_F32 {
        f64::from(f32::MIN_POSITIVE)
    } else {
        f64::MIN_POSITIVE
    };
    minmass - minmass.abs() * (-16f64).exp2() - tiny
}

impl<E: Executor, R: DevReal> Run<'_, E, R> {
    /// The upload of a sub-batch, before any kernel (it need not wait for the kernels in
    /// flight): host frames `f0..f0 + nb` of `src` packed and uploaded as stored; `None` for a
    /// resident movie (read in place by [`Self::load`]).
    pub(super) fn stage(
        &mut self,
        src: &Src<'_, '_, E>,
        f0: usize,
        nb: usize,
    ) -> Result<Option<Uploaded<E, R>>> {
        let t = Instant::now();
        let staged = match src {
            Src::Host(run) => Some(upload_frames::<E, R>(
                self.e,
                &run[f0..f0 + nb],
                self.kind,
                self.plane,
            )?),
            Src::Device { .. } => None,
        };
        self.up_s += t.elapsed().as_secs_f64();
        Ok(staged)
    }

    /// Load: the frames `f0..f0 + nb` of `src` in the device type, inverted if asked (`raw`):
    /// the `staged` upload of host frames ([`Self::stage`]), or a resident movie read in
    /// place from frame `f0`.
    pub(super) fn load(
        &mut self,
        src: &Src<'_, '_, E>,
        staged: Option<Uploaded<E, R>>,
        f0: usize,
        b: &Batch,
    ) -> Result<Buffer<E, R>> {
        let raw = self.e.alloc_elems::<R>(b.img_len)?;
        match (src, staged) {
            (_, Some(uploaded)) => self.load_kernel(&uploaded.view(), &raw, b, 0)?,
            (Src::Device { movie, .. }, None) => {
                self.load_kernel(movie, &raw, b, to_u32(f0, "frame")?)?;
            }
            (Src::Host(_), None) => {
                return Err(BridgeError::backend(
                    "locate",
                    None,
                    "host frames reached the load kernel without their upload",
                ));
            }
        }
        Ok(raw)
    }

    /// The load kernel of the pixel type of `input` on its frames `first..first + nb` into
    /// `raw`, inverted if asked; float64 pixels must be stored in the device type (`F` is `R`).
    fn load_kernel<F: DeviceElement>(
        &mut self,
        input: &Pixels<'_, E, F>,
        raw: &Buffer<E, R>,
        b: &Batch,
        first: u32,
    ) -> Result<()> {
        let grid = Grid::new(&b.gp, &b.lp);
        let (pu, nbu, inv) = (self.a.pu, b.nbu, u32::from(self.p.invert));
        match input {
            Pixels::U8(px) => self.k.launch("locate_load_u8", |k| {
                k.locate_load_u8(grid, px, raw, pu, nbu, inv, first)
            }),
            Pixels::U16(px) => self.k.launch("locate_load_u16", |k| {
                k.locate_load_u16(grid, px, raw, pu, nbu, inv, first)
            }),
            Pixels::F32(px) => self.k.launch("locate_load_f32", |k| {
                k.locate_load_f32(grid, px, raw, pu, nbu, inv, first)
            }),
            // the kernel reads float64 frames as the device type (`F64_T`)
            Pixels::F64(_) if F::C_NAME != R::C_NAME => Err(BridgeError::Unsupported(format!(
                "float64 frames stored as {} in a {} locate pipeline",
                F::C_NAME,
                R::C_NAME
            ))),
            Pixels::F64(px) => self.k.launch("locate_load_f64", |k| {
                k.locate_load_f64(grid, px, raw, pu, nbu, inv, first)
            }),
        }
    }

    /// Lowpass (with `preprocess` and taps): `raw` filtered along y into `t1`, then along x
    /// into a new image, returned; `None` without.
    pub(super) fn lowpass(
        &mut self,
        b: &Batch,
        raw: &Buffer<E, R>,
        t1: &Buffer<E, R>,
    ) -> Result<Option<Buffer<E, R>>> {
        let (p, a) = (self.p, &self.a);
        let (true, Some(tb)) = (p.preprocess, &self.tb.taps_buf) else {
            return Ok(None);
        };
        let low = self.e.alloc_elems::<R>(b.img_len)?;
        let tr = to_u32(
            self.tb.taps.as_ref().map_or(0, |t| t.len() - 1),
            "lowpass radius",
        )?;
        let grid = Grid::new(&b.g3, &b.l3);
        self.k.launch("locate_lowpass_y", |k| {
            k.locate_lowpass_y(grid, raw, t1, tb, tr, a.hu, a.wu, b.nbu)
        })?;
        self.k.launch("locate_lowpass_x", |k| {
            k.locate_lowpass_x(grid, t1, &low, tb, tr, a.hu, a.wu, b.nbu)
        })?;
        Ok(Some(low))
    }

    /// Bandpass: the boxcar background of `raw` (with `preprocess` and a boxcar: integers
    /// along y into `t1`, floats along the columns into `t1`), then per row its boxcar along x,
    /// subtracted from `low` and clipped into `bp`, with the row's maximum into `rowmax`.
    pub(super) fn bandpass(
        &mut self,
        b: &Batch,
        raw: &Buffer<E, R>,
        low: &Buffer<E, R>,
        t1: &Buffer<E, R>,
        bp: &Buffer<E, R>,
        rowmax: &Buffer<E, R>,
    ) -> Result<()> {
        let (p, a) = (self.p, &self.a);
        let bg_src = if p.preprocess && a.mode == 2 {
            let grid = Grid::new(&b.g3, &b.l3);
            self.k.launch("locate_box_int_y", |k| {
                k.locate_box_int_y(grid, raw, t1, a.hu, a.wu, b.nbu, a.smu)
            })?;
            t1
        } else if p.preprocess && a.mode != 3 {
            let g = b.lines(self.w);
            let grid = Grid::new(&g, &b.l2);
            self.k.launch("locate_box_cols", |k| {
                k.locate_box_cols(grid, raw, t1, a.hu, a.wu, b.nbu, a.smu, a.mode)
            })?;
            t1
        } else {
            raw
        };
        let (prm, pre) = (&self.tb.prm, u32::from(p.preprocess));
        if self.rows_px && (pre == 0 || a.mode == 2 || a.mode == 3) {
            // exact in any order: a work item per pixel (reads coalesced), then the rows'
            // maxima one work group a row
            let grid = Grid::new(&b.g3, &b.l3);
            self.k.launch("locate_box_rows_px", |k| {
                k.locate_box_rows_px(
                    grid, bg_src, low, bp, prm, a.hu, a.wu, b.nbu, a.smu, a.mode, pre,
                )
            })?;
            let rows = b.nb * self.h;
            let (global, local) = ([rows * ROW_MAX_WG], [ROW_MAX_WG]);
            let groups = Grid::new(&global, &local);
            let rows_u = to_u32(rows, "rows")?;
            self.k.launch("locate_row_max", |k| {
                k.locate_row_max(groups, bp, rowmax, a.wu, rows_u, Local::elems(ROW_MAX_WG))
            })?;
            return Ok(());
        }
        let g = b.lines(self.h);
        let grid = Grid::new(&g, &b.l2);
        self.k.launch("locate_box_rows", |k| {
            k.locate_box_rows(
                grid, bg_src, low, bp, rowmax, prm, a.hu, a.wu, b.nbu, a.smu, a.mode, pre,
            )
        })?;
        Ok(())
    }

    /// Threshold: the per-frame rescale factor from `rowmax` (`scale`), the bandpass `bp`
    /// rescaled to the integer image (`img`) with its histogram, and from that the percentile
    /// threshold per frame (`vmin`). Returns `(scale, img, vmin)`.
    #[allow(clippy::type_complexity)]
    pub(super) fn threshold(
        &mut self,
        b: &Batch,
        bp: &Buffer<E, R>,
        rowmax: &Buffer<E, R>,
    ) -> Result<(Buffer<E, R>, Buffer<E, u32>, Buffer<E, u32>)> {
        let (e, a, nb) = (self.e, &self.a, b.nb);
        let prm = &self.tb.prm;
        let frames = Grid::new(&b.gf, &b.lf);
        let scale = e.alloc_elems::<R>(nb)?;
        self.k.launch("locate_scale", |k| {
            k.locate_scale(frames, rowmax, &scale, prm, a.hu, a.identity)
        })?;
        let img = e.alloc_elems::<u32>(nb * self.plane)?;
        let hist = e.zeroed_elems::<i32>(nb * self.nbins)?;
        let pixels = Grid::new(&b.gp, &b.lp);
        self.k.launch("locate_rescale", |k| {
            k.locate_rescale(
                pixels, bp, &scale, prm, &img, &hist, a.pu, b.nbu, a.nbinsu, a.identity,
            )
        })?;
        let vmin = e.alloc_elems::<u32>(nb)?;
        // one work group per frame
        let (global, local) = ([nb * PCT_WG], [PCT_WG]);
        let groups = Grid::new(&global, &local);
        self.k.launch("locate_percentile", |k| {
            k.locate_percentile(groups, &hist, prm, &vmin, a.nbinsu, b.nbu)
        })?;
        drop(hist);
        Ok((scale, img, vmin))
    }

    /// Maxima: `img` dilated along x into `dil`, then the local maxima of `img` over `vmin`
    /// into the candidate buffer, grown (and the kernel run again) until they all fit.
    /// Returns the number of candidates.
    pub(super) fn maxima(
        &mut self,
        b: &Batch,
        img: &Buffer<E, u32>,
        dil: &impl DeviceSlice<E, Elem = u32>,
        vmin: &Buffer<E, u32>,
    ) -> Result<usize> {
        let (e, a) = (self.e, &self.a);
        let grid = Grid::new(&b.g3, &b.l3);
        self.k.launch("locate_dilate_x", |k| {
            k.locate_dilate_x(grid, img, dil, a.lou, a.hiu, a.hu, a.wu, b.nbu)
        })?;
        loop {
            let counter = e.zeroed_elems::<i32>(1)?;
            let (cand_buf, cap) = (&self.cand_buf, to_u32(self.cap, "candidates")?);
            self.k.launch("locate_maxima", |k| {
                k.locate_maxima(
                    grid, img, dil, vmin, a.lou, a.hiu, a.marginu, a.hu, a.wu, b.nbu, &counter,
                    cand_buf, cap,
                )
            })?;
            let t = Instant::now();
            let c = e.read_elems(&counter, 1)?;
            self.read_s += t.elapsed().as_secs_f64();
            let Some(&n) = c.first() else {
                return Err(BridgeError::backend(
                    "locate",
                    None,
                    "the candidate counter was not read back",
                ));
            };
            let n = usize::try_from(n).map_err(|_| {
                BridgeError::backend("locate", None, "candidate counter overflowed")
            })?;
            if n <= self.cap {
                return Ok(n);
            }
            // the kernel counts in `int`: a capacity past 2^30 would wrap its bound
            if n > 1 << 30 {
                return Err(BridgeError::InvalidInput(
                    format!(
                        "locate found {n} candidate maxima in one batch (more than 2^30): raise \
                     --separation or use smaller batches"
                    )
                    .into(),
                ));
            }
            self.cap = n.next_power_of_two();
            self.cand_buf = e.alloc_elems::<u32>(self.cap)?;
        }
    }

    /// Refinement: the iterated centroid and the characterisation of the `n_cand` candidates
    /// (on `img`, masses on `raw`), read back: with [`Run::keep`] only those whose mass in the
    /// input's units (`scale`: the frames' rescale factors) can pass `minmass`, in no
    /// particular order. Returns the 7 values per candidate and the candidates' flat indices
    /// (both empty without candidates).
    pub(super) fn refine(
        &mut self,
        img: &Buffer<E, u32>,
        raw: &Buffer<E, R>,
        scale: &Buffer<E, R>,
        n_cand: usize,
    ) -> Result<(Vec<f64>, Vec<u32>)> {
        let (e, a, tb) = (self.e, &self.a, &self.tb);
        let mut refined: Vec<f64> = Vec::new();
        let mut cand: Vec<u32> = Vec::new();
        if n_cand > 0 {
            let res = e.alloc_elems::<R>(n_cand * 7)?;
            let (g, l) = ([round_up_to(n_cand, LINE_WG)], [LINE_WG]);
            let grid = Grid::new(&g, &l);
            let nmask = to_u32(tb.mk.len(), "mask size")?;
            let ncand = to_u32(n_cand, "candidates")?;
            let cand_buf = &self.cand_buf;
            self.k.launch("locate_refine", |k| {
                k.locate_refine(
                    grid,
                    img,
                    raw,
                    cand_buf,
                    &tb.mask_buf,
                    &tb.r2_buf,
                    &tb.c2_buf,
                    &tb.s2_buf,
                    &res,
                    nmask,
                    a.ru,
                    a.hu,
                    a.wu,
                    ncand,
                    a.itu,
                )
            })?;
            if self.keep {
                // only the candidates that can pass minmass travel back (a sparse movie's are
                // a few percent: 106,005 candidates, 7 values each, for 54 frames of the bench
                // movie, of which about 5,400 pass minmass 200)
                let kcand = e.alloc_elems::<u32>(n_cand)?;
                let kres = e.alloc_elems::<R>(n_cand * 7)?;
                let count = e.zeroed_elems::<i32>(1)?;
                let thr = <R as Real>::from_f64(keep_threshold::<R>(self.p.minmass));
                let plane = to_u32(self.plane, "pixels")?;
                self.k.launch("locate_keep", |k| {
                    k.locate_keep(
                        grid, cand_buf, &res, scale, &count, &kcand, &kres, thr, plane, ncand,
                    )
                })?;
                let t = Instant::now();
                let nk = e.read_elems(&count, 1)?[0];
                let nk = usize::try_from(nk)
                    .ok()
                    .filter(|&k| k <= n_cand)
                    .ok_or_else(|| {
                        BridgeError::backend(
                            "locate",
                            None,
                            "locate_keep's counter is out of range",
                        )
                    })?;
                if nk > 0 {
                    cand = e.read_elems(&kcand, nk)?;
                    refined = widen(e.read_elems(&kres, nk * 7)?);
                }
                self.read_s += t.elapsed().as_secs_f64();
            } else {
                let t = Instant::now();
                cand = e.read_elems(&self.cand_buf, n_cand)?;
                refined = widen(e.read_elems(&res, n_cand * 7)?);
                self.read_s += t.elapsed().as_secs_f64();
            }
        }
        Ok((refined, cand))
    }

    /// Background noise (only needed when a frame has a feature: with `characterize` and
    /// candidates): the row distances of `img` to the mask into `dist`, then two passes of
    /// per-row and per-frame sums over `raw` (the pixels flagged first, one work item per
    /// pixel, and each row summed through local memory with `noise_tiles`; else a row a work
    /// item, flagging in the first pass). Returns `(n, mean, sq, sum)` per frame, as
    /// [`Run::host_finish`] reads them.
    pub(super) fn noise(
        &mut self,
        b: &Batch,
        img: &Buffer<E, u32>,
        dist: &impl DeviceSlice<E, Elem = u32>,
        raw: &Buffer<E, R>,
        n_cand: usize,
    ) -> Result<Option<Vec<f64>>> {
        if !(self.p.characterize && n_cand > 0) {
            return Ok(None);
        }
        let (e, a, nb, h) = (self.e, &self.a, b.nb, self.h);
        let grid = Grid::new(&b.g3, &b.l3);
        self.k.launch("locate_row_dist", |k| {
            k.locate_row_dist(grid, img, dist, a.ru, a.hu, a.wu, b.nbu)
        })?;
        let rows = e.alloc_elems::<R>(nb * h * 3)?;
        let stats = e.alloc_elems::<R>(nb * 4)?;
        let g = b.lines(h);
        let lines = Grid::new(&g, &b.l2);
        let (gt, lt) = ([round_up_to(h, NOISE_T), nb], [NOISE_T, 1]);
        let tiles = Grid::new(&gt, &lt);
        let frames = Grid::new(&b.gf, &b.lf);
        let hw = &self.tb.hw_buf;
        if self.noise_tiles {
            // the flags over the integer image, no longer needed
            self.k.launch("locate_noise_flag", |k| {
                k.locate_noise_flag(grid, dist, hw, img, a.ru, a.hu, a.wu, b.nbu)
            })?;
        }
        for pass in 0..2u32 {
            if self.noise_tiles {
                self.k.launch("locate_noise_tiles", |k| {
                    k.locate_noise_tiles(tiles, raw, &stats, &rows, img, a.hu, a.wu, b.nbu, pass)
                })?;
            } else {
                self.k.launch("locate_noise_rows", |k| {
                    k.locate_noise_rows(
                        lines, dist, hw, raw, &stats, &rows, img, a.ru, a.hu, a.wu, b.nbu, pass,
                    )
                })?;
            }
            self.k.launch("locate_noise_frame", |k| {
                k.locate_noise_frame(frames, &rows, &stats, a.hu, pass)
            })?;
        }
        let t = Instant::now();
        let s = widen(e.read_elems(&stats, nb * 4)?);
        self.read_s += t.elapsed().as_secs_f64();
        Ok(Some(s))
    }

    /// Host finish of `nb` frames: the candidates `cand` with their `refined` values sorted per
    /// frame in raster order, duplicates removed, then the filters and `ep` with the frame's
    /// rescale factor from `scales` and noise from `stats`, as the CPU does it.
    pub(super) fn host_finish(
        &mut self,
        nb: usize,
        cand: &[u32],
        refined: &[f64],
        stats: Option<&[f64]>,
        scales: &[f64],
    ) -> Vec<Vec<Feature>> {
        let (plane, p, plan, r, mk) = (self.plane, self.p, self.plan, self.r, &self.tb.mk);
        // host: raster order, duplicates, filters and ep, per frame as the CPU does it
        let t = Instant::now();
        let mut per: Vec<Vec<(u32, [f64; 7])>> = vec![Vec::new(); nb];
        for (k, &c) in cand.iter().enumerate() {
            let f = c as usize / plane;
            let mut v = [0.0f64; 7];
            v.copy_from_slice(&refined[7 * k..7 * k + 7]);
            if let Some(list) = per.get_mut(f) {
                list.push((c, v));
            }
        }
        let done: Vec<Vec<Feature>> = per
            .into_par_iter()
            .enumerate()
            .map(|(f, mut list)| {
                list.sort_unstable_by_key(|&(c, _)| c);
                let feats = remove_duplicates(list.into_iter().map(|(_, v)| v).collect(), plan.sep);
                let noise = stats.map(|s| {
                    let (n, mean, sq, sum) = (s[4 * f], s[4 * f + 1], s[4 * f + 2], s[4 * f + 3]);
                    if n == 0.0 {
                        (f64::NAN, f64::NAN)
                    } else if n == 1.0 {
                        (sum, f64::NAN)
                    } else {
                        (mean, (sq / n).sqrt())
                    }
                });
                finish(&feats, scales[f], noise, p, r, mk)
            })
            .collect();
        self.host_s += t.elapsed().as_secs_f64();
        done
    }
}

#[cfg(test)]
mod tests {
    use super::keep_threshold;

    /// The threshold is under minmass by more than a float division can move a mass, below
    /// zero for a subnormal minmass in float (a flushed mass is kept), and NaN (keep all) for
    /// an infinite minmass.
    #[test]
    fn keep_threshold_is_conservative() {
        for m in [200.0, 0.5, 1e-30, 1e300] {
            for t in [keep_threshold::<f64>(m), keep_threshold::<f32>(m)] {
                assert!(t < m && t > m * (1.0 - 1e-4), "{m}: {t}");
                // a float mass a few ulps over minmass is over the threshold too
                assert!(f64::from((m as f32) * (1.0 - 4.0 * f32::EPSILON)) >= t || m > 1e38);
            }
        }
        assert!(keep_threshold::<f32>(1e-41) < 0.0);
        assert!(keep_threshold::<f64>(0.0) < 0.0);
        assert!(keep_threshold::<f64>(-5.0) < -5.0);
        assert!(keep_threshold::<f64>(f64::INFINITY).is_nan());
        assert!(keep_threshold::<f32>(f64::NAN).is_nan());
    }
}
