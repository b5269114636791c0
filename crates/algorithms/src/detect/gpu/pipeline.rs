//! One run of frames on the device: the prescale of raw integers, the two LoG passes into the
//! cube, its per-frame extrema, the 3×3×3 peaks, then the CPU's ordering and overlap pruning on
//! the host (see the [parent module](super)).

use crate::Precision;
use bridge_core::exec::{Buffer, BufferRef, Executor, Grid, TypedExecutor};
use bridge_core::tuning::Tuning;
use bridge_core::{BridgeError, Device, Result};

use super::super::blob_log::{Blob, BlobLogParams, DevicePlan, prune_blobs};
use super::super::filters::LogKernels;
use super::super::kernels::blob_log_kernels::Kernels;
use super::super::kernels::{OPTS_F32_ACC32, OPTS_F32_ACC64, OPTS_F64};
use super::super::real::{Real, give_buf, take_buf};
use super::super::trace;
use super::{DevReal, GpuDetectConfig};

mod stages;

use stages::LogRun;

pub(crate) fn to_u32(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        BridgeError::invalid_argument(what, format!("{v} does not fit the device's 32-bit index"))
    })
}

/// One device candidate, decoded: frame of the run, raster position, scale, value.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cand<R> {
    y: usize,
    x: usize,
    s: usize,
    v: R,
}

/// Result of one run of frames: survivors per frame and, when asked, the cube per frame
/// (`[scale][y][x]`, widened to f64).
pub(super) struct RunOut {
    pub(super) blobs: Vec<Vec<Blob>>,
    pub(super) cubes: Option<Vec<Vec<f64>>>,
    /// Seconds spent in the pipeline's kernels (launches are blocking).
    pub(super) kernel_s: f64,
    /// Frames of the certified search, and how many of them it left to the CPU.
    pub(super) certified: (usize, usize),
}

/// How raw integer frames are converted on the device.
pub(super) struct Prescaling {
    /// Per frame `(c, k)`; see the `prescale_*` kernels.
    pub(super) params: Vec<(f64, f64)>,
    /// 0: `v · k`; 1: `(v − c) / k`.
    pub(super) mode: u32,
}

