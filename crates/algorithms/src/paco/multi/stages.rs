//! The stages of a [`paco_members`] run (`members_run`): each member's arithmetic, the CPU
//! alone with sub-pixel templates, the one arithmetic every member must share, and the work
//! queue of pixel runs (with templates) or of statistics rows (without), reduced on the host.
//!
//! [`paco_members`]: super::paco_members

use std::sync::Mutex;
use std::time::Instant;

use bridge_core::{BridgeError, Device, Result};

#[cfg(any(feature = "opencl", feature = "cuda"))]
use super::Pairs;
use super::{Member, MultiPolicy, PacoMulti, PacoShare, Ready, Source, UNIT_GROUPS};
use super::{member_worker, run_units};
use crate::paco::backend::{CpuBackend, PacoBackend};
use crate::paco::cpu::sum_trajectories;
use crate::paco::job::PacoJob;
use crate::paco::maps_from_ab;
use crate::paco::settings::PacoParams;

/// Every member's device, how it is reached, and its arithmetic ([`member_arithmetic`]).
pub(super) type Arithmetic<'p> = (Vec<Device>, Vec<Ready<'p>>, Vec<Option<bool>>);

/// Every member's device, how it is reached, and its arithmetic (double or not; `None` for a
/// peer that cannot take part), in the members' order. A local device that cannot be reached
/// is an error.
pub(super) fn member_arithmetic<'p>(members: &[Member<'p>]) -> Result<Arithmetic<'p>> {
    let mut devices = Vec::with_capacity(members.len());
    let mut sources = Vec::with_capacity(members.len());
    // each member's arithmetic (double or not); None for a peer that cannot take part
    let mut fp64: Vec<Option<bool>> = Vec::with_capacity(members.len());
    for m in members {
        match m {
            Member::Local(d) => {
                let s = Source::of(d)?;
                devices.push(d.device());
                fp64.push(Some(s.fp64()));
                sources.push(Ready::Local(s));
            }
            Member::Peer(p) => match p.arithmetic() {
                (d, Ok(f)) => {
                    devices.push(d);
                    fp64.push(Some(f));
                    sources.push(Ready::Peer(*p));
                }
                (d, Err(e)) => {
                    devices.push(d);
                    fp64.push(None);
                    sources.push(Ready::Failed(Mutex::new(Some(e))));
                }
            },
        }
    }
    Ok((devices, sources, fp64))
}

/// The run of the CPU alone with sub-pixel templates: its own back end, one unit.
pub(super) fn cpu_alone(job: &PacoJob<'_>) -> Result<PacoMulti> {
    let t = Instant::now();
    let (a, b) = CpuBackend.ab_maps(job)?;
    let (h, w) = (job.geom.height, job.geom.width);
    let share = PacoShare {
        units: 1,
        pixels: h * w,
        seconds: t.elapsed().as_secs_f64(),
        ..PacoShare::new(Device::Cpu)
    };
    Ok(PacoMulti {
        maps: maps_from_ab(a, b, job),
        shares: vec![share],
    })
}

