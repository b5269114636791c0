//! The stages of one sub-batch of [`Run`], in the order `Run::batch` calls
//! them:
//!
//! * [`Run::load`]: the frames uploaded as stored (or a resident movie read in place),
//!   converted to the device type and inverted if asked (`raw`);
//! * [`Run::lowpass`]: trackpy's Gaussian lowpass, along y then along x (with `preprocess`);
//! * [`Run::bandpass`]: the boxcar background (columns, then rows) subtracted from the lowpass
//!   and clipped, with each row's maximum;
//! * [`Run::threshold`]: the per-frame rescale factor, the integer image with its histogram,
//!   and the percentile threshold per frame;
//! * [`Run::maxima`]: the grey dilation, then the local maxima over the threshold, the
//!   candidate buffer grown and the kernel run again until they all fit;
//! * [`Run::refine`]: the iterated centroid and the characterisation of every candidate, read
//!   back with the candidates;
//! * [`Run::noise`]: the background mean and deviation per frame, read back (with
//!   `characterize`, where there is a candidate);
//! * [`Run::host_finish`]: per frame, raster order, duplicates, filters and `ep` on the host,
//!   as the CPU does it.

use std::time::Instant;

use bridge_core::exec::{Executor, KernelArg};
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::run::{Batch, Run};
use super::{LINE_WG, Src, decode, pack};
use crate::detect::gpu::DevReal;
use crate::detect::gpu::pipeline::{round_up_to, to_u32};
use crate::detect::locate::{Feature, finish, remove_duplicates};