/// Raw integer frames on the device: the input of the `prescale_u8` / `prescale_u16` kernels.
pub(super) enum RawFrames<'a, E: Executor> {
    /// `u8` pixels.
    U8(BufferRef<'a, E, u8>),
    /// `u16` pixels.
    U16(BufferRef<'a, E, u16>),
}

impl<E: Executor> Clone for RawFrames<'_, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E: Executor> Copy for RawFrames<'_, E> {}

/// The frames of one run.
pub(super) enum Input<'a, T, E: Executor> {
    /// Converted on the host to the working type `T`.
    Host(&'a [Vec<T>]),
    /// Raw integers (working type f64) from the host, packed in the host's byte order frame
    /// after frame into the upload's own memory ([`RawPack`]) and converted on the device.
    Raw(RawPack<'a>, Prescaling),
    /// Raw integers (working type f64) already on the device (a caller's array, read in place),
    /// from frame `.1` of the buffer.
    Device(RawFrames<'a, E>, usize, Prescaling),
}

/// Raw integer frames of the host, written by `fill` straight into the memory the upload sends
/// (`Executor::upload_filled`: page-locked on CUDA, so the frames cross in one DMA).
pub(super) struct RawPack<'a> {
    /// Bytes of the whole run.
    pub bytes: usize,
    /// `u16` pixels (else `u8`).
    pub u16: bool,
    /// Writes every byte of the run, frame after frame.
    pub fill: &'a (dyn Fn(&mut [u8]) -> Result<()> + Sync),
}

/// Runs the launch of the kernel named first and adds its wall time to the run's kernel time
/// (traced: to that kernel's line of the trace too).
type Timed<'a> = dyn FnMut(&'static str, &mut dyn FnMut() -> Result<()>) -> Result<()> + 'a;

/// The `prescale_*` kernel on frames `frame0..frame0 + n_frames` of `raw` into a new image
/// buffer of the device type `R`, with the per-frame parameters in the accumulation type `A`.
#[allow(clippy::too_many_arguments)]
fn prescale<E: Executor, R: DevReal, A: DevReal>(
    k: &Kernels<'_, E>,
    raw: &RawFrames<'_, E>,
    frame0: usize,
    pre: &Prescaling,
    n_frames: usize,
    plane: usize,
    wg: usize,
    timed: &mut Timed<'_>,
) -> Result<Buffer<E, R>> {
    let e = k.program().executor();
    let pp: Vec<A> = pre
        .params
        .iter()
        .flat_map(|&(c, k)| [A::from_f64(c), A::from_f64(k)])
        .collect();
    let pp_buf = e.upload_slice(&pp)?;
    let img = e.alloc_elems::<R>(n_frames * plane)?;
    let (pu, nu) = (to_u32(plane, "frame size")?, to_u32(n_frames, "frames")?);
    let f0 = to_u32(frame0, "first frame")?;
    let (global, local) = ([round_up_to(plane, wg), n_frames], [wg, 1]);
    let grid = Grid::new(&global, &local);
    timed("prescale", &mut || match raw {
        RawFrames::U8(b) => k.prescale_u8(grid, b, &pp_buf, &img, pu, nu, pre.mode, f0),
        RawFrames::U16(b) => k.prescale_u16(grid, b, &pp_buf, &img, pu, nu, pre.mode, f0),
    })?;
    Ok(img)
}

/// Work-group shape (x, y) of the per-voxel kernels: `ARRAYBRIDGE_DETECT_WG_X` (64) ×
/// `ARRAYBRIDGE_DETECT_WG_Y` (4 on CUDA, 1 on OpenCL) of `t`, at most 1024 work items.
pub(super) fn local_xy<E: Executor>(e: &E, t: &Tuning) -> (usize, usize) {
    let x = t.usize_or("ARRAYBRIDGE_DETECT_WG_X", 64);
    let y = t.usize_knob("ARRAYBRIDGE_DETECT_WG_Y").unwrap_or(
        if matches!(e.device(), Device::Cuda(_)) {
            4
        } else {
            1
        },
    );
    if x * y > 1024 {
        log::warn!("ARRAYBRIDGE_DETECT_WG_X × _Y = {x}×{y} is over 1024 work items; using 64×1");
        return (64, 1);
    }
    (x, y)
}

/// Outputs per work-item of `log_pass_y` (rows) and `log_pass_x` (columns):
/// `ARRAYBRIDGE_DETECT_ROWS` (auto: 8 on CUDA, where the H200 run of 2026-11-26 timed 1000×512²
/// frames 8 % faster than with 1; 1 on OpenCL, where more is slower on PoCL) and
/// `ARRAYBRIDGE_DETECT_COLS` (1: 2 and 4 were slower on the H200), and whether `log_pass_x`
/// skips the edge handling of interior columns with one column per work-item
/// (`ARRAYBRIDGE_DETECT_X_INTERIOR`, default 1). They are build options of the kernels
/// (`-DLOG_ROWS`, `-DLOG_COLS`, `-DLOG_X_INTERIOR`); results do not depend on them.
pub(super) fn pass_blocking<E: Executor>(e: &E, t: &Tuning) -> (usize, usize, usize) {
    let rows = t.usize_knob("ARRAYBRIDGE_DETECT_ROWS").unwrap_or(
        if matches!(e.device(), Device::Cuda(_)) {
            8
        } else {
            1
        },
    );
    (
        rows,
        t.usize_or("ARRAYBRIDGE_DETECT_COLS", 1),
        t.usize_or("ARRAYBRIDGE_DETECT_X_INTERIOR", 1),
    )
}

/// How a run computes the LoG passes ([`fused_pass`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fused {
    /// `log_pass_y` then `log_pass_x`, through the two scratch cubes `a2`, `a0`.
    Off,
    /// `log_pass_tile`: tiles of `rows` rows by the work group's width.
    Tile(usize),
    /// `log_pass_block`: blocks of `rows` rows by `cols` times the work group's width, both
    /// passes register-blocked, their extrema folded in regions of `rows / parts` rows by
    /// `strip · cols` columns.
    Block {
        /// Rows of a block.
        rows: usize,
        /// Consecutive columns of a work item in the x pass.
        cols: usize,
        /// Row parts of a block's regions (1 or 2).
        parts: usize,
        /// Work items across a region.
        strip: usize,
    },
}

