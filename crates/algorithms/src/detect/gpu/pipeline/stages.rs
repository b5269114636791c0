//! The stages of one run of frames on the device, once its frames and coefficients are up
//! (see [`super::run_typed`]): per batch of frames the two LoG passes into the cube, its
//! per-frame extrema and thresholds (on the device), the 3×3×3 peaks and their reads, then the
//! host's ordering and overlap pruning, which overlaps the device's next batch
//! ([`LogRun::run_all`]); `cert`: the certified search's stages instead of the thresholds and
//! the peaks.

use std::marker::PhantomData;

use bridge_core::exec::{Buffer, Executor, Grid, Local, TypedExecutor};
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::{Cand, Certify, Coeffs, Fused, Timed, order_and_prune, round_up_to, to_u32};
use crate::detect::blob_log::{Blob, BlobLogParams, border_covers};
use crate::detect::gpu::DevReal;
use crate::detect::kernels::MINMAX_WG;
use crate::detect::kernels::blob_log_kernels::Kernels;
use crate::detect::real::Real;

mod cert;

use cert::{CertFound, CertRun};

/// One run of frames on the device once its frames and coefficients are up: the sizes,
/// options and buffers every batch of frames uses, the host's timings and the results so far.
///
/// The device buffers are the last fields, in the reverse order of their allocation: fields
/// drop in declaration order, so the last allocated is freed first, as for locals.
pub(super) struct LogRun<'a, 'c, E: Executor, T, R: DevReal, A: DevReal> {
    /// The device.
    e: &'a E,
    /// The program's typed launchers, built with the options of [`super::kernel_options`].
    k: Kernels<'a, E>,
    /// The detection parameters.
    p: &'a BlobLogParams,
    /// σ of each scale, in the working type.
    sigmas: Vec<T>,
    /// Frames in the run.
    n_frames: usize,
    /// Rows of a frame.
    h: usize,
    /// Columns of a frame.
    w: usize,
    /// Number of scales.
    ns: usize,
    /// Pixels per frame.
    plane: usize,
    /// Cube values per frame (`ns · plane`).
    per_frame: usize,
    /// Outputs per work item of `log_pass_y` ([`super::pass_blocking`]).
    rows: usize,
    /// Outputs per work item of `log_pass_x` ([`super::pass_blocking`]).
    cols: usize,
    /// Work-group shape of the per-voxel kernels ([`super::local_xy`]).
    local: (usize, usize),
    /// How the LoG passes run ([`super::fused_pass`]): fused in `log_pass_block` or
    /// `log_pass_tile`, or the two passes through the scratch cubes `a0`, `a2`.
    fused: Fused,
    /// The largest kernel radius (the tile's halo).
    rmax: usize,
    /// Frames per batch: what `max_device_bytes`, the 32-bit index and CUDA's grid allow.
    chunk: usize,
    /// `h`, `w` and `ns` as kernel arguments.
    hu: u32,
    /// See `hu`.
    wu: u32,
    /// See `hu`.
    nsu: u32,
    /// `exclude_border` (y, x) as kernel arguments, at most the frame's size (a border as
    /// wide as the frame excludes it all, as any wider one does).
    border: (u32, u32),
    /// Whether the excluded border covers the whole frame (no peaks to look for).
    border_empty: bool,
    /// Work groups per frame of `cube_minmax` (the two passes).
    groups: usize,
    /// Capacity of the candidate buffers, grown when a batch has more.
    cap: usize,
    /// Whether the cube is read back.
    want_cube: bool,
    /// Seconds spent reading extrema and candidates.
    pub(super) read_s: f64,
    /// Seconds spent ordering and pruning on the host.
    pub(super) prune_s: f64,
    /// Survivors per frame so far.
    pub(super) blobs: Vec<Vec<Blob>>,
    /// The certified search ([`Certify`]), with its buffers; `None`: the cube in the working
    /// type, searched exactly.
    cert: Option<CertRun<'c, E, T>>,
    /// Frames the certified search left to the CPU ([`blobs_of_device_search`]).
    pub(super) host_frames: usize,
    /// Cube per frame so far (when `want_cube`).
    pub(super) cubes: Vec<Vec<f64>>,
    /// Candidate values (`cap`).
    val_buf: Buffer<E, R>,
    /// Candidate cube indices (`cap`).
    idx_buf: Buffer<E, u32>,
    /// The LoG cube of a batch.
    cube: Buffer<E, R>,
    /// Scratch of the passes: the `g0` pass along y.
    a0: Buffer<E, R>,
    /// Scratch of the passes: the `g2` pass along y.
    a2: Buffer<E, R>,
    /// The run's frames in the working type.
    img: Buffer<E, R>,
    /// See [`Coeffs::s2`].
    s2: Buffer<E, R>,
    /// See [`Coeffs::meta`].
    meta: Buffer<E, u32>,
    /// See [`Coeffs::taps`].
    taps: Buffer<E, A>,
    /// The working type.
    _t: PhantomData<T>,
}