impl<E: Executor, R: DevReal> Run<'_, E, R> {
    /// Load: the frames `f0..f0 + nb` of `src` in the device type, inverted if asked (`raw`).
    /// Host frames are uploaded as stored; a resident movie is read in place from frame `f0`.
    pub(super) fn load(
        &mut self,
        src: &Src<'_, '_, E::Buffer>,
        f0: usize,
        b: &Batch,
    ) -> Result<E::Buffer> {
        let (e, nb, plane) = (self.e, b.nb, self.plane);
        let t = Instant::now();
        // host frames: this sub-batch uploaded as stored; a resident movie: read in place from
        // its frame f0
        let (uploaded, first) = match src {
            Src::Host(run) => (
                Some(e.upload(&pack::<R>(&run[f0..f0 + nb], self.kind, plane))?),
                0,
            ),
            Src::Device { .. } => (None, to_u32(f0, "frame")?),
        };
        let input = match (&uploaded, src) {
            (Some(up), _) => up,
            (None, Src::Device { buf, .. }) => *buf,
            (None, Src::Host(_)) => unreachable!("host frames are uploaded above"),
        };
        self.up_s += t.elapsed().as_secs_f64();
        let raw = e.alloc(b.img_bytes)?;
        self.k.launch(
            self.kind.load_entry(),
            &b.gp,
            &b.lp,
            &[
                KernelArg::Buf(input),
                KernelArg::Buf(&raw),
                KernelArg::U32(self.a.pu),
                KernelArg::U32(b.nbu),
                KernelArg::U32(u32::from(self.p.invert)),
                KernelArg::U32(first),
            ],
        )?;
        drop(uploaded);
        Ok(raw)
    }

    /// Lowpass (with `preprocess` and taps): `raw` filtered along y into `t1`, then along x
    /// into a new image, returned; `None` without.
    pub(super) fn lowpass(
        &mut self,
        b: &Batch,
        raw: &E::Buffer,
        t1: &E::Buffer,
    ) -> Result<Option<E::Buffer>> {
        let (p, a) = (self.p, &self.a);
        let (true, Some(tb)) = (p.preprocess, &self.tb.taps_buf) else {
            return Ok(None);
        };
        let low = self.e.alloc(b.img_bytes)?;
        let tr = to_u32(
            self.tb.taps.as_ref().map_or(0, |t| t.len() - 1),
            "lowpass radius",
        )?;
        for (entry, src, dst) in [
            ("locate_lowpass_y", raw, t1),
            ("locate_lowpass_x", t1, &low),
        ] {
            self.k.launch(
                entry,
                &b.g3,
                &b.l3,
                &[
                    KernelArg::Buf(src),
                    KernelArg::Buf(dst),
                    KernelArg::Buf(tb),
                    KernelArg::U32(tr),
                    KernelArg::U32(a.hu),
                    KernelArg::U32(a.wu),
                    KernelArg::U32(b.nbu),
                ],
            )?;
        }
        Ok(Some(low))
    }

    /// Bandpass: the boxcar background of `raw` (with `preprocess` and a boxcar: integers
    /// along y into `t1`, floats along the columns into `t1`), then per row its boxcar along x,
    /// subtracted from `low` and clipped into `bp`, with the row's maximum into `rowmax`.
    pub(super) fn bandpass(
        &mut self,
        b: &Batch,
        raw: &E::Buffer,
        low: &E::Buffer,
        t1: &E::Buffer,
        bp: &E::Buffer,
        rowmax: &E::Buffer,
    ) -> Result<()> {
        let (p, a) = (self.p, &self.a);
        let bg_src = if p.preprocess && a.mode == 2 {
            self.k.launch(
                "locate_box_int_y",
                &b.g3,
                &b.l3,
                &[
                    KernelArg::Buf(raw),
                    KernelArg::Buf(t1),
                    KernelArg::U32(a.hu),
                    KernelArg::U32(a.wu),
                    KernelArg::U32(b.nbu),
                    KernelArg::U32(a.smu),
                ],
            )?;
            t1
        } else if p.preprocess && a.mode != 3 {
            self.k.launch(
                "locate_box_cols",
                &b.lines(self.w),
                &b.l2,
                &[
                    KernelArg::Buf(raw),
                    KernelArg::Buf(t1),
                    KernelArg::U32(a.hu),
                    KernelArg::U32(a.wu),
                    KernelArg::U32(b.nbu),
                    KernelArg::U32(a.smu),
                    KernelArg::U32(a.mode),
                ],
            )?;
            t1
        } else {
            raw
        };
        self.k.launch(
            "locate_box_rows",
            &b.lines(self.h),
            &b.l2,
            &[
                KernelArg::Buf(bg_src),
                KernelArg::Buf(low),
                KernelArg::Buf(bp),
                KernelArg::Buf(rowmax),
                KernelArg::Buf(&self.tb.prm),
                KernelArg::U32(a.hu),
                KernelArg::U32(a.wu),
                KernelArg::U32(b.nbu),
                KernelArg::U32(a.smu),
                KernelArg::U32(a.mode),
                KernelArg::U32(u32::from(p.preprocess)),
            ],
        )?;
        Ok(())
    }

    /// Threshold: the per-frame rescale factor from `rowmax` (`scale`), the bandpass `bp`
    /// rescaled to the integer image (`img`) with its histogram, and from that the percentile
    /// threshold per frame (`vmin`). Returns `(scale, img, vmin)`.
    pub(super) fn threshold(
        &mut self,
        b: &Batch,
        bp: &E::Buffer,
        rowmax: &E::Buffer,
    ) -> Result<(E::Buffer, E::Buffer, E::Buffer)> {
        let (e, a, nb) = (self.e, &self.a, b.nb);
        let prm = &self.tb.prm;
        let scale = e.alloc(nb * R::SIZE)?;
        self.k.launch(
            "locate_scale",
            &b.gf,
            &b.lf,
            &[
                KernelArg::Buf(rowmax),
                KernelArg::Buf(&scale),
                KernelArg::Buf(prm),
                KernelArg::U32(a.hu),
                KernelArg::U32(b.nbu),
                KernelArg::U32(a.identity),
            ],
        )?;
        let img = e.alloc(nb * self.plane * 4)?;
        let hist = e.zeroed(nb * self.nbins * 4)?;
        self.k.launch(
            "locate_rescale",
            &b.gp,
            &b.lp,
            &[
                KernelArg::Buf(bp),
                KernelArg::Buf(&scale),
                KernelArg::Buf(prm),
                KernelArg::Buf(&img),
                KernelArg::Buf(&hist),
                KernelArg::U32(a.pu),
                KernelArg::U32(b.nbu),
                KernelArg::U32(a.nbinsu),
                KernelArg::U32(a.identity),
            ],
        )?;
        let vmin = e.alloc(nb * 4)?;
        self.k.launch(
            "locate_percentile",
            &b.gf,
            &b.lf,
            &[
                KernelArg::Buf(&hist),
                KernelArg::Buf(prm),
                KernelArg::Buf(&vmin),
                KernelArg::U32(a.nbinsu),
                KernelArg::U32(b.nbu),
            ],
        )?;
        drop(hist);
        Ok((scale, img, vmin))
    }

    /// Maxima: `img` dilated along x into `dil`, then the local maxima of `img` over `vmin`
    /// into the candidate buffer, grown (and the kernel run again) until they all fit.
    /// Returns the number of candidates.
    pub(super) fn maxima(
        &mut self,
        b: &Batch,
        img: &E::Buffer,
        dil: &E::Buffer,
        vmin: &E::Buffer,
    ) -> Result<usize> {
        let (e, a) = (self.e, &self.a);
        self.k.launch(
            "locate_dilate_x",
            &b.g3,
            &b.l3,
            &[
                KernelArg::Buf(img),
                KernelArg::Buf(dil),
                KernelArg::U32(a.lou),
                KernelArg::U32(a.hiu),
                KernelArg::U32(a.hu),
                KernelArg::U32(a.wu),
                KernelArg::U32(b.nbu),
            ],
        )?;
        loop {
            let counter = e.zeroed(4)?;
            self.k.launch(
                "locate_maxima",
                &b.g3,
                &b.l3,
                &[
                    KernelArg::Buf(img),
                    KernelArg::Buf(dil),
                    KernelArg::Buf(vmin),
                    KernelArg::U32(a.lou),
                    KernelArg::U32(a.hiu),
                    KernelArg::U32(a.marginu),
                    KernelArg::U32(a.hu),
                    KernelArg::U32(a.wu),
                    KernelArg::U32(b.nbu),
                    KernelArg::Buf(&counter),
                    KernelArg::Buf(&self.cand_buf),
                    KernelArg::U32(to_u32(self.cap, "candidates")?),
                ],
            )?;
            let t = Instant::now();
            let c = e.read(&counter, 4)?;
            self.read_s += t.elapsed().as_secs_f64();
            let n = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
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
            self.cand_buf = e.alloc(self.cap * 4)?;
        }
    }

    /// Refinement: the iterated centroid and the characterisation of the `n_cand` candidates
    /// (on `img`, masses on `raw`), read back. Returns the 7 values per candidate and the
    /// candidates' flat indices (both empty without candidates).
    pub(super) fn refine(
        &mut self,
        img: &E::Buffer,
        raw: &E::Buffer,
        n_cand: usize,
    ) -> Result<(Vec<f64>, Vec<u32>)> {
        let (e, a, tb) = (self.e, &self.a, &self.tb);
        let mut refined: Vec<f64> = Vec::new();
        let mut cand: Vec<u32> = Vec::new();
        if n_cand > 0 {
            let res = e.alloc(n_cand * 7 * R::SIZE)?;
            self.k.launch(
                "locate_refine",
                &[round_up_to(n_cand, LINE_WG)],
                &[LINE_WG],
                &[
                    KernelArg::Buf(img),
                    KernelArg::Buf(raw),
                    KernelArg::Buf(&self.cand_buf),
                    KernelArg::Buf(&tb.mask_buf),
                    KernelArg::Buf(&tb.r2_buf),
                    KernelArg::Buf(&tb.c2_buf),
                    KernelArg::Buf(&tb.s2_buf),
                    KernelArg::Buf(&res),
                    KernelArg::U32(to_u32(tb.mk.len(), "mask size")?),
                    KernelArg::U32(a.ru),
                    KernelArg::U32(a.hu),
                    KernelArg::U32(a.wu),
                    KernelArg::U32(to_u32(n_cand, "candidates")?),
                    KernelArg::U32(a.itu),
                ],
            )?;
            let t = Instant::now();
            let cb = e.read(&self.cand_buf, n_cand * 4)?;
            refined = decode::<R>(&e.read(&res, n_cand * 7 * R::SIZE)?);
            self.read_s += t.elapsed().as_secs_f64();
            cand = cb
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
        }
        Ok((refined, cand))
    }

    /// Background noise (only needed when a frame has a feature: with `characterize` and
    /// candidates): the row distances of `img` to the mask into `dist`, then two passes of
    /// per-row and per-frame sums over `raw`. Returns `(n, mean, sq, sum)` per frame, as
    /// [`Run::host_finish`] reads them.
    pub(super) fn noise(
        &mut self,
        b: &Batch,
        img: &E::Buffer,
        dist: &E::Buffer,
        raw: &E::Buffer,
        n_cand: usize,
    ) -> Result<Option<Vec<f64>>> {
        if !(self.p.characterize && n_cand > 0) {
            return Ok(None);
        }
        let (e, a, nb, h) = (self.e, &self.a, b.nb, self.h);
        self.k.launch(
            "locate_row_dist",
            &b.g3,
            &b.l3,
            &[
                KernelArg::Buf(img),
                KernelArg::Buf(dist),
                KernelArg::U32(a.ru),
                KernelArg::U32(a.hu),
                KernelArg::U32(a.wu),
                KernelArg::U32(b.nbu),
            ],
        )?;
        let rows = e.alloc(nb * h * 3 * R::SIZE)?;
        let stats = e.alloc(nb * 4 * R::SIZE)?;
        for pass in 0..2u32 {
            self.k.launch(
                "locate_noise_rows",
                &b.lines(h),
                &b.l2,
                &[
                    KernelArg::Buf(dist),
                    KernelArg::Buf(&self.tb.hw_buf),
                    KernelArg::Buf(raw),
                    KernelArg::Buf(&stats),
                    KernelArg::Buf(&rows),
                    KernelArg::Buf(img),
                    KernelArg::U32(a.ru),
                    KernelArg::U32(a.hu),
                    KernelArg::U32(a.wu),
                    KernelArg::U32(b.nbu),
                    KernelArg::U32(pass),
                ],
            )?;
            self.k.launch(
                "locate_noise_frame",
                &b.gf,
                &b.lf,
                &[
                    KernelArg::Buf(&rows),
                    KernelArg::Buf(&stats),
                    KernelArg::U32(a.hu),
                    KernelArg::U32(b.nbu),
                    KernelArg::U32(pass),
                ],
            )?;
        }
        let t = Instant::now();
        let s = decode::<R>(&e.read(&stats, nb * 4 * R::SIZE)?);
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