impl Fused {
    /// Whether the passes skip the scratch cubes.
    pub(super) fn fused(self) -> bool {
        self != Fused::Off
    }

    /// Rows and columns one work group of `lx` work items across computes (a fused pass).
    pub(super) fn extent(self, lx: usize) -> (usize, usize) {
        match self {
            Fused::Off => (1, lx),
            Fused::Tile(rows) => (rows, lx),
            Fused::Block { rows, cols, .. } => (rows, lx * cols),
        }
    }

    /// Rows and columns of the regions whose extrema a fused pass folds for the thresholds
    /// and the peaks (a tile; a block's parts and strips), for work groups `lx` wide.
    pub(super) fn region(self, lx: usize) -> (usize, usize) {
        match self {
            Fused::Block {
                rows,
                cols,
                parts,
                strip,
            } => (rows / parts, strip * cols),
            _ => self.extent(lx),
        }
    }

    /// The build options of the fused kernels (set whichever runs) and of the region
    /// extrema the peak kernels read (`REGION_ROWS`, `REGION_COLS`: the region of a work group
    /// of shape `(lx, ly)`; rows 0 for the two passes).
    pub(super) fn options(self, lx: usize) -> [String; 7] {
        let tile = match self {
            Fused::Tile(rows) => rows,
            _ => 1,
        };
        let (rows, cols, parts, strip) = match self {
            Fused::Block {
                rows,
                cols,
                parts,
                strip,
            } => (rows, cols, parts, strip),
            _ => (1, 1, 1, 1),
        };
        let region = if self.fused() {
            self.region(lx)
        } else {
            (0, 1)
        };
        [
            format!("-DTILE_ROWS={tile}"),
            format!("-DBLOCK_ROWS={rows}"),
            format!("-DBLOCK_COLS={cols}"),
            format!("-DBLOCK_PARTS={parts}"),
            format!("-DBLOCK_STRIP={strip}"),
            format!("-DREGION_ROWS={}", region.0),
            format!("-DREGION_COLS={}", region.1),
        ]
    }
}

/// How the LoG passes run on `e` under `t`, for work groups of `(lx, ly)` and kernels of
/// radius at most `rmax` with `bytes`-byte values:
/// - `log_pass_block` with blocks of `ARRAYBRIDGE_DETECT_BLOCK` rows (auto: 16 on CUDA, 0 on
///   OpenCL) by `ARRAYBRIDGE_DETECT_BLOCK_COLS` (3) times `lx` columns, where its local memory,
///   `2 · rows · (lx · cols + 2 · rmax)` values, fits in [`TILE_LOCAL_BYTES`], `rmax` is at most
///   the block's width (the y pass's halo costs up to three times the block's own work) and
///   `rows · cols ≥ 2 · ly` (room for the fold of the extrema); the extrema are folded in
///   regions of half the block's rows (when even) by 16 work items' columns (when 16 divides
///   `lx`), finer than the block, for the peaks to skip more of the cube;
/// - else `log_pass_tile` with tiles of `ARRAYBRIDGE_DETECT_TILE` rows (auto: 8 on OpenCL, 0 on
///   CUDA) by `lx` columns, where `2 · rows · (lx + 2 · rmax)` values fit and `rmax ≤ lx`;
/// - else the two passes.
pub(super) fn fused_pass<E: Executor>(
    e: &E,
    t: &Tuning,
    (lx, ly): (usize, usize),
    rmax: usize,
    bytes: usize,
) -> Fused {
    let cuda = matches!(e.device(), Device::Cuda(_));
    let rows = t
        .usize_knob("ARRAYBRIDGE_DETECT_BLOCK")
        .unwrap_or(if cuda { 16 } else { 0 });
    let cols = t.usize_or("ARRAYBRIDGE_DETECT_BLOCK_COLS", 3).max(1);
    let width = lx * cols;
    let local = 2 * rows * (width + 2 * rmax) * bytes;
    if rows > 0 && rmax <= width && rows * cols >= 2 * ly && local <= TILE_LOCAL_BYTES {
        // regions of half the rows (when even) by 16 work items (when they divide lx)
        let parts = if rows.is_multiple_of(2) { 2 } else { 1 };
        let strip = if lx.is_multiple_of(16) { 16 } else { lx };
        return Fused::Block {
            rows,
            cols,
            parts,
            strip,
        };
    }
    let rows = t
        .usize_knob("ARRAYBRIDGE_DETECT_TILE")
        .unwrap_or(if cuda { 0 } else { 8 });
    let local = 2 * rows * (lx + 2 * rmax) * bytes;
    if rows > 0 && rmax <= lx && local <= TILE_LOCAL_BYTES {
        return Fused::Tile(rows);
    }
    Fused::Off
}

