//! The state of one run of frames of one shape and pixel type ([`Run`]), its setup
//! ([`Run::new`]), the order of the stages of a sub-batch ([`Run::batch`]) and the run itself
//! ([`run_typed`]: the sub-batches in order, the progress, the kernel time and the trace).
//! The stages are in [`super::stages`].

use std::time::Instant;

use bridge_core::exec::{Buffer, Executor, TypedExecutor};
use bridge_core::{BridgeError, Result};

use super::{Kind, LINE_WG, LocateOut, Src, reals, widen};
use crate::detect::gpu::pipeline::{KernelClock, Turn, local_xy, prep_wg, round_up_to, to_u32};
use crate::detect::gpu::{DevReal, GpuDetectConfig};
use crate::detect::kernels::locate_kernels::Kernels;
use crate::detect::kernels::{FRAME_WG, LOCATE_OPTS_F32, LOCATE_OPTS_F64};
use crate::detect::locate::{Feature, LocateParams, Plan, lowpass_taps, mask, mask_tables};
use crate::detect::{trace, trace_enabled};

/// The kernel launches of a run and their time: the device's account where the executor keeps
/// one ([`KernelClock`], per sub-batch), else the host time around the launches (traced: each
/// waited for).
pub(super) struct Launcher<'a, E: Executor> {
    /// The typed launchers of the `LOCATE` kernels, built for the device type.
    k: Kernels<'a, E>,
    /// Whether `ARRAYBRIDGE_TRACE` is on.
    tracing: bool,
    /// Seconds spent in launches (host time; the device's account of each sub-batch where it
    /// keeps one, taken while the sub-batch holds the device's turn: `Run::batch`).
    kernel_s: f64,
    /// Seconds per kernel (traced only; the device's time where it keeps an account).
    per_kernel: Vec<(&'static str, f64)>,
}

impl<'a, E: Executor> Launcher<'a, E> {
    /// A launcher of the `LOCATE` kernels in the device type of `R::SIZE` bytes.
    fn new<R: DevReal>(e: &'a E) -> Self {
        let tracing = trace_enabled();
        let opts: &'static [&'static str] = if R::SIZE == 8 {
            LOCATE_OPTS_F64
        } else {
            LOCATE_OPTS_F32
        };
        Launcher {
            k: Kernels::new(e, opts),
            tracing,
            kernel_s: 0.0,
            per_kernel: Vec::new(),
        }
    }

    /// Launch one `LOCATE` kernel through its typed launcher (`launch` calls it) and add its
    /// time (traced: each waited for, its time filed under `name`, the kernel's name).
    pub(super) fn launch(
        &mut self,
        name: &'static str,
        launch: impl FnOnce(&Kernels<'a, E>) -> Result<()>,
    ) -> Result<()> {
        let e = self.k.program().executor();
        // traced with a device account: this kernel's own device time
        let device0 = self.tracing.then(|| e.kernel_seconds()).flatten();
        let t = Instant::now();
        launch(&self.k)?;
        if self.tracing {
            e.synchronize()?;
        }
        let dt = match (device0, e.kernel_seconds()) {
            (Some(k0), Some(k1)) => (k1 - k0).max(0.0),
            _ => t.elapsed().as_secs_f64(),
        };
        self.kernel_s += dt;
        if self.tracing {
            match self.per_kernel.iter_mut().find(|(n, _)| *n == name) {
                Some(k) => k.1 += dt,
                None => self.per_kernel.push((name, dt)),
            }
        }
        Ok(())
    }
}

/// The tables every sub-batch reads, uploaded once per run (reals in the device type `R`).
pub(super) struct Tables<E: Executor, R: DevReal> {
    /// `threshold`, the top of the integer gamut and `percentile / 100`, in the device type.
    pub(super) prm: Buffer<E, R>,
    /// The half of the lowpass kernel (with `preprocess`; `None` where there is none).
    pub(super) taps: Option<Vec<f64>>,
    /// [`Tables::taps`] on the device.
    pub(super) taps_buf: Option<Buffer<E, R>>,
    /// The mask offsets `(row, column)` of radius `r`.
    pub(super) mk: Vec<(usize, usize)>,
    /// [`Tables::mk`] on the device, as `u32` pairs.
    pub(super) mask_buf: Buffer<E, u32>,
    /// Per mask pixel: the squared radius.
    pub(super) r2_buf: Buffer<E, u32>,
    /// Per mask pixel: the cosine of twice its angle.
    pub(super) c2_buf: Buffer<E, R>,
    /// Per mask pixel: the sine of twice its angle.
    pub(super) s2_buf: Buffer<E, R>,
    /// The half-width of the mask per row offset (-1: no pixel), for the noise.
    pub(super) hw_buf: Buffer<E, i32>,
}