/// What a batch's kernels found, read back: per frame the candidates, or with the certified
/// search per frame what the f32 search found.
pub(super) enum Collected<R> {
    /// Per frame the maxima above the threshold.
    Plain(Vec<Vec<Cand<R>>>),
    /// Per frame what the certified search found, from frame `.0` of the run.
    Cert(usize, Vec<CertFound>),
}

/// A batch whose kernels are enqueued: its grids, its thresholds' buffer (the peaks may run
/// again on it; with the certified search each frame's margins) and the peaks' counter
/// (`None` when the border covers the frames).
struct Launched<E: Executor, R: DevReal> {
    b: Batch,
    thr: Buffer<E, R>,
    counter: Option<Buffer<E, i32>>,
    /// With the certified search: the counters of the voxels near the extrema (all, then per
    /// frame).
    ncount: Option<Buffer<E, i32>>,
    /// The partial extrema (the fused passes' regions', else `cube_minmax`'s), kept until
    /// the batch is read: the peaks read them again when they run again.
    part: Buffer<E, R>,
}

/// One batch of frames: its place in the run and the launch grids of its kernels.
struct Batch {
    /// First frame of the batch in the run.
    frame0: usize,
    /// Frames in the batch.
    nb: usize,
    /// `nb` as a kernel argument.
    nbu: u32,
    /// Work-group shape of the per-voxel kernels.
    local: [usize; 3],
    /// Grid of `log_peaks`: one work item per voxel.
    global: [usize; 3],
    /// Grid of `log_pass_y`: `rows` outputs per work item.
    global_y: [usize; 3],
    /// Grid of `log_pass_x`: `cols` outputs per work item.
    global_x: [usize; 3],
}