/// Local memory a tile of `log_pass_tile` or a block of `log_pass_block` may take (CUDA's
/// static limit is 48 KiB).
pub(super) const TILE_LOCAL_BYTES: usize = 32 << 10;

/// Whether the certified search's float32 passes fuse their multiply-adds (one rounding
/// instead of two, within the same error bound: `blob_log/certified.rs`):
/// `ARRAYBRIDGE_DETECT_PASS_FMA` of `t` (auto: on CUDA, whose `__fmaf_rn` is one instruction;
/// off on OpenCL, whose `fma` may be a slow emulation on a device without the instruction).
/// Results do not depend on it.
pub(super) fn pass_fma<E: Executor>(e: &E, t: &Tuning) -> bool {
    t.usize_knob("ARRAYBRIDGE_DETECT_PASS_FMA")
        .map_or(matches!(e.device(), Device::Cuda(_)), |v| v == 1)
}

/// Work groups a frame for the certified search's scan of the image (`frame_absmax`, then
/// `cert_frames` folds their parts): `ARRAYBRIDGE_DETECT_SCAN_GROUPS` of `t` (auto: on GPUs a
/// group per 16,384 pixels of a `plane`-pixel frame, at most 64, for the scan to fill the
/// device where a batch has fewer frames than it has multiprocessors; 0 on CPU devices), 0 or
/// 1: `cert_frames` scans each frame with its one group. Results do not depend on it.
pub(super) fn scan_groups<E: Executor>(e: &E, t: &Tuning, plane: usize) -> usize {
    let auto = if e.is_cpu() {
        0
    } else {
        (plane / 16_384).min(64)
    };
    let g = t
        .usize_knob("ARRAYBRIDGE_DETECT_SCAN_GROUPS")
        .unwrap_or(auto)
        .min(plane.div_ceil(crate::detect::kernels::MINMAX_WG));
    if g <= 1 { 0 } else { g }
}

/// Work-group size of the prescale kernels (`ARRAYBRIDGE_DETECT_PREP_WG` of `t`, default 256).
pub(super) fn prep_wg(t: &Tuning) -> usize {
    t.usize_or("ARRAYBRIDGE_DETECT_PREP_WG", 256)
}

/// What a run computes: the cube in the device type (and reads it back when `.0`), or the
/// certified search (an f32 cube: `R = f32`).
pub(super) enum Mode<'a, T> {
    /// The cube in the device type `R`, searched exactly; read back when asked.
    Cube(bool),
    /// The certified search (issue 29; [`DevicePlan`]): an f32 cube with f32 sums searched
    /// with a proven margin, each frame settled on the host with exact voxels of the frame
    /// (`Certify::frames`), so that the blobs are the CPU's bit for bit. Raw integer frames are
    /// converted on the device in float64 (the device must have doubles).
    Certified(Certify<'a, T>),
}

/// The device pipeline on one run of frames (working type `T`, cube in the device type `R`):
/// the passes accumulate in `f64` where the device has doubles and [`GpuDetectConfig`] asks for
/// it (always for an `f64` cube), else in `f32` ([`run_acc`]); the certified search in `f32`
/// (`R` must be `f32`).
pub(super) fn run_typed<E: Executor, T: Real, R: DevReal>(
    e: &E,
    input: Input<'_, T, E>,
    dims: (usize, usize, usize),
    p: &BlobLogParams,
    cfg: &GpuDetectConfig,
    mode: Mode<'_, T>,
    turn: &Turn,
) -> Result<RunOut> {
    match mode {
        Mode::Certified(_) if R::SIZE != 4 => Err(BridgeError::Unsupported(
            "the certified search with a float64 cube".into(),
        )),
        Mode::Certified(c) => {
            run_acc::<E, T, R, f32>(e, input, dims, p, cfg, (false, Some(c)), turn)
        }
        Mode::Cube(want) if e.has_fp64() && (cfg.precision != Precision::F32 || R::SIZE == 8) => {
            run_acc::<E, T, R, f64>(e, input, dims, p, cfg, (want, None), turn)
        }
        Mode::Cube(want) => run_acc::<E, T, R, f32>(e, input, dims, p, cfg, (want, None), turn),
    }
}

