//! One `paco_stats` launch (shrinkage covariance, Cholesky, and either the matched filter or the
//! pair contributions) and the full-grid maps from the flat outputs.

use bridge_core::exec::{Buffer, Executor, Grid, Local, TypedExecutor};
use bridge_core::{BridgeError, Result};
use ndarray::Array2;

use super::super::gpu_kernels::paco_kernels::Kernels;
use super::super::job::PacoJob;
use super::common::{DevReal, LagLayout, to_u32};

/// Buffers and sizes shared by every `paco_stats` launch of a run (arithmetic `R`).
pub(super) struct StatsCtx<'a, E: Executor, R: DevReal> {
    /// The executor of the run.
    pub(super) exec: &'a E,
    /// The typed launchers of the run's program (its build options).
    pub(super) kern: Kernels<'a, E>,
    pub(super) cen: &'a Buffer<E, R>,
    /// The centred cube frame-major (`paco_lag`'s input).
    pub(super) cenf: &'a Buffer<E, R>,
    /// The patch's lags `(dy, dx)` flattened, `2·nl` values ([`crate::paco::stats::lag_tables`]).
    pub(super) lags: &'a Buffer<E, i32>,
    /// `lag_idx[i·K + j]`: the lag of `d_j − d_i` (K×K).
    pub(super) lidx: &'a Buffer<E, u32>,
    /// Number of lags.
    pub(super) nl: usize,
    /// The patch's row offsets: the smallest and the largest `dy`.
    pub(super) dy: (isize, isize),
    /// Frame height.
    pub(super) hu: u32,
    pub(super) offs: &'a Buffer<E, i32>,
    pub(super) h0: &'a Buffer<E, R>,
    /// A one-element buffer for the `REAL` arguments a launch never reads or writes (distinct
    /// from every buffer that is written, as the kernel's `restrict` qualifiers require).
    pub(super) dummy: &'a Buffer<E, R>,
    /// A one-element buffer for the `uint` arguments a launch never reads.
    pub(super) dummy_u32: &'a Buffer<E, u32>,
    pub(super) wu: u32,
    pub(super) tu: u32,
    pub(super) ku: u32,
    pub(super) variant: u32,
    /// The `LOCAL_ARG` of `paco_stats`: the K×K matrix's packed upper triangle (`K(K+1)/2`
    /// values), or a token 8 bytes with
    /// `COV_GLOBAL` (the matrix is in `scr` then).
    pub(super) local: Local<R>,
    /// The run's launch shapes.
    pub(super) shapes: super::common::Shapes,
}

/// The pair arguments of a `paco_stats` launch with sub-pixel templates.
pub(super) struct PairArgs<'a, E: Executor, R: DevReal> {
    /// 1: table templates, 2: per-pair templates.
    pub(super) sub: u32,
    pub(super) plist: &'a Buffer<E, u32>,
    pub(super) pstart: &'a Buffer<E, u32>,
    pub(super) pfr: &'a Buffer<E, u32>,
    pub(super) pfy: &'a Buffer<E, R>,
    pub(super) pfx: &'a Buffer<E, R>,
    pub(super) tbl: &'a Buffer<E, R>,
    pub(super) tq: u32,
    pub(super) nearest: u32,
    pub(super) cab: &'a Buffer<E, R>,
}

/// One `paco_stats` launch: `groups` pixels of rows from `y0` (columns `[x_lo, x_lo + nx)`)
/// without templates, the pixels of `pairs.plist` with them.
pub(super) struct StatsLaunch<'a, E: Executor, R: DevReal> {
    pub(super) q: &'a Buffer<E, R>,
    pub(super) wb: &'a Buffer<E, R>,
    /// The packed K×K scratch matrices of the `COV_GLOBAL` variant (`groups·K(K+1)/2` values).
    pub(super) scr: Option<&'a Buffer<E, R>>,
    pub(super) y0: u32,
    pub(super) x_lo: u32,
    pub(super) nx: u32,
    pub(super) groups: usize,
    pub(super) pairs: Option<PairArgs<'a, E, R>>,
    /// The lag table the covariances are read from (`None`: computed directly).
    pub(super) lag: Option<&'a LagTable<E, R>>,
}

/// A lag table of `paco_lag` on the device: pixels from `base` (whole rows), lag `l` of pixel
/// `p` at `g[l·gl + (p − base)·gp]` (lag-major on GPUs, pixel-major on CPU devices).
pub(super) struct LagTable<E: Executor, R: DevReal> {
    g: Buffer<E, R>,
    base: u32,
    gl: u32,
    gp: u32,
}

