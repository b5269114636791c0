//! The certified search's stages of a run (issue 29; see [`super::super::Certify`]): per
//! batch the margins of each frame (`cert_frames`), the relaxed maxima and the voxels near the
//! extrema (`cert_peaks`), their reads, and each frame settled on the host with exact voxels.

use bridge_core::exec::{Buffer, Executor, Grid, TypedExecutor};
use bridge_core::{BridgeError, Result};
use rayon::prelude::*;

use super::super::{Certify, Timed, to_u32};
use super::{Batch, Collected, Launched, LogRun};
use crate::detect::blob_log::{Blob, DeviceFound, SearchCand, blobs_of_device_search};
use crate::detect::gpu::DevReal;
use crate::detect::kernels::MINMAX_WG;
use crate::detect::real::Real;

/// The certified search of a run ([`Certify`]) and its buffers beyond the plain search's.
pub(super) struct CertRun<'a, E: Executor, T> {
    /// The plan and the host's frames.
    pub(super) c: Certify<'a, T>,
    /// Each candidate's open neighbours (`cap`, beside `idx_buf` and `val_buf`).
    near_bits: Buffer<E, u32>,
    /// The voxels near the extrema: (cube index, kind) pairs, `ncap` of them.
    near: Buffer<E, u32>,
    /// Capacity of `near`, grown when a batch has more.
    ncap: usize,
    /// Work groups a frame of `frame_absmax` (0: `cert_frames` scans each frame itself; see
    /// [`super::super::scan_groups`]).
    scan_groups: usize,
}

/// Voxels near a frame's extrema past which the certified search gives it to the CPU (twice
/// the CPU search's cap per extremum: the host checks each).
const NEAR_CAP_FRAME: usize = 2 << 14;

/// Candidates of a frame of `plane` pixels past which the certified search gives it to the
/// CPU (as the CPU's own search declines a frame whose relaxed maxima overflow about a fifth
/// of its pixels): a blank or flat frame is not read back voxel by voxel.
fn cand_cap_frame(plane: usize) -> usize {
    (plane / 4).max(4096)
}

impl<'a, E: Executor, T> CertRun<'a, E, T> {
    /// The search of `c` on `e`, its buffers sized for `cap` candidates and a batch of `chunk`
    /// frames (both grown when a batch finds more), each frame's image scanned by
    /// `scan_groups` work groups (0: by `cert_frames` alone).
    pub(super) fn new(
        e: &E,
        c: Certify<'a, T>,
        cap: usize,
        chunk: usize,
        scan_groups: usize,
    ) -> Result<Self> {
        let ncap = (chunk * 64).max(1024);
        Ok(CertRun {
            c,
            near_bits: e.alloc_elems::<u32>(cap)?,
            near: e.alloc_elems::<u32>(2 * ncap)?,
            ncap,
            scan_groups,
        })
    }
}

/// What the certified search found in one frame (see [`DeviceFound`]); `e` is NaN where the
/// device did not search it (a pixel or the f32 cube's extrema not finite, a blank frame,
/// magnitudes beyond 10^±20) or found too many voxels near its extrema or too many candidates:
/// the frame is then computed on the CPU.
pub(crate) struct CertFound {
    cands: Vec<SearchCand<f32>>,
    near_lo: Vec<(usize, usize, usize)>,
    near_hi: Vec<(usize, usize, usize)>,
    e: f64,
}

/// The error of a certified stage on a run without the certified search (a bug).
fn no_search() -> BridgeError {
    BridgeError::backend("detect", None, "no certified search")
}