/// The certified search's part of a run: its plan and the frames on the host.
pub(super) struct Certify<'a, T> {
    /// The margins and the reference cube.
    pub(super) plan: DevicePlan,
    /// The run's frames on the host, for the exact voxels.
    pub(super) frames: HostFrames<'a, T>,
}

/// A run's frames on the host in the working type, held in f64, for the exact voxels of the
/// certified search.
pub(super) enum HostFrames<'a, T> {
    /// Frames already converted to the working type.
    Typed(&'a [Vec<T>]),
    /// Frame `i` in the working type, held in f64 (raw integers converted as the CPU
    /// converts them).
    Convert(&'a (dyn Fn(usize) -> Result<Vec<f64>> + Sync + 'a)),
}

impl<T: Real> HostFrames<'_, T> {
    /// Frame `i` of the run in the working type, held in f64.
    pub(super) fn frame(&self, i: usize) -> Result<std::borrow::Cow<'_, [f64]>> {
        use std::borrow::Cow;
        let missing = || BridgeError::backend("detect", None, format!("no frame {i} on the host"));
        Ok(match self {
            HostFrames::Typed(v) => {
                let f = v.get(i).ok_or_else(missing)?;
                match T::as_f64s(f) {
                    Some(s) => Cow::Borrowed(s),
                    None => Cow::Owned(f.iter().map(|x| x.to_f64()).collect()),
                }
            }
            HostFrames::Convert(f) => Cow::Owned(f(i)?),
        })
    }
}

/// The kernel time of a run: the device's own account of the executor's launches
/// ([`Executor::kernel_seconds`], OpenCL's event profiling) where the backend keeps one, else
/// the host time around each launch (the kernels' time where each launch is waited for).
pub(super) struct KernelClock {
    /// The executor's total when the run began (`None`: no device account).
    start: Option<f64>,
}

impl KernelClock {
    /// The clock of a run on `e` beginning now.
    pub(super) fn start<E: Executor>(e: &E) -> Self {
        KernelClock {
            start: e.kernel_seconds(),
        }
    }

    /// Whether the device keeps the account (the host time is then not needed).
    pub(super) fn on_device(&self) -> bool {
        self.start.is_some()
    }

    /// The run's kernel seconds: the device's account since [`KernelClock::start`], once
    /// every launch is collected (a wait that costs nothing after the run's last read), or
    /// `host_s`, the host time around the launches, where there is no account.
    pub(super) fn seconds<E: Executor>(&self, e: &E, host_s: f64) -> Result<f64> {
        let Some(k0) = self.start else {
            return Ok(host_s);
        };
        e.synchronize()?;
        Ok(e.kernel_seconds().map_or(host_s, |k1| (k1 - k0).max(0.0)))
    }
}