/// The arithmetic of the run (double or not): the first member's that can take part. An error
/// when none can (the first failure says why) or when the members do not all share it.
pub(super) fn shared_arithmetic(
    devices: &[Device],
    fp64: &[Option<bool>],
    sources: &[Ready<'_>],
) -> Result<bool> {
    let Some(first) = fp64.iter().position(Option::is_some) else {
        // nobody can take part: the first failure says why
        return Err(sources
            .iter()
            .find_map(|s| match s {
                Ready::Failed(e) => e.lock().ok().and_then(|mut e| e.take()),
                _ => None,
            })
            .unwrap_or_else(|| BridgeError::backend("paco", None, "no member can take part")));
    };
    let dbl = fp64[first].unwrap_or(true);
    if fp64.iter().any(|f| f.is_some_and(|f| f != dbl)) {
        let of = |want: bool| {
            devices
                .iter()
                .zip(fp64)
                .filter(|(_, f)| **f == Some(want))
                .map(|(d, _)| d.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let (doubles, floats) = (of(true), of(false));
        return Err(BridgeError::Unsupported(format!(
            "{doubles} compute in double and {floats} in float: the devices of one PACO run \
             must share the arithmetic (the maps would match neither device's run); choose \
             one kind: --device {doubles} (double) or --device {floats} (float)"
        )));
    }
    Ok(dbl)
}

/// The run with sub-pixel templates on the pairs of `plan`: runs of consecutive trajectory
/// pixels (the single-device batches, cut so every device gets several) handed to the members,
/// their pair contributions added to a and b in unit order, then converted to the cube's units.
#[cfg(any(feature = "opencl", feature = "cuda"))]
pub(super) fn templates_run<'j>(
    job: &'j PacoJob<'j>,
    plan: &'j Pairs,
    devices: &[Device],
    sources: &'j [Ready<'j>],
    policy: MultiPolicy,
    dbl: bool,
) -> Result<PacoMulti> {
    let n = devices.len();
    let (t, h, w) = job.cube.dim();
    let piece = plan.pixels().div_ceil(4 * n).max(1);
    let units: Vec<(usize, usize)> = plan
        .batches(job, dbl)
        .into_iter()
        .flat_map(|(ga, gb)| {
            (ga..gb)
                .step_by(piece)
                .map(move |a| (a, (a + piece).min(gb)))
        })
        .collect();
    let mut a = vec![0.0f64; h * w];
    let mut b = vec![0.0f64; h * w];
    let shares = run_units(
        units,
        devices,
        &|i| member_worker(&sources[i], job, Some(plan)),
        policy,
        &|(ga, gb)| gb - ga,
        &mut |r, data| plan.add(r, &data, t, &mut a, &mut b),
    )?;
    plan.finish(&mut a, &mut b);
    job.ab_from_device(dbl, &mut a, &mut b);
    let shape = (h, w);
    let err = |e: ndarray::ShapeError| BridgeError::Unsupported(format!("internal: {e}"));
    let a = ndarray::Array2::from_shape_vec(shape, a).map_err(err)?;
    let b = ndarray::Array2::from_shape_vec(shape, b).map_err(err)?;
    Ok(PacoMulti {
        maps: maps_from_ab(a, b, job),
        shares,
    })
}

/// The run without templates: ranges of statistics rows handed to the members, their q and z
/// rows copied into the full-frame q and z, then summed along every trajectory on the host in
/// the members' arithmetic and converted to the cube's units.
pub(super) fn rows_run<'j>(
    job: &'j PacoJob<'j>,
    params: &PacoParams,
    devices: &[Device],
    sources: &'j [Ready<'j>],
    policy: MultiPolicy,
    dbl: bool,
) -> Result<PacoMulti> {
    let n = devices.len();
    let (t, h, w) = job.cube.dim();
    let ((y_lo, y_hi), (x_lo, x_hi)) = job.geom.stats_ranges();
    let nx = x_hi - x_lo;
    // statistics rows: a few units per device, at most one device launch each
    let rows = y_hi.saturating_sub(y_lo);
    let k = job.disk.len();
    let mut cap = (UNIT_GROUPS / nx.max(1)).max(1);
    if k > crate::paco::gpu_kernels::KMAX {
        cap = cap.min((params.max_tile_bytes / (nx * k * k * 8).max(1)).max(1));
    }
    let piece = rows.div_ceil(4 * n).clamp(1, cap);
    let units: Vec<(usize, usize)> = (y_lo..y_hi)
        .step_by(piece)
        .map(|a| (a, (a + piece).min(y_hi)))
        .collect();
    let mut q = crate::paco::stats::try_vec(h * w, f64::NAN)?;
    let mut z = crate::paco::stats::try_vec(h * w * t, f64::NAN)?;
    let shares = run_units(
        units,
        devices,
        &|i| member_worker(&sources[i], job, None),
        policy,
        &|(ya, yb)| (yb - ya) * nx,
        &mut |(ya, yb), data| {
            let (qs, zs) = data.split_at((yb - ya) * w);
            for (r, y) in (ya..yb).enumerate() {
                q[y * w + x_lo..y * w + x_hi].copy_from_slice(&qs[r * w + x_lo..r * w + x_hi]);
                z[(y * w + x_lo) * t..(y * w + x_hi) * t]
                    .copy_from_slice(&zs[(r * w + x_lo) * t..(r * w + x_hi) * t]);
            }
        },
    )?;
    // q, z and these sums are in the units of the cube as the devices converted it; the
    // CPU-alone path gets a and b in the cube's units from its back end
    let (mut a, mut b) = sum_trajectories(job, &q, &z, dbl)?;
    job.ab_from_device(dbl, &mut a, &mut b);
    Ok(PacoMulti {
        maps: maps_from_ab(a, b, job),
        shares,
    })
}