impl<'a, 'c, E: Executor, T: Real, R: DevReal, A: DevReal> LogRun<'a, 'c, E, T, R, A> {
    /// Sizes the batches (device memory, 32-bit cube index, CUDA's grid) and allocates the
    /// cube, its two scratch buffers (one element each where the passes are fused) and
    /// the candidate buffers. `dims` is `(n_frames, h, w, rows, cols, lx, ly)`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        k: Kernels<'a, E>,
        p: &'a BlobLogParams,
        sigmas: Vec<T>,
        coeffs: Coeffs<E, R, A>,
        img: Buffer<E, R>,
        dims: (usize, usize, usize, usize, usize, usize, usize),
        fused: Fused,
        max_device_bytes: usize,
        want_cube: bool,
        cert: Option<(Certify<'c, T>, usize)>,
    ) -> Result<Self> {
        let (n_frames, h, w, rows, cols, lx, ly) = dims;
        let e = k.program().executor();
        let ns = sigmas.len();
        let plane = h * w;
        let per_frame = ns * plane;
        // the cube, and the two scratch cubes of the unfused passes
        let cubes = if fused.fused() { 1 } else { 3 };
        let frame_bytes = cubes * per_frame * R::SIZE;
        let mut chunk = (max_device_bytes / frame_bytes.max(1)).clamp(1, n_frames.max(1));
        let idx_limit = (u32::MAX as usize) / per_frame.max(1);
        if idx_limit == 0 {
            return Err(BridgeError::invalid_argument(
                "frame",
                format!("{h}x{w} with {ns} scales exceeds the device's 32-bit cube index"),
            ));
        }
        // CUDA grids hold at most 65535 blocks along y and z (frames × scales along z)
        chunk = chunk.min(idx_limit).min((65_535 / ns.max(1)).max(1));
        let cube_len = chunk * per_frame;
        let scratch = if fused.fused() { 1 } else { cube_len };
        let a2 = e.alloc_elems::<R>(scratch)?;
        let a0 = e.alloc_elems::<R>(scratch)?;
        let cube = e.alloc_elems::<R>(cube_len)?;
        let (hu, wu, nsu) = (
            to_u32(h, "rows")?,
            to_u32(w, "columns")?,
            to_u32(ns, "num_sigma")?,
        );
        let (by, bx) = p.exclude_border;
        let border = (
            to_u32(by.min(h), "exclude_border")?,
            to_u32(bx.min(w), "exclude_border")?,
        );
        let border_empty = border_covers(p.exclude_border, h, w);
        let groups = per_frame.div_ceil(MINMAX_WG).clamp(1, 64);
        let cap = (chunk * plane / 32).max(1024);
        let idx_buf = e.alloc_elems::<u32>(cap)?;
        let val_buf = e.alloc_elems::<R>(cap)?;
        let cert = match cert {
            Some((c, scan_groups)) => Some(CertRun::new(e, c, cap, chunk, scan_groups)?),
            None => None,
        };
        Ok(Self {
            e,
            k,
            p,
            sigmas,
            n_frames,
            h,
            w,
            ns,
            plane,
            per_frame,
            rows,
            cols,
            local: (lx, ly),
            fused,
            rmax: coeffs.rmax,
            chunk,
            hu,
            wu,
            nsu,
            border,
            border_empty,
            groups,
            cap,
            want_cube,
            read_s: 0.0,
            prune_s: 0.0,
            blobs: Vec::with_capacity(n_frames),
            cert,
            host_frames: 0,
            cubes: Vec::new(),
            val_buf,
            idx_buf,
            cube,
            a0,
            a2,
            img,
            s2: coeffs.s2,
            meta: coeffs.meta,
            taps: coeffs.taps,
            _t: PhantomData,
        })
    }

    /// Every batch of the run, pipelined: batch k's candidates are read (the host waits for
    /// its kernels), batch k + 1's kernels are enqueued, and batch k is ordered and pruned on
    /// the host while the device computes batch k + 1. The reads of batch k complete before
    /// batch k + 1's kernels reuse its buffers (one in-order queue or stream). The last
    /// batch's candidates are returned unpruned: the caller prunes them ([`Self::prune`])
    /// once the device is another thread's (its [`super::Turn`] passed on).
    pub(super) fn run_all(&mut self, timed: &mut Timed<'_>) -> Result<Collected<R>> {
        if self.n_frames == 0 {
            return Ok(Collected::Plain(Vec::new()));
        }
        let mut batch = self.launch(0, timed)?;
        loop {
            let next = batch.b.frame0 + batch.b.nb;
            let per = self.collect(batch, timed)?;
            if next >= self.n_frames {
                return Ok(per);
            }
            batch = self.launch(next, timed)?;
            self.prune(per)?;
        }
    }

    /// Enqueues the kernels of the batch of frames from `frame0` (at most `chunk` frames): the
    /// LoG passes into the cube, the thresholds from its extrema (on the device: no read, no
    /// upload) and the peaks. Nothing waits for them.
    fn launch(&mut self, frame0: usize, timed: &mut Timed<'_>) -> Result<Launched<E, R>> {
        let b = self.grids(frame0)?;
        // per frame, the partial extrema: the fused pass folds its tiles', else cube_minmax
        // its work groups'
        let part = self.e.alloc_elems::<R>(b.nb * self.partials() * 2)?;
        self.log_passes(&b, &part, timed)?;
        if self.cert.is_some() {
            let fr = self.cert_frames(&b, &part, timed)?;
            let (counter, ncount) = self.enqueue_cert_peaks(&b, &fr, &part, timed)?;
            return Ok(Launched {
                b,
                thr: fr,
                counter: Some(counter),
                ncount: Some(ncount),
                part,
            });
        }
        let thr = self.thresholds(&b, &part, timed)?;
        let counter = if self.border_empty {
            None
        } else {
            Some(self.enqueue_peaks(&b, &thr, &part, timed)?)
        };
        Ok(Launched {
            b,
            thr,
            counter,
            ncount: None,
            part,
        })
    }