/// [`run_typed`] with the passes accumulated in `A`.
///
/// Setup: the kernels' build options, the LoG coefficients ([`upload_coefficients`]) and the
/// frames ([`stage_frames`]) go up; nothing waits for the device's kernels so far, so another
/// thread's batch may be computing meanwhile. Then, holding the device's [`Turn`], the raw
/// frames are converted ([`convert_staged`]), [`LogRun::new`] sizes the batches and allocates
/// the cube, and [`LogRun::run_all`] runs every batch of frames: the two LoG passes, the
/// per-frame thresholds, the peaks and the host's ordering and pruning.
fn run_acc<E: Executor, T: Real, R: DevReal, A: DevReal>(
    e: &E,
    input: Input<'_, T, E>,
    (n_frames, h, w): (usize, usize, usize),
    p: &BlobLogParams,
    cfg: &GpuDetectConfig,
    (want_cube, cert): (bool, Option<Certify<'_, T>>),
    turn: &Turn,
) -> Result<RunOut> {
    let t_all = std::time::Instant::now();
    let mut kernel_s = 0.0f64;
    let tracing = super::super::trace_enabled();
    // traced: each launch waited for, its time filed under its kernel's name
    let mut per_kernel: Vec<(&'static str, f64)> = Vec::new();
    let mut timed = |name: &'static str, f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        let t = std::time::Instant::now();
        f()?;
        if tracing {
            e.synchronize()?;
        }
        let dt = t.elapsed().as_secs_f64();
        kernel_s += dt;
        if tracing {
            match per_kernel.iter_mut().find(|(n, _)| *n == name) {
                Some(k) => k.1 += dt,
                None => per_kernel.push((name, dt)),
            }
        }
        Ok(())
    };
    let (rows, cols, interior) = pass_blocking(e, &cfg.tuning);
    let (lx, ly) = local_xy(e, &cfg.tuning);
    let sigmas = p.sigma_list::<T>();
    let coeffs = upload_coefficients::<E, T, R, A>(e, &sigmas)?;
    let fused = fused_pass(e, &cfg.tuning, (lx, ly), coeffs.rmax, R::SIZE);
    let blocking: Vec<String> = [
        format!("-DLOG_ROWS={rows}"),
        format!("-DLOG_COLS={cols}"),
        format!("-DLOG_X_INTERIOR={interior}"),
    ]
    .into_iter()
    .chain(fused.options(lx))
    .collect();
    // the certified search's float32 passes may fuse their multiply-adds
    let certified = cert.is_some();
    let fma = certified && A::SIZE == 4 && pass_fma(e, &cfg.tuning);
    let passes: Vec<String> = fma
        .then(|| "-DPASS_FMA=1".to_owned())
        .into_iter()
        .chain(blocking.iter().cloned())
        .collect();
    let opts_v = kernel_options::<R, A>(&passes)?;
    let k = Kernels::new(e, &opts_v);
    // the certified search's f32 image of raw integers: converted in f64, then rounded
    let opts_prep = if certified && A::SIZE == 4 {
        kernel_options::<R, f64>(&blocking)?
    } else {
        Vec::new()
    };
    let k_prep = Kernels::new(e, &opts_prep);
    let staged = stage_frames::<E, T, R>(e, input, n_frames * h * w)?;
    let t_up = std::time::Instant::now();
    let up_s = t_up.duration_since(t_all).as_secs_f64();
    super::super::trace_span(t_all, t_up, || {
        format!("detect: upload {n_frames} frames {h}x{w}")
    });
    // The device is this run's from here to its last read: another thread's batch uploads
    // meanwhile, and launches its kernels once this one is done.
    let held = turn.hold();
    let t_dev = std::time::Instant::now();
    // The device's account of the kernels where it keeps one; else the host time around the
    // launches, exact with ARRAYBRIDGE_TRACE=1, which waits for each kernel (launches are
    // asynchronous otherwise, and their time shows up in the next read).
    let clock = KernelClock::start(e);
    let img = if opts_prep.is_empty() {
        convert_staged::<E, R, A>(&k, staged, n_frames, h * w, &cfg.tuning, &mut timed)?
    } else {
        convert_staged::<E, R, f64>(&k_prep, staged, n_frames, h * w, &cfg.tuning, &mut timed)?
    };
    let mut run = LogRun::<E, T, R, A>::new(
        k,
        p,
        sigmas,
        coeffs,
        img,
        (n_frames, h, w, rows, cols, lx, ly),
        fused,
        cfg.device_budget(e),
        want_cube,
        cert.map(|c| (c, scan_groups(e, &cfg.tuning, h * w))),
    )?;
    let last = run.run_all(&mut timed)?;
    let kernel_s = clock.seconds(e, kernel_s)?;
    // (taken before the turn passes: the next run's device span begins after this one's end)
    let t_end = std::time::Instant::now();
    drop(held);
    // the last sub-batch's host pruning while the next run computes
    run.prune(last)?;
    let (read_s, prune_s) = (run.read_s, run.prune_s);
    if certified {
        trace(|| {
            format!(
                "detect: certified search, {} of {n_frames} frames computed on the CPU",
                run.host_frames
            )
        });
    }
    super::super::trace_span(t_dev, t_end, || {
        format!(
            "detect: device {n_frames} frames (waited {:.3} s for it): kernels {kernel_s:.3} + \
             reads {read_s:.3}; host prune {prune_s:.3} (the last sub-batch's after the span)",
            t_dev.duration_since(t_up).as_secs_f64()
        )
    });
    trace(|| {
        let kernels: Vec<String> = per_kernel
            .iter()
            .map(|(n, t)| format!("{n} {t:.4}"))
            .collect();
        format!(
            "detect: {n_frames} frames {h}x{w}: total {:.3} s = upload {up_s:.3} + kernels \
             {kernel_s:.3} ({}) + reads {read_s:.3} + host prune {prune_s:.3} + other",
            t_end.duration_since(t_all).as_secs_f64(),
            kernels.join(", ")
        )
    });
    Ok(RunOut {
        blobs: run.blobs,
        cubes: want_cube.then_some(run.cubes),
        kernel_s,
        certified: if certified {
            (n_frames, run.host_frames)
        } else {
            (0, 0)
        },
    })
}

/// The kernels' build options: the precision set of the cube type `R` and the accumulation
/// type `A` (`f64`, `f32` with `f64` or `f32` accumulation) followed by `extra`: the fused
/// multiply-adds of the certified search's passes (`-DPASS_FMA=1`, where asked), the pass
/// blocking and the fused passes (`-DLOG_ROWS`, `-DLOG_COLS`, `-DLOG_X_INTERIOR`, then
/// [`Fused::options`]).
fn kernel_options<R: DevReal, A: DevReal>(extra: &[String]) -> Result<Vec<&str>> {
    let base: &[&str] = match (R::SIZE, A::SIZE) {
        (8, 8) => OPTS_F64,
        (4, 8) => OPTS_F32_ACC64,
        (4, 4) => OPTS_F32_ACC32,
        _ => {
            return Err(BridgeError::Unsupported(
                "a float64 cube accumulated in float32".into(),
            ));
        }
    };
    Ok(base
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .collect())
}

/// The LoG coefficients of a run on the device (accumulation type `A`, device type `R`).
pub(super) struct Coeffs<E: Executor, R: DevReal, A: DevReal> {
    /// Every scale's kernel taps (`g0` then `g2`).
    pub(super) taps: Buffer<E, A>,
    /// Per scale `(offset, radius)` into `taps`.
    pub(super) meta: Buffer<E, u32>,
    /// Per scale σ² (working type, stored as `R`).
    pub(super) s2: Buffer<E, R>,
    /// The largest radius of the scales' kernels.
    pub(super) rmax: usize,
}

/// Builds the LoG kernels of `sigmas` and uploads their taps, their `(offset, radius)` and σ².
fn upload_coefficients<E: Executor, T: Real, R: DevReal, A: DevReal>(
    e: &E,
    sigmas: &[T],
) -> Result<Coeffs<E, R, A>> {
    let ns = sigmas.len();
    let mut taps: Vec<A> = Vec::new();
    let mut meta: Vec<u32> = Vec::with_capacity(2 * ns);
    let mut rmax = 0;
    for &s in sigmas {
        let k = LogKernels::new(s.to_f64(), T::IS_F32);
        rmax = rmax.max(k.radius());
        meta.push(to_u32(taps.len(), "kernel taps")?);
        meta.push(to_u32(k.radius(), "kernel radius")?);
        taps.extend(k.g0.iter().chain(&k.g2).map(|&v| A::from_f64(v)));
    }
    let s2: Vec<R> = sigmas
        .iter()
        .map(|&s| R::from_f64((s * s).to_f64()))
        .collect();
    Ok(Coeffs {
        taps: e.upload_slice(&taps)?,
        meta: e.upload_slice(&meta)?,
        s2: e.upload_slice(&s2)?,
        rmax,
    })
}

/// A run's frames once uploaded, before any kernel ([`stage_frames`]).
enum Staged<'a, E: Executor, R: DevReal> {
    /// In the device type, ready.
    Ready(Buffer<E, R>),
    /// Raw integers and their conversion, for [`prescale`].
    Raw(RawBuf<E>, Prescaling),
    /// Raw integers already on the device, from frame `.1`.
    Device(RawFrames<'a, E>, usize, Prescaling),
}

/// An uploaded buffer of raw integer frames.
enum RawBuf<E: Executor> {
    /// `u8` pixels.
    U8(Buffer<E, u8>),
    /// `u16` pixels.
    U16(Buffer<E, u16>),
}

/// The whole run in one transfer, without launching anything (the upload does not wait for
/// the kernels in flight where the backend can: OpenCL's transfer queue): host frames
/// converted to `R`, or raw integers as they are; a device-resident movie stays where it is.
fn stage_frames<'a, E: Executor, T: Real, R: DevReal>(
    e: &E,
    input: Input<'a, T, E>,
    values: usize,
) -> Result<Staged<'a, E, R>> {
    Ok(match input {
        Input::Host(images) => {
            let mut img: Vec<R> = Vec::with_capacity(values);
            for im in images {
                img.extend(im.iter().map(|&v| R::from_f64(v.to_f64())));
            }
            Staged::Ready(e.upload_slice(&img)?)
        }
        Input::Raw(raw, pre) => {
            let mut scratch = take_buf::<u64>(raw.bytes.div_ceil(8));
            let staged = if raw.u16 {
                RawBuf::U16(e.upload_filled_elems(
                    raw.bytes / 2,
                    &mut scratch,
                    |d: &mut [u16]| (raw.fill)(bytemuck::cast_slice_mut(d)),
                )?)
            } else {
                RawBuf::U8(e.upload_filled_elems(raw.bytes, &mut scratch, raw.fill)?)
            };
            give_buf(scratch);
            Staged::Raw(staged, pre)
        }
        Input::Device(raw, frame0, pre) => Staged::Device(raw, frame0, pre),
    })
}