/// The scalar kernel arguments of a run, checked against the device's 32-bit indices.
pub(super) struct Args {
    /// Rows.
    pub(super) hu: u32,
    /// Columns.
    pub(super) wu: u32,
    /// Mask radius.
    pub(super) ru: u32,
    /// Reach of the dilation box below the pixel.
    pub(super) lou: u32,
    /// Reach of the dilation box above the pixel.
    pub(super) hiu: u32,
    /// Border without maxima.
    pub(super) marginu: u32,
    /// Boxcar width of the background.
    pub(super) smu: u32,
    /// Bins of the histogram (the integer gamut).
    pub(super) nbinsu: u32,
    /// Centroid iterations.
    pub(super) itu: u32,
    /// Pixels per frame.
    pub(super) pu: u32,
    /// Background mode: 0 float64 frames, 1 float32, 2 integers, 3 no boxcar (width ≤ 1).
    pub(super) mode: u32,
    /// 1 where the integer image is the frame itself (integer frames, no `preprocess`).
    pub(super) identity: u32,
}

impl<E: Executor, R: DevReal> Tables<E, R> {
    /// Setup, first part: the parameters, the lowpass taps (with `preprocess`) and the mask
    /// tables of `plan` uploaded, in the device type `R` where they are reals.
    fn upload(e: &E, kind: Kind, p: &LocateParams, plan: &Plan) -> Result<Self> {
        let int_max = kind.int_max();
        let thr = p
            .threshold
            .unwrap_or(if kind.is_int() { 1.0 } else { 1.0 / 255.0 });
        let prm = e.upload_slice(&reals::<R>(&[thr, int_max, p.percentile / 100.0]))?;
        let taps = if p.preprocess {
            lowpass_taps(p.noise_size)
        } else {
            None
        };
        let taps_buf = match &taps {
            Some(t) => Some(e.upload_slice(&reals::<R>(t))?),
            None => None,
        };
        let r = plan.r;
        let mk = mask(r);
        let (r2, c2, s2) = mask_tables(r, &mk);
        let mut mask_u = Vec::with_capacity(2 * mk.len());
        for &(a, b) in &mk {
            mask_u.push(to_u32(a, "mask offset")?);
            mask_u.push(to_u32(b, "mask offset")?);
        }
        let mask_buf = e.upload_slice(&mask_u)?;
        let r2_u: Vec<u32> = r2.iter().map(|&v| v as u32).collect();
        let r2_buf = e.upload_slice(&r2_u)?;
        let c2_buf = e.upload_slice(&reals::<R>(&c2))?;
        let s2_buf = e.upload_slice(&reals::<R>(&s2))?;
        // half-width of the mask per row offset (-1: no pixel), for the noise
        let mut hw = vec![-1i32; 2 * r + 1];
        for &(a, b) in &mk {
            hw[a] = hw[a].max(b as i32 - r as i32);
        }
        let hw_buf = e.upload_slice(&hw)?;
        Ok(Tables {
            prm,
            taps,
            taps_buf,
            mk,
            mask_buf,
            r2_buf,
            c2_buf,
            s2_buf,
            hw_buf,
        })
    }
}

impl Args {
    /// Setup, second part: the background mode and the identity flag of `kind`, and the
    /// scalar arguments for `h × w` frames of `plane` pixels and `nbins` histogram bins,
    /// each checked against the device's 32-bit indices.
    fn new(
        kind: Kind,
        (h, w, plane): (usize, usize, usize),
        p: &LocateParams,
        plan: &Plan,
        nbins: usize,
    ) -> Result<Self> {
        let sm = plan.smoothing;
        let mode: u32 = if sm <= 1 {
            3
        } else if kind.is_int() {
            2
        } else if kind == Kind::F32 {
            1
        } else {
            0
        };
        let identity = u32::from(!p.preprocess && kind.is_int());
        let r = plan.r;
        let (lo, hi) = plan.reach();
        let (hu, wu, ru) = (
            to_u32(h, "rows")?,
            to_u32(w, "columns")?,
            to_u32(r, "radius")?,
        );
        let (lou, hiu) = (to_u32(lo, "dilation")?, to_u32(hi, "dilation")?);
        let marginu = to_u32(plan.margin, "margin")?;
        let smu = to_u32(sm, "smoothing_size")?;
        let nbinsu = to_u32(nbins, "bins")?;
        let itu = to_u32(p.max_iterations.min(u32::MAX as usize), "max_iterations")?;
        let pu = to_u32(plane, "frame size")?;
        Ok(Args {
            hu,
            wu,
            ru,
            lou,
            hiu,
            marginu,
            smu,
            nbinsu,
            itu,
            pu,
            mode,
            identity,
        })
    }
}