    /// Waits for a launched batch and reads what the host needs: its cube when asked, and its
    /// candidates per frame (the peaks again on grown buffers when there were more than fit).
    fn collect(&mut self, mut l: Launched<E, R>, timed: &mut Timed<'_>) -> Result<Collected<R>> {
        if self.want_cube {
            self.read_cube(l.b.nb)?;
        }
        if let (Some(counter), Some(ncount)) = (l.counter.as_ref(), l.ncount.as_ref()) {
            return self.collect_cert(&l, (counter, ncount), timed);
        }
        let mut per: Vec<Vec<Cand<R>>> = vec![Vec::new(); l.b.nb];
        if let Some(counter) = l.counter.take() {
            let count = self.count_peaks(&l, counter, timed)?;
            if count > 0 {
                self.read_candidates(count, &mut per)?;
            }
        }
        Ok(Collected::Plain(per))
    }

    /// The batch from `frame0` and its launch grids.
    fn grids(&self, frame0: usize) -> Result<Batch> {
        let (h, w, ns) = (self.h, self.w, self.ns);
        let nb = self.chunk.min(self.n_frames - frame0);
        let nbu = to_u32(nb, "batch")?;
        let (lx, ly) = self.local;
        let global = [round_up_to(w, lx), round_up_to(h, ly), nb * ns];
        let global_y = [
            round_up_to(w, lx),
            round_up_to(h.div_ceil(self.rows), ly),
            nb * ns,
        ];
        let global_x = [
            round_up_to(w.div_ceil(self.cols), lx),
            round_up_to(h, ly),
            nb * ns,
        ];
        let local = [lx, ly, 1];
        Ok(Batch {
            frame0,
            nb,
            nbu,
            local,
            global,
            global_y,
            global_x,
        })
    }

    /// The separable LoG of the batch's frames at every scale: `log_pass_block` or
    /// `log_pass_tile` (both passes of a region in local memory, its extrema folded into
    /// `part`) where [`Self::fused`] says so, else `log_pass_y` (the `g0` and `g2` passes
    /// along y into `a0`, `a2`) then `log_pass_x` (the cube, scaled by σ²).
    fn log_passes(&self, b: &Batch, part: &Buffer<E, R>, timed: &mut Timed<'_>) -> Result<()> {
        let k = &self.k;
        let (hu, wu, nsu, nbu) = (self.hu, self.wu, self.nsu, b.nbu);
        let frame0 = to_u32(b.frame0, "frame")?;
        let rmax = to_u32(self.rmax, "kernel radius")?;
        let inf = R::from_f64(f64::INFINITY);
        if self.fused.fused() {
            let (lx, ly) = self.local;
            let (rows, width) = self.fused.extent(lx);
            let block = matches!(self.fused, Fused::Block { .. });
            // a block's work group is (lx, ly), a tile's (lx, 1)
            let (groups_y, local) = if block {
                (self.h.div_ceil(rows) * ly, [lx, ly, 1])
            } else {
                (self.h.div_ceil(rows), [lx, 1, 1])
            };
            let global = [self.w.div_ceil(width) * lx, groups_y, b.nb * self.ns];
            let tile = Local::<R>::elems(2 * rows * (width + 2 * self.rmax));
            let grid = Grid::new(&global, &local);
            macro_rules! fused {
                ($kernel:ident) => {
                    k.$kernel(
                        grid, &self.img, frame0, &self.taps, &self.meta, &self.s2, &self.cube,
                        part, hu, wu, nsu, rmax, inf, tile,
                    )
                };
            }
            let name = if block {
                "log_pass_block"
            } else {
                "log_pass_tile"
            };
            return timed(name, &mut || {
                if block {
                    fused!(log_pass_block)
                } else {
                    fused!(log_pass_tile)
                }
            });
        }
        timed("log_pass_y", &mut || {
            k.log_pass_y(
                Grid::new(&b.global_y, &b.local),
                &self.img,
                frame0,
                &self.taps,
                &self.meta,
                &self.a2,
                &self.a0,
                hu,
                wu,
                nsu,
                nbu,
            )
        })?;
        timed("log_pass_x", &mut || {
            k.log_pass_x(
                Grid::new(&b.global_x, &b.local),
                &self.a2,
                &self.a0,
                &self.taps,
                &self.meta,
                &self.s2,
                &self.cube,
                hu,
                wu,
                nsu,
                nbu,
            )
        })
    }

