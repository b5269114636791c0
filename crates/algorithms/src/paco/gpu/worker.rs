//! One device of a multi-device PACO run ([`super::super::multi`]): the cube uploaded once,
//! then one unit of work at a time — rows of statistics (q and z, downloaded) without
//! sub-pixel templates, runs of trajectory pixels (their pair contributions) with them.

use bridge_core::Result;
use bridge_core::exec::Executor;

use super::super::job::PacoJob;
use super::super::multi::UnitWorker;
use super::GpuPrecision;
use super::common::decode;
use super::fast::{DeviceJob, Plan, band_buffers, stats_rows};
use super::pairs::{PairPlan, PairRun, pair_batch, upload_table};

enum Kind<'j, B> {
    /// Full-frame q and z on the device.
    Fast { q: B, z: B },
    /// The shared bucketing and the table (`sub`, `tq`, buffer).
    Pairs {
        plan: &'j PairPlan,
        table: (u32, u32, Option<B>),
    },
}

/// A device's state for a multi-device run.
pub(crate) struct GpuWorker<'j, E: Executor> {
    e: E,
    job: &'j PacoJob<'j>,
    dj: DeviceJob<E::Buffer>,
    kind: Kind<'j, E::Buffer>,
    up: u64,
    down: u64,
}

impl<'j, E: Executor> GpuWorker<'j, E> {
    /// Upload the cube (and the template table) to `e`'s device; `pairs` is the shared
    /// bucketing with sub-pixel templates (`None` without).
    pub(crate) fn new(e: E, job: &'j PacoJob<'j>, pairs: Option<&'j PairPlan>) -> Result<Self> {
        let plan = Plan::new(&e, job, GpuPrecision::Auto, bridge_core::tuning::process())?;
        let dj = DeviceJob::new(&e, job, plan)?;
        let rs = if dj.plan.dbl { 8 } else { 4 };
        let (t, h, w) = job.cube.dim();
        let mut up = dj.uploaded;
        let kind = match (pairs, &dj.plan.tpl) {
            (Some(plan), Some(tpl)) => {
                let (sub, tq, tbl) = upload_table(&e, tpl, dj.plan.dbl)?;
                if let super::common::PairTemplates::Table { data, .. } = tpl {
                    up += (data.len() * rs) as u64;
                }
                Kind::Pairs {
                    plan,
                    table: (sub, tq, tbl),
                }
            }
            _ => Kind::Fast {
                q: e.alloc(h * w * rs)?,
                z: e.alloc(h * w * t * rs)?,
            },
        };
        Ok(GpuWorker {
            e,
            job,
            dj,
            kind,
            up,
            down: 0,
        })
    }
}

impl<E: Executor> UnitWorker for GpuWorker<'_, E> {
    fn unit(&mut self, (a, b): (usize, usize)) -> Result<Vec<f64>> {
        let (e, job) = (&self.e, self.job);
        let (dbl, big) = (self.dj.plan.dbl, self.dj.plan.big);
        let c = self.dj.ctx();
        match &self.kind {
            Kind::Fast { q, z } => {
                let rs = if dbl { 8 } else { 4 };
                let (t, _, w) = job.cube.dim();
                let rows = b - a;
                let (wb, scr) = band_buffers(e, job, rows, dbl, big)?;
                stats_rows(e, &c, job, (q, z), (&wb, scr.as_ref()), (a, b), rows)?;
                let qb = e.read_at(q, a * w * rs, rows * w * rs)?;
                let zb = e.read_at(z, a * w * t * rs, rows * w * t * rs)?;
                drop((wb, scr));
                self.down += (qb.len() + zb.len()) as u64;
                let mut out = decode(&qb, dbl);
                out.extend(decode(&zb, dbl));
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
                    dbl,
                    big,
                };
                let (contrib, up) = pair_batch(e, &c, job, &run, (a, b))?;
                self.up += up;
                self.down += (contrib.len() * if dbl { 8 } else { 4 }) as u64;
                Ok(contrib)
            }
        }
    }

    fn bytes(&self) -> (u64, u64) {
        (self.up, self.down)
    }
}
