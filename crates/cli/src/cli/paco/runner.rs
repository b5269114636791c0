//! Where `arraybridge paco` computes its maps: the device choice (one device, several at once, or
//! one per MPI rank), the maps on those devices, and each device's share of the work.

use std::time::Instant;

#[cfg(feature = "mpi")]
use algorithms::paco::{Member, UnitPeer, paco_members};
use algorithms::paco::{
    MultiPolicy, PacoMaps, PacoParams, PacoShare, SubPixel, paco_on, paco_on_device,
};
use bridge_core::{BridgeError, Device, Result};

use super::super::common::Stages;
use super::super::device::{Choice, PACO, nominal_cpu, paco_workload, resolve};
use super::inputs::Inputs;
use super::{Args, Ranks};

/// Where PACO runs: one device (with how it was chosen), several at once, or one per MPI rank
/// (rank 0's device, number of ranks).
pub(super) enum Runner {
    One(Choice),
    Several(Vec<Device>),
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    Ranks(Device, usize),
}

impl Runner {
    /// The device choice: one device per MPI rank under mpirun (rank 0's here, said), the devices
    /// of `--device a,b` or `all`, else one device (`auto`: the offload decision on the cube's
    /// workload, said). Also says that `--requeue` needs several devices.
    pub(super) fn choose(
        args: &Args,
        stages: &Stages,
        several: Option<Vec<Device>>,
        ranks: Option<Ranks>,
        rank_device: Option<(Device, String)>,
        (t, h, w): (usize, usize, usize),
        radius: usize,
    ) -> Result<Runner> {
        let runner = match (several, ranks, rank_device) {
            (_, Some(p), Some((device, how))) => {
                stages.say(format!(
                    "paco: {} MPI ranks ({} on this node); rank 0 on {device} ({how})",
                    p.size, p.local_size
                ));
                Runner::Ranks(device, p.size)
            }
            (Some(devices), _, _) => Runner::Several(devices),
            _ => Runner::One(resolve(args.device.clone(), PACO, || {
                let (cpu, note) = nominal_cpu();
                Ok((paco_workload(t, h.max(w), radius), cpu, note))
            })?),
        };
        if let Runner::One(c) = &runner
            && let Some(note) = c.auto_note("paco")
        {
            stages.say(note);
        }
        if args.requeue && matches!(runner, Runner::One(_)) {
            stages.say("--requeue has no effect with one device: it hands a failed device's work to the others of --device a,b or all");
        }
        Ok(runner)
    }

    /// The maps of `inputs` on these devices, and each device's (or rank's) share of the work
    /// when there are several (`requeue`: a failed device's tiles go to the others).
    pub(super) fn maps(
        &mut self,
        inputs: &Inputs,
        params: &PacoParams,
        requeue: bool,
    ) -> Result<(PacoMaps, Option<Vec<PacoShare>>)> {
        let Inputs { cube, angles, psf } = inputs;
        let policy = MultiPolicy {
            requeue_on_failure: requeue,
        };
        let mut shares: Option<Vec<PacoShare>> = None;
        let maps = match self {
            Runner::One(choice) => choice.run("paco", |d| {
                paco_on_device(
                    &arraybridge::open_device(d)?,
                    cube.view(),
                    angles.view(),
                    psf.view(),
                    params,
                )
            }),
            #[cfg(feature = "mpi")]
            Runner::Ranks(device, n) => {
                let peers = (1..*n)
                    .map(crate::cli::mpi::RankPeer::new)
                    .collect::<Result<Vec<_>>>()?;
                let mut members = vec![Member::Local(arraybridge::open_device(*device)?)];
                members.extend(peers.iter().map(|p| Member::Peer(p as &dyn UnitPeer)));
                paco_members(
                    cube.view(),
                    angles.view(),
                    psf.view(),
                    params,
                    &members,
                    policy,
                )
                .map(|m| {
                    shares = Some(m.shares);
                    m.maps
                })
            }
            #[cfg(not(feature = "mpi"))]
            Runner::Ranks(..) => Err(BridgeError::Unsupported(
                "MPI ranks need the `mpi` feature".into(),
            )),
            Runner::Several(devices) => paco_on(
                cube.view(),
                angles.view(),
                psf.view(),
                params,
                &crate::cli::device::open_all(devices)?,
                policy,
            )
            .map(|m| {
                shares = Some(m.shares);
                m.maps
            }),
        }
        .map_err(|e| match e {
            BridgeError::Unsupported(m) if params.subpixel == SubPixel::Spline5 => {
                BridgeError::Unsupported(format!(
                    "--subpixel-method spline5: {m}; use table[:Q] or fft instead"
                ))
            }
            other => other,
        })?;
        Ok((maps, shares))
    }

    /// Says how long the maps took (from `t1`) and how the PSF was normalised, then each
    /// device's (or rank's) share of the work.
    pub(super) fn report(
        &self,
        stages: &Stages,
        t1: Instant,
        maps: &PacoMaps,
        shares: Option<&[PacoShare]>,
    ) {
        stages.say(format!(
            "paco: maps in {:.3} s (PSF divided by {:.6}{})",
            t1.elapsed().as_secs_f64(),
            maps.psf_norm_factor,
            maps.fwhm
                .map(|f| format!(", FWHM {f:.4} px"))
                .unwrap_or_default()
        ));
        let by_rank = self.by_rank();
        for (i, s) in shares.into_iter().flatten().enumerate() {
            stages.say(format!(
                "  {}{}: {} tiles ({} statistics pixels), {:.3} s, {} up, {} down{}{}",
                if by_rank {
                    format!("rank {i} ")
                } else {
                    String::new()
                },
                s.device,
                s.units,
                s.pixels,
                s.seconds,
                bridge_core::units::format_bytes(s.bytes_up),
                bridge_core::units::format_bytes(s.bytes_down),
                if s.splits > 0 {
                    format!(", {} tiles split after running out of memory", s.splits)
                } else {
                    String::new()
                },
                s.error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(", stopped: {e}"))
            ));
        }
    }

    /// True with one device per MPI rank (the shares are then the ranks').
    pub(super) fn by_rank(&self) -> bool {
        matches!(self, Runner::Ranks(..))
    }

    /// `opencl:0` or `opencl:0,opencl:1`.
    pub(super) fn name(&self) -> String {
        match self {
            Runner::One(c) => c.device.to_string(),
            Runner::Ranks(d, n) => format!("{d} and {} more MPI ranks", n - 1),
            Runner::Several(v) => v
                .iter()
                .map(Device::to_string)
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}