/// The size and launch grids of one sub-batch.
pub(super) struct Batch {
    /// Frames in the sub-batch.
    pub(super) nb: usize,
    /// [`Batch::nb`] as a kernel argument.
    pub(super) nbu: u32,
    /// Pixels of one image of the sub-batch (elements of the device type).
    pub(super) img_len: usize,
    /// Global size per pixel, in tiles: columns, rows, frames.
    pub(super) g3: [usize; 3],
    /// Local size of [`Batch::g3`].
    pub(super) l3: [usize; 3],
    /// Global size per pixel, flat: pixels, frames.
    pub(super) gp: [usize; 2],
    /// Local size of [`Batch::gp`].
    pub(super) lp: [usize; 2],
    /// Local size of [`Batch::lines`].
    pub(super) l2: [usize; 2],
    /// Global size of the per-frame kernels: a work group of [`FRAME_WG`] a frame.
    pub(super) gf: [usize; 1],
    /// Local size of [`Batch::gf`].
    pub(super) lf: [usize; 1],
}

impl Batch {
    /// Global size per line of `n` lines: lines, frames.
    pub(super) fn lines(&self, n: usize) -> [usize; 2] {
        [round_up_to(n, LINE_WG), self.nb]
    }
}

/// The state of one run of frames of one shape and pixel type, in device type `R`: the
/// executor and the parameters, the tables and kernel arguments of the setup, the candidate
/// buffer (grown as needed, kept across sub-batches) and the time accounting.
pub(super) struct Run<'a, E: Executor, R: DevReal> {
    /// The executor.
    pub(super) e: &'a E,
    /// The pixel type of the frames.
    pub(super) kind: Kind,
    /// Rows.
    pub(super) h: usize,
    /// Columns.
    pub(super) w: usize,
    /// Pixels per frame.
    pub(super) plane: usize,
    /// The parameters.
    pub(super) p: &'a LocateParams,
    /// Their geometry.
    pub(super) plan: &'a Plan,
    /// Mask radius.
    pub(super) r: usize,
    /// Bins of the histogram (the integer gamut).
    pub(super) nbins: usize,
    /// The launches and the kernel time.
    pub(super) k: Launcher<'a, E>,
    /// The tables on the device.
    pub(super) tb: Tables<E, R>,
    /// The scalar kernel arguments.
    pub(super) a: Args,
    /// Frames in the run.
    n_frames: usize,
    /// Frames per sub-batch.
    chunk: usize,
    /// Work-group size of the tiled per-pixel kernels along the columns.
    lx: usize,
    /// Work-group size of the tiled per-pixel kernels along the rows.
    ly: usize,
    /// Work-group size of the flat per-pixel kernels.
    pwg: usize,
    /// The rows' boxcar one work item per pixel where it is exact in any order
    /// (`ARRAYBRIDGE_LOCATE_ROWS=pixel`, the default), rather than one per row.
    pub(super) rows_px: bool,
    /// The background noise by `locate_noise_flag` and `locate_noise_tiles`
    /// (`ARRAYBRIDGE_LOCATE_NOISE`: auto on GPUs), rather than `locate_noise_rows` (auto on
    /// CPU devices, whose caches serve a row a work item well).
    pub(super) noise_tiles: bool,
    /// Only the candidates that can pass `minmass` are read back (`locate_keep`;
    /// `ARRAYBRIDGE_LOCATE_KEEP=1`, the default), rather than every candidate.
    pub(super) keep: bool,
    /// Capacity of [`Run::cand_buf`] in candidates.
    pub(super) cap: usize,
    /// The candidates' flat indices.
    pub(super) cand_buf: Buffer<E, u32>,
    /// Seconds spent uploading.
    pub(super) up_s: f64,
    /// Seconds spent reading back.
    pub(super) read_s: f64,
    /// Seconds of host work.
    pub(super) host_s: f64,
}