impl<'a, 'c, E: Executor, T: Real, R: DevReal, A: DevReal> LogRun<'a, 'c, E, T, R, A> {
    /// The run's certified search.
    fn cert(&self) -> Result<&CertRun<'c, E, T>> {
        self.cert.as_ref().ok_or_else(no_search)
    }

    /// The blobs of each frame of a batch of the certified search (from frame `frame0` of the
    /// run), frames in parallel: settled with exact voxels of the host's frame
    /// ([`blobs_of_device_search`]), or computed on the CPU where the bound cannot certify it.
    pub(super) fn settle(
        &mut self,
        frame0: usize,
        found: Vec<CertFound>,
    ) -> Result<Vec<Vec<Blob>>> {
        let p = self.p;
        let c = &self.cert()?.c;
        let dims = (self.h, self.w);
        let out: Vec<(Vec<Blob>, bool)> = found
            .into_par_iter()
            .enumerate()
            .map(|(i, f)| {
                let image = c.frames.frame(frame0 + i)?;
                let found = DeviceFound {
                    cands: &f.cands,
                    near_lo: &f.near_lo,
                    near_hi: &f.near_hi,
                    e: f.e,
                };
                blobs_of_device_search::<T>(&image, dims, p, &c.plan, found)
            })
            .collect::<Result<_>>()?;
        let on_host = out.iter().filter(|o| o.1).count();
        if on_host > 0 {
            log::debug!(
                "detect: the certified search left {on_host} of {} frames to the CPU",
                out.len()
            );
        }
        self.host_frames += on_host;
        Ok(out.into_iter().map(|o| o.0).collect())
    }

    /// Each frame's margins of the certified search, on the device (`cert_frames`): its
    /// extrema from the partials in `part` (the fused pass left them; else `cube_minmax` finds
    /// them), the largest magnitude of its pixels (in parts by `frame_absmax` first, with
    /// several scan groups a frame), the margin `e` and the lower bound of its threshold.
    pub(super) fn cert_frames(
        &mut self,
        b: &Batch,
        part: &Buffer<E, R>,
        timed: &mut Timed<'_>,
    ) -> Result<Buffer<E, R>> {
        let (e, k, nb) = (self.e, &self.k, b.nb);
        let groups_u = self.partial_extrema(b, part, timed)?;
        let (e1, e0) = self.cert()?.c.plan.margin();
        let fr = e.alloc_elems::<R>(4 * nb)?;
        let ((has_abs, abs_thr), (has_rel, rel)) = self.threshold_args();
        // an absolute threshold beyond f32's range, clamped: still a lower bound of the
        // threshold where it matters (the certified cube stays far below f32::MAX)
        let big = f64::from(f32::MAX);
        let abs_thr = abs_thr.clamp(-big, big);
        let plane = to_u32(self.plane, "frame size")?;
        let frame0 = to_u32(b.frame0, "frame")?;
        let inf = R::from_f64(f64::INFINITY);
        // each frame's largest magnitude in parts, by several groups a frame
        let scan = self.cert()?.scan_groups;
        let scan_u = to_u32(scan, "scan groups")?;
        // no parts without the scan: cert_frames then reads none (`part` stands in)
        let parts = if scan > 0 {
            Some(e.alloc_elems::<R>(nb * scan)?)
        } else {
            None
        };
        let amax = parts.as_ref().unwrap_or(part);
        if scan > 0 {
            let (global, local) = ([scan * MINMAX_WG, nb], [MINMAX_WG, 1]);
            timed("frame_absmax", &mut || {
                k.frame_absmax(
                    Grid::new(&global, &local),
                    &self.img,
                    frame0,
                    amax,
                    plane,
                    scan_u,
                    inf,
                )
            })?;
        }
        let (global, local) = ([nb * MINMAX_WG], [MINMAX_WG]);
        timed("cert_frames", &mut || {
            k.cert_frames(
                Grid::new(&global, &local),
                &self.img,
                frame0,
                part,
                &fr,
                plane,
                groups_u,
                R::from_f64(f64::from(e1)),
                R::from_f64(f64::from(e0)),
                has_abs,
                R::from_f64(abs_thr),
                has_rel,
                R::from_f64(rel),
                inf,
                amax,
                scan_u,
            )
        })?;
        Ok(fr)
    }

    /// Enqueues `cert_peaks` on the batch (the margins `fr` of [`Self::cert_frames`]): the
    /// relaxed maxima with their open neighbours, and the voxels near each frame's extrema.
    /// Returns the counters: candidates, and voxels near the extrema (all, then per frame).
    pub(super) fn enqueue_cert_peaks(
        &self,
        b: &Batch,
        fr: &Buffer<E, R>,
        part: &Buffer<E, R>,
        timed: &mut Timed<'_>,
    ) -> Result<(Buffer<E, i32>, Buffer<E, i32>)> {
        let c = self.cert()?;
        let (hu, wu, nsu, nbu) = (self.hu, self.wu, self.nsu, b.nbu);
        let (by, bx) = self.border;
        let counter = self.e.zeroed_elems::<i32>(1)?;
        // voxels near the extrema (all, then per frame), then candidates per frame
        let ncount = self.e.zeroed_elems::<i32>(1 + 2 * b.nb)?;
        let cap = to_u32(self.cap, "candidates")?;
        let cand_cap = to_u32(cand_cap_frame(self.plane), "candidates")?;
        let ncap = to_u32(c.ncap, "voxels near the extrema")?;
        let near_cap = to_u32(NEAR_CAP_FRAME, "voxels near the extrema")?;
        let peaks = u32::from(!self.border_empty);
        timed("cert_peaks", &mut || {
            self.k.cert_peaks(
                Grid::new(&b.global, &b.local),
                &self.cube,
                fr,
                hu,
                wu,
                nsu,
                nbu,
                by,
                bx,
                peaks,
                &counter,
                &self.idx_buf,
                &self.val_buf,
                &c.near_bits,
                cap,
                cand_cap,
                &ncount,
                &c.near,
                ncap,
                near_cap,
                R::from_f64(f64::INFINITY),
                part,
            )
        })?;
        Ok((counter, ncount))
    }

    /// Reads what the certified search found in a launched batch: the counts (the search runs
    /// again on grown buffers when there were more than fit), the candidates with their open
    /// neighbours, the voxels near the extrema and each frame's margin, decoded per frame.
    pub(super) fn collect_cert(
        &mut self,
        l: &Launched<E, R>,
        (counter, ncount): (&Buffer<E, i32>, &Buffer<E, i32>),
        timed: &mut Timed<'_>,
    ) -> Result<Collected<R>> {
        let e = self.e;
        let (nb, plane) = (l.b.nb, self.plane);
        let count_of = |v: i32| {
            usize::try_from(v)
                .map_err(|_| BridgeError::backend("detect", None, "candidate counter overflowed"))
        };
        let t = std::time::Instant::now();
        let mut grown: Option<(Buffer<E, i32>, Buffer<E, i32>)> = None;
        let (count, counts) = loop {
            let (c_buf, n_buf) = match &grown {
                Some((a, b)) => (a, b),
                None => (counter, ncount),
            };
            let count = count_of(e.read_elems(c_buf, 1)?.first().copied().unwrap_or(0))?;
            // per-frame counts count every voxel (past i32::MAX they wrap: read unsigned)
            let counts: Vec<usize> = e
                .read_elems(n_buf, 1 + 2 * nb)?
                .into_iter()
                .map(|v| v as u32 as usize)
                .collect();
            let near = counts.first().copied().unwrap_or(0);
            let c = self.cert.as_mut().ok_or_else(no_search)?;
            if count <= self.cap && near <= c.ncap {
                break (count, counts);
            }
            if count > self.cap {
                self.cap = count.next_power_of_two();
                self.idx_buf = e.alloc_elems::<u32>(self.cap)?;
                self.val_buf = e.alloc_elems::<R>(self.cap)?;
                c.near_bits = e.alloc_elems::<u32>(self.cap)?;
            }
            if near > c.ncap {
                c.ncap = near.next_power_of_two();
                c.near = e.alloc_elems::<u32>(2 * c.ncap)?;
            }
            grown = Some(self.enqueue_cert_peaks(&l.b, &l.thr, &l.part, timed)?);
        };
        let c = self.cert()?;
        let near_n = counts.first().copied().unwrap_or(0);
        let (idx, val, bits) = if count > 0 {
            (
                e.read_elems(&self.idx_buf, count)?,
                e.read_elems(&self.val_buf, count)?,
                e.read_elems(&c.near_bits, count)?,
            )
        } else {
            (Vec::new(), Vec::new(), Vec::new())
        };
        let near = if near_n > 0 {
            e.read_elems(&c.near, 2 * near_n)?
        } else {
            Vec::new()
        };
        let fr = e.read_elems(&l.thr, 4 * nb)?;
        self.read_s += t.elapsed().as_secs_f64();
        let mut found: Vec<CertFound> = (0..nb)
            .map(|b| {
                let margin = Real::to_f64(fr[4 * b + 2]);
                let searched = Real::to_f64(fr[4 * b + 3]) < f64::INFINITY;
                let few = counts.get(1 + b).is_some_and(|&n| n <= NEAR_CAP_FRAME)
                    && counts
                        .get(1 + nb + b)
                        .is_some_and(|&n| n <= cand_cap_frame(plane));
                CertFound {
                    cands: Vec::new(),
                    near_lo: Vec::new(),
                    near_hi: Vec::new(),
                    e: if searched && few { margin } else { f64::NAN },
                }
            })
            .collect();
        for ((&o, &v), &near) in idx.iter().zip(&val).zip(&bits) {
            let (b, s, y, x) = self.voxel_at(o);
            if let Some(f) = found.get_mut(b) {
                let v = Real::to_f64(v) as f32;
                f.cands.push(SearchCand { y, x, s, v, near });
            }
        }
        for pair in near.chunks_exact(2) {
            let (b, s, y, x) = self.voxel_at(pair[0]);
            if let Some(f) = found.get_mut(b) {
                if pair[1] & 1 != 0 {
                    f.near_lo.push((s, y, x));
                }
                if pair[1] & 2 != 0 {
                    f.near_hi.push((s, y, x));
                }
            }
        }
        Ok(Collected::Cert(l.b.frame0, found))
    }
}