/// The run's frames in the device type: staged raw integers converted by [`prescale`] (work
/// group `ARRAYBRIDGE_DETECT_PREP_WG` of `tuning`), counted in `timed`.
fn convert_staged<E: Executor, R: DevReal, A: DevReal>(
    k: &Kernels<'_, E>,
    staged: Staged<'_, E, R>,
    n_frames: usize,
    plane: usize,
    tuning: &Tuning,
    timed: &mut Timed<'_>,
) -> Result<Buffer<E, R>> {
    let wg = prep_wg(tuning);
    Ok(match staged {
        Staged::Ready(img) => img,
        Staged::Raw(buf, pre) => {
            let raw = match &buf {
                RawBuf::U8(b) => RawFrames::U8(b.view()),
                RawBuf::U16(b) => RawFrames::U16(b.view()),
            };
            prescale::<E, R, A>(k, &raw, 0, &pre, n_frames, plane, wg, timed)?
        }
        Staged::Device(raw, frame0, pre) => {
            prescale::<E, R, A>(k, &raw, frame0, &pre, n_frames, plane, wg, timed)?
        }
    })
}

/// The device's turn, one per back end (shared by its clones): a thread holds it from its
/// run's first kernel (and the cube's allocation) to its last read, so the kernels and reads
/// of two threads' runs never interleave on the device's in-order queue (each run's reads
/// would otherwise wait for the other's kernels), while a waiting thread's packing and upload
/// go on (see [`super::super::LogDetector::detect_movie_with`]).
#[derive(Debug, Default)]
pub(crate) struct Turn(std::sync::Mutex<()>);

impl Turn {
    /// Waits for the device and holds it until the guard drops.
    pub(crate) fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) fn round_up_to(n: usize, m: usize) -> usize {
    n.div_ceil(m) * m
}

/// The CPU's post-peak stage: raster order (y, x, scale), stable sort by descending response,
/// overlap pruning in the working type.
pub(super) fn order_and_prune<T: Real, R: Real>(
    mut cands: Vec<Cand<R>>,
    sigmas: &[T],
    overlap: f64,
) -> Vec<Blob> {
    cands.sort_unstable_by_key(|c| (c.y, c.x, c.s));
    cands.sort_by(|a, b| b.v.partial_cmp(&a.v).unwrap_or(std::cmp::Ordering::Equal));
    let typed: Vec<(T, T, T)> = cands
        .iter()
        .map(|c| {
            (
                T::from_f64(c.y as f64),
                T::from_f64(c.x as f64),
                sigmas[c.s],
            )
        })
        .collect();
    let keep = prune_blobs(&typed, overlap);
    cands
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(c, _)| Blob {
            y: c.y as f64,
            x: c.x as f64,
            sigma: sigmas[c.s].to_f64(),
            response: c.v.to_f64(),
            scale_index: c.s,
        })
        .collect()
}