    /// Reads the cube of the batch's `nb` frames and keeps it per frame, widened to f64.
    fn read_cube(&mut self, nb: usize) -> Result<()> {
        let per_frame = self.per_frame;
        let cube = self.e.read_elems(&self.cube, nb * per_frame)?;
        for f in cube.chunks_exact(per_frame) {
            self.cubes
                .push(f.iter().map(|&v| Real::to_f64(v)).collect());
        }
        Ok(())
    }

    /// Partial extrema per frame: the fused pass's regions (scales × region rows × region
    /// columns), else `cube_minmax`'s work groups.
    fn partials(&self) -> usize {
        if !self.fused.fused() {
            return self.groups;
        }
        let (rows, cols) = self.fused.region(self.local.0);
        self.ns * self.h.div_ceil(rows) * self.w.div_ceil(cols)
    }

    /// The batch's partial extrema per frame in `part`: the fused pass left them; else
    /// `cube_minmax` finds them per work group. Returns their number per frame.
    fn partial_extrema(
        &self,
        b: &Batch,
        part: &Buffer<E, R>,
        timed: &mut Timed<'_>,
    ) -> Result<u32> {
        let groups_u = to_u32(self.partials(), "groups")?;
        if !self.fused.fused() {
            let per_frame = to_u32(self.per_frame, "cube size")?;
            let (global, local) = ([self.groups * MINMAX_WG, b.nb], [MINMAX_WG, 1]);
            timed("cube_minmax", &mut || {
                self.k.cube_minmax(
                    Grid::new(&global, &local),
                    &self.cube,
                    part,
                    per_frame,
                    groups_u,
                )
            })?;
        }
        Ok(groups_u)
    }

    /// The thresholds as kernel arguments: `(has_abs, abs)`, `(has_rel, rel)`.
    fn threshold_args(&self) -> ((u32, f64), (u32, f64)) {
        let p = self.p;
        (
            (u32::from(p.threshold.is_some()), p.threshold.unwrap_or(0.0)),
            (
                u32::from(p.threshold_rel.is_some()),
                p.threshold_rel.unwrap_or(0.0),
            ),
        )
    }

    /// Each frame's threshold, on the device: the partial extrema in `part` (the fused pass
    /// left them; else `cube_minmax` finds them per work group), which `frame_thresholds`
    /// folds per frame with the CPU's arithmetic in `R`
    /// (`blob_log::scale_space::threshold_from`; `+inf` for a constant cube).
    fn thresholds(
        &mut self,
        b: &Batch,
        part: &Buffer<E, R>,
        timed: &mut Timed<'_>,
    ) -> Result<Buffer<E, R>> {
        let (e, k, nb) = (self.e, &self.k, b.nb);
        let groups_u = self.partial_extrema(b, part, timed)?;
        let thr = e.alloc_elems::<R>(nb)?;
        let ((has_abs, abs_thr), (has_rel, rel)) = self.threshold_args();
        let (global, local) = ([nb * MINMAX_WG], [MINMAX_WG]);
        timed("frame_thresholds", &mut || {
            k.frame_thresholds(
                Grid::new(&global, &local),
                part,
                &thr,
                groups_u,
                has_abs,
                R::from_f64(abs_thr),
                has_rel,
                R::from_f64(rel),
                R::from_f64(f64::INFINITY),
            )
        })?;
        Ok(thr)
    }

