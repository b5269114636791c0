//! One device of a multi-device PACO run ([`super::super::multi`]): the cube uploaded once,
//! then one unit of work at a time — rows of statistics (q and z, downloaded) without
//! sub-pixel templates, runs of trajectory pixels (their pair contributions) with them.

use bridge_core::Result;
use bridge_core::exec::{Buffer, Executor, TypedExecutor};

use super::super::job::PacoJob;
use super::super::multi::UnitWorker;
use super::common::{DevReal, bytes_of, to_f64s};
use super::fast::{DeviceJob, Plan, band_buffers, stats_rows};
use super::pairs::{PairPlan, PairRun, Table, pair_batch, upload_table};
use crate::Precision;

enum Kind<'j, E: Executor, R: DevReal> {
    /// Full-frame q and z on the device.
    Fast { q: Buffer<E, R>, z: Buffer<E, R> },
    /// The shared bucketing and the table (`sub`, `tq`, buffer).
    Pairs {
        plan: &'j PairPlan,
        table: Table<E, R>,
    },
}

/// A device's state for a multi-device run, in the device's arithmetic (resolved once, in
/// [`GpuWorker::new`]).
pub(crate) enum GpuWorker<'j, E: Executor> {
    /// Double precision.
    F64(Worker<'j, E, f64>),
    /// Single precision.
    F32(Worker<'j, E, f32>),
}

impl<'j, E: Executor> GpuWorker<'j, E> {
    /// Upload the cube (and the template table) to `e`'s device; `pairs` is the shared
    /// bucketing with sub-pixel templates (`None` without).
    pub(crate) fn new(e: E, job: &'j PacoJob<'j>, pairs: Option<&'j PairPlan>) -> Result<Self> {
        let plan = Plan::new(&e, job, Precision::Auto, bridge_core::tuning::process())?;
        Ok(if plan.dbl {
            GpuWorker::F64(Worker::new(e, job, pairs, plan)?)
        } else {
            GpuWorker::F32(Worker::new(e, job, pairs, plan)?)
        })
    }
}

impl<E: Executor> UnitWorker for GpuWorker<'_, E> {
    fn unit(&mut self, range: (usize, usize)) -> Result<Vec<f64>> {
        match self {
            GpuWorker::F64(w) => w.unit(range),
            GpuWorker::F32(w) => w.unit(range),
        }
    }

    fn bytes(&self) -> (u64, u64) {
        match self {
            GpuWorker::F64(w) => (w.up, w.down),
            GpuWorker::F32(w) => (w.up, w.down),
        }
    }
}

/// A device's state for a multi-device run in arithmetic `R`.
pub(crate) struct Worker<'j, E: Executor, R: DevReal> {
    e: E,
    job: &'j PacoJob<'j>,
    dj: DeviceJob<E, R>,
    kind: Kind<'j, E, R>,
    up: u64,
    down: u64,
}

impl<'j, E: Executor, R: DevReal> Worker<'j, E, R> {
    /// [`GpuWorker::new`] in arithmetic `R` (`plan.dbl` is `R`'s precision).
    fn new(e: E, job: &'j PacoJob<'j>, pairs: Option<&'j PairPlan>, plan: Plan) -> Result<Self> {
        let dj = DeviceJob::<E, R>::new(&e, job, plan)?;
        let (t, h, w) = job.cube.dim();
        let mut up = dj.uploaded;
        let kind = match (pairs, &dj.plan.tpl) {
            (Some(plan), Some(tpl)) => {
                let table = upload_table::<E, R>(&e, tpl)?;
                if let super::common::PairTemplates::Table { data, .. } = tpl {
                    up += bytes_of::<R>(data.len());
                }
                Kind::Pairs { plan, table }
            }
            _ => Kind::Fast {
                q: e.alloc_elems(h * w)?,
                z: e.alloc_elems(h * w * t)?,
            },
        };
        Ok(Worker {
            e,
            job,
            dj,
            kind,
            up,
            down: 0,
        })
    }

    /// [`UnitWorker::unit`]: q then z of the statistics rows `[a, b)`, or the pair
    /// contributions of the pixels `[a, b)` of the bucketing.
    fn unit(&mut self, (a, b): (usize, usize)) -> Result<Vec<f64>> {
        let (e, job) = (&self.e, self.job);
        let big = self.dj.plan.big;
        let c = self.dj.ctx(e);
        match &self.kind {
            Kind::Fast { q, z } => {
                let (t, _, w) = job.cube.dim();
                let rows = b - a;
                let (wb, scr) = band_buffers::<E, R>(e, job, rows, big)?;
                // (its last lag table dropped at once: the reads below wait anyway)
                drop(stats_rows(
                    &c,
                    job,
                    (q, z),
                    (&wb, scr.as_ref()),
                    (a, b),
                    rows,
                )?);
                let qv = e.read_elems_at(q, a * w, rows * w)?;
                let zv = e.read_elems_at(z, a * w * t, rows * w * t)?;
                drop((wb, scr));
                self.down += bytes_of::<R>(qv.len() + zv.len());
                let mut out = to_f64s(qv);
                out.extend(to_f64s(zv));
                Ok(out)
            }
            Kind::Pairs { plan, table } => {
                let tpl = self.dj.plan.tpl.as_ref().ok_or_else(|| {
                    bridge_core::BridgeError::Unsupported("internal: templates expected".into())
                })?;
                let w = job.geom.width;
                let pos = move |i: usize| (i / w, i % w);
                let run = PairRun {
                    plan,
                    tpl,
                    table: (table.0, table.1, table.2.as_ref()),
                    pos: &pos,
                    big,
                };
                let (contrib, up) = pair_batch(e, &c, job, &run, (a, b))?;
                self.up += up;
                self.down += bytes_of::<R>(contrib.len());
                Ok(contrib)
            }
        }
    }
}
