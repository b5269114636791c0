//! Several devices at once (`--device a,b` or `all`), or rank 0 and the other MPI ranks: each
//! chunk through `algorithms::detect::multi`'s queue, and what every device did.

use algorithms::detect::{
    DetectBackend, DetectMember, DeviceShare, Feature, LocateParams, LogDetector, Movie,
    MultiPolicy, Particle, backend_for, locate_movie_members,
};
use bridge_core::Result;

use super::super::common::Global;
use super::super::device::Choice;

/// Where detection runs: one device (with how it was chosen) or several at once.
pub(super) enum Runner {
    One(Choice),
    Several(Multi),
}

/// Several devices at once: their back ends (opened once), what each did so far, and which
/// are still working (a device that failed takes no later chunk). Under mpirun, rank 0's one
/// back end and the other ranks (`peers`, shares after the back ends', in rank order).
pub(super) struct Multi {
    backends: Vec<Box<dyn DetectBackend>>,
    pub(super) shares: Vec<DeviceShare>,
    alive: Vec<bool>,
    /// Shares are by MPI rank.
    pub(super) ranked: bool,
    #[cfg(feature = "mpi")]
    pub(super) peers: Vec<super::super::mpi::RankPeer>,
}

impl Multi {
    pub(super) fn new(devices: &[bridge_core::Device]) -> Result<Multi> {
        let backends = devices
            .iter()
            .map(|&d| backend_for(&arraybridge::open_device(d)?))
            .collect::<Result<Vec<_>>>()?;
        let shares = backends
            .iter()
            .map(|b| DeviceShare::new(b.device()))
            .collect();
        let alive = vec![true; devices.len()];
        Ok(Multi {
            backends,
            shares,
            alive,
            ranked: false,
            #[cfg(feature = "mpi")]
            peers: Vec::new(),
        })
    }

    /// Rank 0 on `device` and ranks 1..`size` (their devices are known once they report).
    #[cfg(feature = "mpi")]
    pub(super) fn ranks(device: bridge_core::Device, size: usize) -> Result<Multi> {
        let mut m = Multi::new(&[device])?;
        m.ranked = true;
        m.peers = (1..size)
            .map(super::super::mpi::RankPeer::new)
            .collect::<Result<Vec<_>>>()?;
        m.shares
            .extend((1..size).map(|_| DeviceShare::new(bridge_core::Device::Cpu)));
        Ok(m)
    }

    /// The devices, comma-separated.
    pub(super) fn device_text(&self) -> String {
        let names: Vec<String> = self.shares.iter().map(|s| s.device.to_string()).collect();
        names.join(",")
    }

    /// One line per device (or rank): its frames, batches, seconds, splits and failure.
    pub(super) fn print_shares(&self, g: Global) {
        for (i, s) in self.shares.iter().enumerate() {
            g.note(format!(
                "  {}{}: {} frames in {} batches, {:.3} s{}{}",
                if self.ranked {
                    format!("rank {i} ")
                } else {
                    String::new()
                },
                s.device,
                s.frames,
                s.units,
                s.seconds,
                if s.splits > 0 {
                    format!(", {} batches split after running out of memory", s.splits)
                } else {
                    String::new()
                },
                s.error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(", stopped: {e}"))
            ));
        }
    }

    /// `locate` on one chunk on every device still working; rows numbered from `frame0`.
    pub(super) fn locate(
        &mut self,
        p: &LocateParams,
        batch_size: usize,
        chunk: &Movie,
        frame0: usize,
        policy: MultiPolicy,
        progress: impl Fn(usize) + Sync,
    ) -> Result<Vec<(usize, Feature)>> {
        let live = self.live();
        #[cfg_attr(not(feature = "mpi"), allow(unused_mut))]
        let mut members: Vec<DetectMember<'_, Vec<Feature>>> = live
            .iter()
            .map(|&i| DetectMember::Local(self.backends[i].as_ref()))
            .collect();
        #[cfg(feature = "mpi")]
        if !self.peers.is_empty() {
            super::super::mpi::share_movie(Some(chunk))?;
            members.extend(self.peers.iter().map(|p| {
                DetectMember::Peer(p as &dyn algorithms::detect::FramePeer<Vec<Feature>>)
            }));
        }
        let out = locate_movie_members(chunk, p, &members, batch_size, policy, progress)?;
        self.record(&live, out.shares);
        Ok(out
            .features
            .into_iter()
            .enumerate()
            .flat_map(|(k, feats)| feats.into_iter().map(move |f| (frame0 + k, f)))
            .collect())
    }

    /// One chunk on every device; its frame numbers start at 0 (the caller shifts them).
    pub(super) fn detect(
        &mut self,
        det: &LogDetector,
        chunk: &Movie,
        policy: MultiPolicy,
        progress: impl Fn(usize) + Sync,
    ) -> Result<Vec<Particle>> {
        let live = self.live();
        #[cfg(feature = "mpi")]
        if !self.peers.is_empty() {
            super::super::mpi::share_movie(Some(chunk))?;
            let mut members: Vec<DetectMember<'_>> = live
                .iter()
                .map(|&i| DetectMember::Local(self.backends[i].as_ref()))
                .collect();
            members.extend(
                self.peers
                    .iter()
                    .map(|p| DetectMember::Peer(p as &dyn algorithms::detect::FramePeer)),
            );
            let out = det.detect_movie_members(chunk, &members, policy, progress)?;
            self.record(&live, out.shares);
            return Ok(out.particles);
        }
        let refs: Vec<&dyn DetectBackend> =
            live.iter().map(|&i| self.backends[i].as_ref()).collect();
        let out = det.detect_movie_multi(chunk, &refs, policy, progress)?;
        self.record(&live, out.shares);
        Ok(out.particles)
    }

    /// The devices still working (a device that failed takes no later chunk).
    fn live(&self) -> Vec<usize> {
        (0..self.backends.len())
            .filter(|&i| self.alive[i])
            .collect()
    }

    /// A run's shares added to the totals: the first `live.len()` are the live devices', the
    /// rest the ranks' (after every local device's row).
    fn record(&mut self, live: &[usize], shares: Vec<DeviceShare>) {
        let n = live.len();
        for (k, s) in shares.into_iter().enumerate() {
            if k < n {
                self.alive[live[k]] = s.error.is_none();
                self.shares[live[k]].add(s);
            } else if let Some(share) = self.shares.get_mut(self.backends.len() + k - n) {
                share.device = s.device;
                share.add(s);
            }
        }
    }
}