    /// Enqueues `log_peaks` on the batch: the 3×3×3 maxima over their frame's threshold,
    /// outside the border, into the candidate buffers (at most `cap`). Returns its counter.
    fn enqueue_peaks(
        &self,
        b: &Batch,
        thr_buf: &Buffer<E, R>,
        part: &Buffer<E, R>,
        timed: &mut Timed<'_>,
    ) -> Result<Buffer<E, i32>> {
        let (hu, wu, nsu, nbu) = (self.hu, self.wu, self.nsu, b.nbu);
        let (by, bx) = self.border;
        let counter = self.e.zeroed_elems::<i32>(1)?;
        let cap = to_u32(self.cap, "candidates")?;
        timed("log_peaks", &mut || {
            self.k.log_peaks(
                Grid::new(&b.global, &b.local),
                &self.cube,
                thr_buf,
                hu,
                wu,
                nsu,
                nbu,
                by,
                bx,
                &counter,
                &self.idx_buf,
                &self.val_buf,
                cap,
                part,
            )
        })?;
        Ok(counter)
    }

    /// The count of [`Self::enqueue_peaks`]' candidates (the host waits for it here), with
    /// `log_peaks` run again on buffers grown to fit when there were more than `cap`.
    fn count_peaks(
        &mut self,
        l: &Launched<E, R>,
        first: Buffer<E, i32>,
        timed: &mut Timed<'_>,
    ) -> Result<usize> {
        let e = self.e;
        let mut counter = first;
        let count = loop {
            let n = e.read_elems(&counter, 1)?.first().copied().unwrap_or(0);
            let n = usize::try_from(n).map_err(|_| {
                BridgeError::backend("detect", None, "candidate counter overflowed")
            })?;
            if n <= self.cap {
                break n;
            }
            self.cap = n.next_power_of_two();
            self.idx_buf = e.alloc_elems::<u32>(self.cap)?;
            self.val_buf = e.alloc_elems::<R>(self.cap)?;
            counter = self.enqueue_peaks(&l.b, &l.thr, &l.part, timed)?;
        };
        Ok(count)
    }

    /// Reads the first `count` candidates and decodes each cube index into its frame of the
    /// batch, scale and raster position, appending it to that frame's list in `per`.
    fn read_candidates(&mut self, count: usize, per: &mut [Vec<Cand<R>>]) -> Result<()> {
        let t = std::time::Instant::now();
        let idx = self.e.read_elems(&self.idx_buf, count)?;
        let val = self.e.read_elems(&self.val_buf, count)?;
        self.read_s += t.elapsed().as_secs_f64();
        for (&o, &v) in idx.iter().zip(&val) {
            let (b, s, y, x) = self.voxel_at(o);
            if let Some(list) = per.get_mut(b) {
                list.push(Cand { y, x, s, v });
            }
        }
        Ok(())
    }

    /// The frame of the batch, scale, row and column of the batch cube's flat index `o`.
    fn voxel_at(&self, o: u32) -> (usize, usize, usize, usize) {
        let o = o as usize;
        let rem = o % self.per_frame;
        let yx = rem % self.plane;
        (
            o / self.per_frame,
            rem / self.plane,
            yx / self.w,
            yx % self.w,
        )
    }

    /// The CPU's ordering and overlap pruning of each frame's candidates, frames in parallel
    /// ([`order_and_prune`]); with the certified search, each frame settled with exact voxels
    /// first ([`blobs_of_device_search`]). The survivors join the run's results.
    pub(super) fn prune(&mut self, per: Collected<R>) -> Result<()> {
        let (sigmas, p) = (&self.sigmas, self.p);
        let t = std::time::Instant::now();
        let done: Vec<Vec<Blob>> = match per {
            Collected::Plain(per) => per
                .into_par_iter()
                .map(|c| order_and_prune::<T, R>(c, sigmas, p.overlap))
                .collect(),
            Collected::Cert(frame0, found) => self.settle(frame0, found)?,
        };
        self.prune_s += t.elapsed().as_secs_f64();
        self.blobs.extend(done);
        Ok(())
    }
}