impl<E: Executor, R: DevReal> StatsCtx<'_, E, R> {
    /// The rows of the lag table that the statistics pixels of rows `[ya, yb)` read (their
    /// patches' rows), clamped to the frame.
    pub(super) fn lag_rows(&self, (ya, yb): (usize, usize)) -> (usize, usize) {
        let h = self.hu as usize;
        let lo = (ya as isize + self.dy.0).clamp(0, h as isize) as usize;
        let hi = ((yb as isize - 1 + self.dy.1 + 1).clamp(0, h as isize) as usize).max(lo);
        (lo, hi)
    }

    /// Device bytes of the lag table of `rows` whole rows.
    pub(super) fn lag_bytes(&self, rows: usize) -> usize {
        rows * (self.wu as usize) * self.nl * std::mem::size_of::<R>()
    }

    /// Whether a launch over `pixels` statistics pixels whose patches cover the rows
    /// `[ra, rb)` should read a lag table (the mode of the run's shapes; never beyond
    /// `budget` bytes, except in `lag` mode; never for no pixels or no rows).
    pub(super) fn wants_lag(&self, pixels: usize, (ra, rb): (usize, usize), budget: usize) -> bool {
        if pixels == 0 || rb <= ra {
            return false;
        }
        let rows = rb - ra;
        let lag_pixels = rows * self.wu as usize;
        let fits = self.lag_bytes(rows) <= budget;
        let mode = self.shapes.cov;
        (fits || mode == super::common::CovMode::Lag)
            && mode.use_lag(pixels, self.ku as usize, lag_pixels, self.nl)
    }

    /// The lag table of the pixel rows `[ra, rb)`, computed by `paco_lag` (an out-of-memory
    /// error when the device has no room for it).
    pub(super) fn lag_table(&self, (ra, rb): (usize, usize)) -> Result<LagTable<E, R>> {
        let w = self.wu as usize;
        let np = (rb - ra) * w;
        let g = self.exec.alloc_elems::<R>(np * self.nl)?;
        let lw = self.shapes.line_wg;
        let nl = to_u32(self.nl, "lags")?;
        // (source, pixel stride, frame stride, lags per thread)
        // and the table's (lag, pixel) strides
        let npu = to_u32(np, "pixels")?;
        let npix = to_u32(self.hu as usize * w, "pixels")?;
        let (src, ps, fs, lpi, gl, gp) = match self.shapes.lag_layout {
            LagLayout::Pixel => (self.cen, self.tu, 1, nl, 1, nl),
            LagLayout::Frame => (self.cenf, 1, npix, 1, npu, 1),
            LagLayout::Mixed => (self.cenf, 1, npix, 1, 1, nl),
        };
        let nlg = self.nl.div_ceil(lpi as usize);
        // the lags first where there are several and CUDA's second grid dimension (65,535
        // groups) holds the pixels' groups
        let lag_first = self.shapes.lag_first && nlg > 1 && np.div_ceil(lw) <= 65_535;
        let (global, local) = if lag_first {
            ([nlg, np.div_ceil(lw) * lw], [1, lw])
        } else {
            ([np.div_ceil(lw) * lw, nlg], [lw, 1])
        };
        self.kern.paco_lag(
            Grid::new(&global, &local),
            src,
            self.lags,
            &g,
            self.hu,
            self.wu,
            self.tu,
            nl,
            to_u32(ra * w, "pixel")?,
            npu,
            ps,
            fs,
            lpi,
            gl,
            gp,
            u32::from(lag_first),
        )?;
        Ok(LagTable {
            g,
            base: to_u32(ra * w, "pixel")?,
            gl,
            gp,
        })
    }
}

/// Launches `paco_stats` for `l` (nothing when it has no pixel); the dummy buffers of `c`
/// stand for the arguments the launch does not use.
pub(super) fn launch_stats<E: Executor, R: DevReal>(
    c: &StatsCtx<'_, E, R>,
    l: &StatsLaunch<'_, E, R>,
) -> Result<()> {
    if l.groups == 0 {
        return Ok(());
    }
    let (d, du) = (c.dummy, c.dummy_u32);
    let p = l.pairs.as_ref();
    c.kern.paco_stats(
        Grid::new(&[l.groups * c.shapes.stats_wg], &[c.shapes.stats_wg]),
        c.cen,
        c.offs,
        c.h0,
        l.q,
        l.wb,
        l.scr.unwrap_or(d),
        c.wu,
        c.tu,
        c.ku,
        l.y0,
        l.x_lo,
        l.nx,
        to_u32(l.groups, "pixels")?,
        c.variant,
        p.map_or(0, |p| p.sub),
        p.map_or(du, |p| p.plist),
        p.map_or(du, |p| p.pstart),
        p.map_or(du, |p| p.pfr),
        p.map_or(d, |p| p.pfy),
        p.map_or(d, |p| p.pfx),
        p.map_or(d, |p| p.tbl),
        p.map_or(1, |p| p.tq),
        p.map_or(0, |p| p.nearest),
        p.map_or(d, |p| p.cab),
        l.lag.map_or(d, |g| &g.g),
        c.lidx,
        l.lag.map_or(Ok(0), |_| to_u32(c.nl, "lags"))?,
        l.lag.map_or(0, |g| g.base),
        l.lag.map_or(1, |g| g.gl),
        l.lag.map_or(1, |g| g.gp),
        u32::from(c.shapes.chol_cols),
        c.local,
    )
}

/// Full-grid maps from the flat outputs.
pub(super) fn to_maps(
    job: &PacoJob<'_>,
    a: Vec<f64>,
    b: Vec<f64>,
) -> Result<(Array2<f64>, Array2<f64>)> {
    let shape = (job.geom.height, job.geom.width);
    let err = |e: ndarray::ShapeError| BridgeError::Unsupported(format!("internal: {e}"));
    Ok((
        Array2::from_shape_vec(shape, a).map_err(err)?,
        Array2::from_shape_vec(shape, b).map_err(err)?,
    ))
}