impl<'a, E: Executor, R: DevReal> Run<'a, E, R> {
    /// Setup: the tables uploaded ([`Tables::upload`]), the kernel arguments checked
    /// ([`Args::new`]), the sub-batch size under [`GpuDetectConfig::max_device_bytes`] and the
    /// candidate buffer, for `n_frames` frames of `h × w` pixels of `kind`.
    fn new(
        e: &'a E,
        kind: Kind,
        (h, w): (usize, usize),
        p: &'a LocateParams,
        plan: &'a Plan,
        cfg: &GpuDetectConfig,
        n_frames: usize,
    ) -> Result<Self> {
        let k = Launcher::new::<R>(e);
        let plane = h * w;
        if plane > i32::MAX as usize {
            return Err(BridgeError::invalid_argument(
                "frame",
                format!("{h}x{w} exceeds the device's 32-bit pixel index"),
            ));
        }
        let nbins = kind.int_max() as usize + 1;
        let tb = Tables::<E, R>::upload(e, kind, p, plan)?;
        let a = Args::new(kind, (h, w, plane), p, plan, nbins)?;

        // device bytes per frame: input, raw, two work images, bandpass, integer image,
        // histogram, row sums
        let px_in = match kind {
            Kind::U8 => 1,
            Kind::U16 => 2,
            Kind::F32 => 4,
            Kind::F64 => R::SIZE,
        };
        let per_frame = plane * (px_in + 4 * R::SIZE + 4) + nbins * 4 + 4 * h * R::SIZE;
        let chunk = (cfg.device_budget(e) / per_frame.max(1))
            .clamp(1, n_frames.max(1))
            .min((u32::MAX as usize / plane).max(1))
            .min(65_535);
        let (lx, ly) = local_xy(e, &cfg.tuning);
        let pwg = prep_wg(&cfg.tuning);
        let rows_px = cfg.tuning.choice("ARRAYBRIDGE_LOCATE_ROWS") != "line";
        let keep = cfg.tuning.choice("ARRAYBRIDGE_LOCATE_KEEP") != "0";
        let noise_tiles = match cfg.tuning.choice("ARRAYBRIDGE_LOCATE_NOISE").as_str() {
            "tiles" => true,
            "rows" => false,
            _ => !e.is_cpu(),
        };

        let cap = 1024usize;
        let cand_buf = e.alloc_elems::<u32>(cap)?;
        Ok(Run {
            e,
            kind,
            h,
            w,
            plane,
            p,
            plan,
            r: plan.r,
            nbins,
            k,
            tb,
            a,
            n_frames,
            chunk,
            lx,
            ly,
            pwg,
            rows_px,
            noise_tiles,
            keep,
            cap,
            cand_buf,
            up_s: 0.0,
            read_s: 0.0,
            host_s: 0.0,
        })
    }

    /// The size and launch grids of a sub-batch of `nb` frames.
    fn grid(&self, nb: usize) -> Result<Batch> {
        let nbu = to_u32(nb, "batch")?;
        let (h, w, plane) = (self.h, self.w, self.plane);
        Ok(Batch {
            nb,
            nbu,
            img_len: nb * plane,
            g3: [round_up_to(w, self.lx), round_up_to(h, self.ly), nb],
            l3: [self.lx, self.ly, 1],
            gp: [round_up_to(plane, self.pwg), nb],
            lp: [self.pwg, 1],
            l2: [LINE_WG, 1],
            gf: [nb * FRAME_WG],
            lf: [FRAME_WG],
        })
    }

    /// One sub-batch of `nb` frames from frame `f0` of `src`, the stages in order; the
    /// features of its frames.
    ///
    /// The upload comes first, without the device's `turn`; the kernels and reads hold it (so
    /// another thread's sub-batch uploads meanwhile, and each read waits for its own kernels
    /// only), their time from the device's account within it; the host's finish follows once
    /// the turn has passed on.
    fn batch(
        &mut self,
        src: &Src<'_, '_, E>,
        f0: usize,
        nb: usize,
        turn: &Turn,
    ) -> Result<Vec<Vec<Feature>>> {
        let b = self.grid(nb)?;
        let staged = self.stage(src, f0, nb)?;
        let held = turn.hold();
        let (cand, refined, stats, scales) = self.on_device(src, staged, f0, &b)?;
        drop(held);
        Ok(self.host_finish(nb, &cand, &refined, stats.as_deref(), &scales))
    }

    /// The device's part of [`Self::batch`], its turn held: the kernels and reads of the
    /// sub-batch `b` (frames from `f0`), their device time, and every device buffer of the
    /// sub-batch freed before it returns (so the next turn's sub-batch has the device's
    /// memory). Returns the candidates, their refinement, the noise statistics and the
    /// per-frame scales, on the host.
    #[allow(clippy::type_complexity)]
    fn on_device(
        &mut self,
        src: &Src<'_, '_, E>,
        staged: Option<super::Uploaded<E, R>>,
        f0: usize,
        b: &Batch,
    ) -> Result<(Vec<u32>, Vec<f64>, Option<Vec<f64>>, Vec<f64>)> {
        let (e, nb) = (self.e, b.nb);
        let (k0, clock) = (self.k.kernel_s, KernelClock::start(e));
        let raw = self.load(src, staged, f0, b)?;
        // work images: t1 (lowpass y pass, column boxcar, then the row dilation), bp (the
        // bandpass, then the row distances of the noise)
        let t1 = self.e.alloc_elems::<R>(b.img_len)?;
        let bp = self.e.alloc_elems::<R>(b.img_len)?;
        let rowmax = self.e.alloc_elems::<R>(nb * self.h)?;
        let low = self.lowpass(b, &raw, &t1)?;
        self.bandpass(b, &raw, low.as_ref().unwrap_or(&raw), &t1, &bp, &rowmax)?;
        drop(low);
        let (scale, img, vmin) = self.threshold(b, &bp, &rowmax)?;
        // work images of `R` reused for u32 data: the grey dilation, the row distances
        let dil = t1.reinterpret::<u32>();
        let n_cand = self.maxima(b, &img, &dil, &vmin)?;
        let (refined, cand) = self.refine(&img, &raw, &scale, n_cand)?;
        let dist = bp.reinterpret::<u32>();
        let stats = self.noise(b, &img, &dist, &raw, n_cand)?;
        let t = Instant::now();
        let scales = widen(self.e.read_elems(&scale, nb)?);
        self.read_s += t.elapsed().as_secs_f64();
        if clock.on_device() {
            // every launch of this sub-batch, and no other thread's (the turn is held)
            self.k.kernel_s = k0 + clock.seconds(e, 0.0)?;
        }
        Ok((cand, refined, stats, scales))
    }

    /// The `ARRAYBRIDGE_TRACE` line of the run begun at `t_all`.
    fn trace(&self, t_all: Instant) {
        let (h, w) = (self.h, self.w);
        let (up_s, read_s, host_s) = (self.up_s, self.read_s, self.host_s);
        let kernel_s = self.k.kernel_s;
        let n_frames = self.n_frames;
        let per_kernel = &self.k.per_kernel;
        trace(|| {
            let kernels: Vec<String> = per_kernel
                .iter()
                .map(|(n, t)| format!("{} {:.4}", n.trim_start_matches("locate_"), t))
                .collect();
            format!(
                "locate: {} frames {h}x{w}: total {:.3} s = upload {up_s:.3} + kernels \
                 {kernel_s:.3} ({}) + reads {read_s:.3} + host {host_s:.3} + other",
                n_frames,
                t_all.elapsed().as_secs_f64(),
                kernels.join(", ")
            )
        });
    }
}

/// One run of frames of one shape and pixel type, in device type `R`: setup, the sub-batches
/// in order (progress reported after each for a resident movie), then the kernel time added
/// to `out` and the trace.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_typed<E: Executor, R: DevReal>(
    e: &E,
    mut src: Src<'_, '_, E>,
    kind: Kind,
    h: usize,
    w: usize,
    p: &LocateParams,
    plan: &Plan,
    cfg: &GpuDetectConfig,
    out: &mut LocateOut,
    turn: &Turn,
) -> Result<()> {
    let t_all = Instant::now();
    let mut run = Run::<E, R>::new(e, kind, (h, w), p, plan, cfg, src.len())?;
    let mut f0 = 0usize;
    while f0 < run.n_frames {
        let nb = run.chunk.min(run.n_frames - f0);
        let done = run.batch(&src, f0, nb, turn)?;
        out.features.extend(done);
        f0 += nb;
        if let Src::Device { progress, .. } = &mut src {
            progress(f0);
        }
    }
    out.kernel_s += run.k.kernel_s;
    run.trace(t_all);
    Ok(())
}
