//! Detection on several devices at once: a work queue of frame ranges.
//!
//! [`LogDetector::detect_movie_on`] (devices by name) and [`LogDetector::detect_movie_multi`]
//! (back ends) cut the movie into units of `batch_size` frames and hand them out, one at a
//! time, to whichever device is free: a slower or busier device simply takes fewer. A frame's
//! detections do not depend on the batch it is in, so the result is identical to the
//! single-device run (same particles, in frame order).
//!
//! Faults stay local:
//! - an out-of-memory error on a unit of several frames splits it in halves, queued first (the
//!   device keeps working); on a single frame, that device stops and the frame goes to the
//!   others;
//! - any other error stops that device; its unit goes back to the queue when
//!   [`MultiPolicy::requeue_on_failure`] is set (the others finish the movie), otherwise the
//!   call fails with that error, naming the device.
//!
//! [`locate_movie_on`] and [`locate_movie_multi`] run trackpy `locate` through the same queue.
//!
//! Every unit is computed exactly once; the call fails when a unit is left that no device can
//! take. [`DeviceShare`] reports what each device did.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use bridge_core::{BridgeError, Device, Result};

use super::backend::DetectBackend;
use super::blob_log::{Blob, BlobLogParams};
use super::detector::{LogDetector, Particle};
use super::dispatch::backend_for;
use super::locate::{Feature, LocateParams};
use super::{FrameView, Movie};
use crate::exec::DeviceHandle;
use crate::units::{Units, next_unit};

/// What to do when a device fails with something other than running out of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MultiPolicy {
    /// Give the failed device's unit to the other devices (the failure is still reported in
    /// [`DeviceShare::error`]); `false` (default): the call fails.
    pub requeue_on_failure: bool,
}

/// What one device did in a multi-device run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceShare {
    /// The device (`opencl:0` in JSON).
    #[serde(serialize_with = "device_name")]
    pub device: Device,
    /// Frames it detected.
    pub frames: usize,
    /// Units (frame ranges) it completed.
    pub units: usize,
    /// Seconds it spent detecting.
    pub seconds: f64,
    /// Units it split after running out of memory.
    pub splits: usize,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
}

impl DeviceShare {
    /// Nothing done yet on `device`.
    pub fn new(device: Device) -> Self {
        DeviceShare {
            device,
            frames: 0,
            units: 0,
            seconds: 0.0,
            splits: 0,
            error: None,
        }
    }

    /// Add what `more` (a later run on the same device) did; its error, if any, replaces this
    /// one's.
    pub fn add(&mut self, more: DeviceShare) {
        self.frames += more.frames;
        self.units += more.units;
        self.seconds += more.seconds;
        self.splits += more.splits;
        if more.error.is_some() {
            self.error = more.error;
        }
    }
}

/// The particles of a multi-device run and each device's share.
#[derive(Debug, Clone)]
pub struct MultiOutcome {
    /// Every particle, in frame order (as [`LogDetector::detect_movie`] gives them).
    pub particles: Vec<Particle>,
    /// One entry per device, in the order given.
    pub shares: Vec<DeviceShare>,
}

fn device_name<S: serde::Serializer>(d: &Device, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(d)
}

/// A member of a detection run that detects in another process (an MPI rank, say): the
/// caller's transport to a [`LogDetector::serve_frames`] (`T` = [`Particle`]) or a
/// [`serve_locate`] (`T` = one `Vec<Feature>` per frame) running there on the same movie and
/// parameters. Every method blocks until the answer is there; a transport failure is an error.
pub trait FramePeer<T = Particle>: Sync {
    /// The peer's device, and whether its back end exists (or why not).
    fn device(&self) -> (Device, Result<()>);
    /// The results of frames `[a, b)` of the movie (frame numbers from the movie's start):
    /// the particles, or the features of each frame.
    fn frames(&self, range: (usize, usize)) -> Result<Vec<T>>;
    /// Tell the peer to stop. Called once for every peer when the run ends, failed or not.
    fn finish(&self) -> Result<()>;
}

/// The other side of a [`FramePeer`]: how [`LogDetector::serve_frames`] (or [`serve_locate`])
/// talks to the process that runs [`LogDetector::detect_movie_members`] (or
/// [`locate_movie_members`]).
pub trait FrameServer<T = Particle> {
    /// Report the device, and whether its back end exists (or why not).
    fn device(&mut self, device: Device, r: Result<()>) -> Result<()>;
    /// The next frame range to detect, or `None`: stop.
    fn next(&mut self) -> Result<Option<(usize, usize)>>;
    /// Send the results of the range last received, or why they could not be computed.
    fn result(&mut self, r: Result<Vec<T>>) -> Result<()>;
    /// The last message.
    fn finish(&mut self) -> Result<()>;
}

/// One member of a [`LogDetector::detect_movie_members`] (or, `T` = `Vec<Feature>`,
/// [`locate_movie_members`]) run.
pub enum DetectMember<'a, T = Particle> {
    /// A back end of this process.
    Local(&'a dyn DetectBackend),
    /// A device of another process, reached through the caller's transport.
    Peer(&'a dyn FramePeer<T>),
}

/// The device of each member (a peer is asked once) and a peer's start failure.
fn member_starts<T>(members: &[DetectMember<'_, T>]) -> Vec<(Device, Option<BridgeError>)> {
    members
        .iter()
        .map(|m| match m {
            DetectMember::Local(b) => (b.device(), None),
            DetectMember::Peer(p) => {
                let (d, r) = p.device();
                (d, r.err())
            }
        })
        .collect()
}

/// Finish every peer of `members` after `run`: `run`'s error first, then the first peer's.
fn finish_peers<T, O>(members: &[DetectMember<'_, T>], run: Result<O>) -> Result<O> {
    let mut first_err = None;
    for m in members {
        if let DetectMember::Peer(p) = m
            && let Err(e) = p.finish()
        {
            first_err.get_or_insert(e);
        }
    }
    let out = run?;
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The loop of a serving process: report the device (`ready`: the frames and the back end,
/// or why not), then compute each range the server hands out with `work` until it says stop.
fn serve<T>(
    ready: Result<(Vec<FrameView<'_>>, Box<dyn DetectBackend>)>,
    device: Device,
    server: &mut dyn FrameServer<T>,
    work: impl Fn(&[FrameView<'_>], usize, &dyn DetectBackend) -> Result<Vec<T>>,
) -> Result<()> {
    let (frames, backend) = match ready {
        Ok(r) => {
            server.device(device, Ok(()))?;
            r
        }
        Err(e) => {
            server.device(device, Err(e))?;
            while server.next()?.is_some() {
                server.result(Err(BridgeError::backend(
                    "detect",
                    None,
                    "this member failed earlier and detects nothing",
                )))?;
            }
            return server.finish();
        }
    };
    while let Some((a, b)) = server.next()? {
        let r = match frames.get(a..b) {
            Some(batch) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                work(batch, a, backend.as_ref())
            }))
            .unwrap_or_else(|_| {
                Err(BridgeError::backend(
                    "detect",
                    None,
                    "the back end panicked",
                ))
            }),
            None => Err(BridgeError::invalid_argument(
                "frames",
                format!("{a}..{b} is not within the movie's {} frames", frames.len()),
            )),
        };
        server.result(r)?;
    }
    server.finish()
}

struct Queue<T> {
    /// Frame ranges `[start, end)` and the devices working on them.
    units: Units,
    /// Results by first frame.
    done: BTreeMap<usize, Vec<T>>,
}

impl LogDetector {
    /// Detect `movie` on every device of `devices` at once (see the [module docs](self)).
    /// Unknown or unavailable devices are an error before any work starts; a device named
    /// twice is an error too.
    pub fn detect_movie_on(
        &self,
        movie: &Movie,
        devices: &[DeviceHandle],
        policy: MultiPolicy,
    ) -> Result<MultiOutcome> {
        let backends = open_devices(devices)?;
        let refs: Vec<&dyn DetectBackend> = backends.iter().map(|b| b.as_ref()).collect();
        self.detect_movie_multi(movie, &refs, policy, |_| {})
    }

    /// [`Self::detect_movie_on`] with explicit back ends; `progress(frames_done)` is called as
    /// units complete.
    pub fn detect_movie_multi(
        &self,
        movie: &Movie,
        backends: &[&dyn DetectBackend],
        policy: MultiPolicy,
        progress: impl Fn(usize) + Sync,
    ) -> Result<MultiOutcome> {
        let members: Vec<DetectMember<'_>> =
            backends.iter().map(|&b| DetectMember::Local(b)).collect();
        self.detect_movie_members(movie, &members, policy, progress)
    }

    /// [`Self::detect_movie_multi`] over back ends of this process and [`FramePeer`]s of others
    /// (MPI ranks): the same queue and fault handling, so the particles are the same as one
    /// device's. Every peer is finished ([`FramePeer::finish`]) before this returns, failed or
    /// not.
    pub fn detect_movie_members(
        &self,
        movie: &Movie,
        members: &[DetectMember<'_>],
        policy: MultiPolicy,
        progress: impl Fn(usize) + Sync,
    ) -> Result<MultiOutcome> {
        let run = self.members_run(movie, members, policy, progress);
        finish_peers(members, run)
    }

    /// Serve the frame ranges a [`Self::detect_movie_members`] run in another process hands to
    /// this one, on `device` (opened with `open`, e.g. `arraybridge::open_device`), with the
    /// same movie and detector: report the device, then detect each range
    /// [`FrameServer::next`] gives until it says stop. A failure of the device, its opening
    /// included, is reported to the other side; only a transport failure is returned.
    pub fn serve_frames(
        &self,
        movie: &Movie,
        device: Device,
        open: &dyn Fn(Device) -> Result<DeviceHandle>,
        server: &mut dyn FrameServer,
    ) -> Result<()> {
        let ready = open(device).and_then(|d| backend_for(&d)).and_then(|b| {
            self.prepare(movie, &[b.as_ref()])
                .map(|(p, frames)| ((frames, b), p))
        });
        let (ready, p) = match ready {
            Ok((r, p)) => (Ok(r), Some(p)),
            Err(e) => (Err(e), None),
        };
        serve(ready, device, server, |batch, a, backend| match &p {
            Some(p) => self.detect_batch(batch, a, backend, p),
            None => Err(BridgeError::backend("detect", None, "no parameters")),
        })
    }

    fn members_run(
        &self,
        movie: &Movie,
        members: &[DetectMember<'_>],
        policy: MultiPolicy,
        progress: impl Fn(usize) + Sync,
    ) -> Result<MultiOutcome> {
        if members.is_empty() {
            return Err(BridgeError::invalid_argument(
                "devices",
                "at least one device is needed",
            ));
        }
        let local: Vec<&dyn DetectBackend> = members
            .iter()
            .filter_map(|m| match m {
                DetectMember::Local(b) => Some(*b),
                DetectMember::Peer(_) => None,
            })
            .collect();
        let (p, frames) = self.prepare(movie, &local)?;
        // each peer's device, asked once before the work starts
        let starts = member_starts(members);
        let (particles, shares) = run_queue(
            frames.len(),
            self.batch_size,
            members,
            starts,
            policy,
            progress,
            |member, (a, b)| match member {
                DetectMember::Local(backend) => self.detect_batch(&frames[a..b], a, *backend, &p),
                DetectMember::Peer(peer) => peer.frames((a, b)),
            },
        )?;
        Ok(MultiOutcome { particles, shares })
    }
}

/// The back ends of `devices`, each named once.
fn open_devices(devices: &[DeviceHandle]) -> Result<Vec<Box<dyn DetectBackend>>> {
    for (i, d) in devices.iter().enumerate() {
        if devices[..i].contains(d) {
            return Err(BridgeError::invalid_argument(
                "devices",
                format!("{d} is named twice"),
            ));
        }
    }
    devices.iter().map(backend_for).collect()
}

/// The features of a several-device `locate` run and each device's share.
#[derive(Debug, Clone)]
pub struct LocateOutcome {
    /// One result per frame, in frame order (as [`locate_movie`](super::locate_movie) gives
    /// them).
    pub features: Vec<Vec<Feature>>,
    /// One entry per device, in the order given.
    pub shares: Vec<DeviceShare>,
}

/// `trackpy.locate` on every frame of `movie` on every device of `devices` at once: the queue
/// of [`LogDetector::detect_movie_on`] (units of `batch_size` frames to whichever device is
/// free, out-of-memory splits, `policy` for other failures). A frame's features do not depend
/// on the batch it is in or the device that ran it (every device back end computes in f64 on
/// PoCL and the host finishes each frame with the CPU's code), so the result is the same as
/// [`locate_movie`](super::locate_movie) on one device. Unknown or unavailable devices, a
/// device named twice, and invalid parameters are errors before any work starts.
pub fn locate_movie_on(
    movie: &Movie,
    p: &LocateParams,
    devices: &[DeviceHandle],
    batch_size: usize,
    policy: MultiPolicy,
) -> Result<LocateOutcome> {
    p.validate()?;
    let backends = open_devices(devices)?;
    let refs: Vec<&dyn DetectBackend> = backends.iter().map(|b| b.as_ref()).collect();
    locate_movie_multi(movie, p, &refs, batch_size, policy, |_| {})
}

/// [`locate_movie_on`] with explicit back ends; `progress(frames_done)` is called as units
/// complete.
pub fn locate_movie_multi(
    movie: &Movie,
    p: &LocateParams,
    backends: &[&dyn DetectBackend],
    batch_size: usize,
    policy: MultiPolicy,
    progress: impl Fn(usize) + Sync,
) -> Result<LocateOutcome> {
    let members: Vec<DetectMember<'_, Vec<Feature>>> =
        backends.iter().map(|&b| DetectMember::Local(b)).collect();
    locate_movie_members(movie, p, &members, batch_size, policy, progress)
}

/// [`locate_movie_multi`] over back ends of this process and [`FramePeer`]s of others (MPI
/// ranks running [`serve_locate`]): the same queue and fault handling, so the features are
/// the same as one device's. Every peer is finished ([`FramePeer::finish`]) before this
/// returns, failed or not.
pub fn locate_movie_members(
    movie: &Movie,
    p: &LocateParams,
    members: &[DetectMember<'_, Vec<Feature>>],
    batch_size: usize,
    policy: MultiPolicy,
    progress: impl Fn(usize) + Sync,
) -> Result<LocateOutcome> {
    let frames = movie.frames();
    let run = locate_frames_members(&frames, p, members, batch_size, policy, progress);
    finish_peers(members, run)
}

/// scikit-image `blob_log` on every frame of `frames` on every back end of `backends` at
/// once: the queue of [`LogDetector::detect_movie_on`] (units of `batch_size` frames to
/// whichever device is free, out-of-memory splits, `policy` for other failures). A frame's
/// blobs do not depend on the batch it is in, so they are those of one device's run (each
/// device's own: a device without doubles may round the responses of its cube differently
/// from the CPU). The blobs of each frame in frame order, and each device's share.
pub fn blob_log_frames_multi(
    frames: &[FrameView<'_>],
    p: &BlobLogParams,
    backends: &[&dyn DetectBackend],
    batch_size: usize,
    policy: MultiPolicy,
    progress: impl Fn(usize) + Sync,
) -> Result<(Vec<Vec<Blob>>, Vec<DeviceShare>)> {
    p.validate()?;
    let members: Vec<DetectMember<'_, Vec<Blob>>> =
        backends.iter().map(|&b| DetectMember::Local(b)).collect();
    check_run(&members, batch_size)?;
    let starts = member_starts(&members);
    run_queue(
        frames.len(),
        batch_size,
        &members,
        starts,
        policy,
        progress,
        // an input error names its frames in the movie (a unit counts from its first)
        |member, (a, b)| {
            match member {
                DetectMember::Local(backend) => {
                    check_count("blob_log", backend.blob_log_batch(&frames[a..b], p)?, b - a)
                }
                DetectMember::Peer(peer) => peer.frames((a, b)),
            }
            .map_err(|e| e.of_batch(a..b))
        },
    )
}

/// trackpy `locate` on every frame of `frames` on every back end of `backends` at once, as
/// [`locate_movie_multi`] runs a [`Movie`] (the same features as one device's).
pub fn locate_frames_multi(
    frames: &[FrameView<'_>],
    p: &LocateParams,
    backends: &[&dyn DetectBackend],
    batch_size: usize,
    policy: MultiPolicy,
    progress: impl Fn(usize) + Sync,
) -> Result<LocateOutcome> {
    let members: Vec<DetectMember<'_, Vec<Feature>>> =
        backends.iter().map(|&b| DetectMember::Local(b)).collect();
    locate_frames_members(frames, p, &members, batch_size, policy, progress)
}

/// The queue of [`locate_movie_members`] over `frames` (peers are not finished here).
fn locate_frames_members(
    frames: &[FrameView<'_>],
    p: &LocateParams,
    members: &[DetectMember<'_, Vec<Feature>>],
    batch_size: usize,
    policy: MultiPolicy,
    progress: impl Fn(usize) + Sync,
) -> Result<LocateOutcome> {
    p.validate()?;
    check_run(members, batch_size)?;
    let starts = member_starts(members);
    let (features, shares) = run_queue(
        frames.len(),
        batch_size,
        members,
        starts,
        policy,
        progress,
        // an input error names its frames in the movie (a unit counts from its first)
        |member, (a, b)| {
            match member {
                DetectMember::Local(backend) => locate_unit(&frames[a..b], *backend, p),
                DetectMember::Peer(peer) => check_count("locate", peer.frames((a, b))?, b - a),
            }
            .map_err(|e| e.of_batch(a..b))
        },
    )?;
    Ok(LocateOutcome { features, shares })
}

/// The checks of a several-device run before any work: members, and a batch of at least one.
fn check_run<T>(members: &[DetectMember<'_, T>], batch_size: usize) -> Result<()> {
    if members.is_empty() {
        return Err(BridgeError::invalid_argument(
            "devices",
            "at least one device is needed",
        ));
    }
    if batch_size == 0 {
        return Err(BridgeError::invalid_argument(
            "batch_size",
            "must be at least 1",
        ));
    }
    Ok(())
}

/// `locate` on one unit of frames, one result per frame.
fn locate_unit(
    frames: &[FrameView<'_>],
    backend: &dyn DetectBackend,
    p: &LocateParams,
) -> Result<Vec<Vec<Feature>>> {
    check_count("locate", backend.locate_batch(frames, p)?, frames.len())
}

/// `out` when it has one result per frame of a unit of `n` (`what`: the algorithm, for the
/// error).
fn check_count<T>(what: &str, out: Vec<T>, n: usize) -> Result<Vec<T>> {
    if out.len() != n {
        return Err(BridgeError::backend(
            what,
            None,
            format!("{} results for {n} frames", out.len()),
        ));
    }
    Ok(out)
}

/// Serve the frame ranges a [`locate_movie_members`] run in another process hands to this
/// one, on `device` (opened with `open`, e.g. `arraybridge::open_device`), with the same movie
/// and parameters: report the device, then `locate` each range [`FrameServer::next`] gives
/// until it says stop. A failure of the device, its opening included, is reported to the other
/// side; only a transport failure is returned.
pub fn serve_locate(
    movie: &Movie,
    p: &LocateParams,
    device: Device,
    open: &dyn Fn(Device) -> Result<DeviceHandle>,
    server: &mut dyn FrameServer<Vec<Feature>>,
) -> Result<()> {
    let ready = p
        .validate()
        .and_then(|()| open(device))
        .and_then(|d| backend_for(&d))
        .map(|b| (movie.frames(), b));
    serve(ready, device, server, |batch, _, backend| {
        locate_unit(batch, backend, p)
    })
}

/// A queue member that may split its own batches when out of memory.
trait OwnSplits {
    /// The batch splits its back end made since last asked (a peer reports none).
    fn own_splits(&self) -> usize;
}

impl<T> OwnSplits for DetectMember<'_, T> {
    fn own_splits(&self) -> usize {
        match self {
            DetectMember::Local(b) => b.take_splits(),
            DetectMember::Peer(_) => 0,
        }
    }
}

/// The queue of a several-device run over `n` frames in units of `batch` frames: each member
/// (whose device and start failure, if any, are in `starts`) takes units as it is free and
/// runs `work` on them (one result per item, items of a unit in frame order); the results of
/// every unit, in frame order, and each member's share.
fn run_queue<M: Sync + OwnSplits, T: Send>(
    n: usize,
    batch: usize,
    members: &[M],
    starts: Vec<(Device, Option<BridgeError>)>,
    policy: MultiPolicy,
    progress: impl Fn(usize) + Sync,
    work: impl Fn(&M, (usize, usize)) -> Result<Vec<T>> + Sync,
) -> Result<(Vec<T>, Vec<DeviceShare>)> {
    let todo = (0..n)
        .step_by(batch.max(1))
        .map(|s| (s, (s + batch.max(1)).min(n)))
        .collect();
    let queue = Mutex::new(Queue {
        units: Units::new(todo, members.len()),
        done: BTreeMap::new(),
    });
    let lock = || queue.lock().unwrap_or_else(|e| e.into_inner());
    let frames_done = Mutex::new(0usize);
    let shares: Vec<DeviceShare> = std::thread::scope(|scope| {
        let workers: Vec<_> = members
            .iter()
            .zip(starts)
            .map(|(member, (device, failed))| {
                let (lock, frames_done, progress, work) = (&lock, &frames_done, &progress, &work);
                scope.spawn(move || {
                    let mut share = DeviceShare::new(device);
                    if let Some(e) = failed {
                        // a peer that could not start: as a failure before its first unit
                        share.error = Some(e.to_string());
                        lock().units.stop_device(None, e, policy, |e| match e {
                            BridgeError::InvalidInput(_) => e,
                            other => BridgeError::backend(
                                "detect",
                                None,
                                format!("{device} failed to start: {other}"),
                            ),
                        });
                        return share;
                    }
                    while let Some((a, b)) = next_unit(|| lock().units.take()) {
                        let t = Instant::now();
                        // a panic in a back end is that device's failure, never a hang of
                        // the others (its unit would otherwise stay "running")
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            work(member, (a, b))
                        }))
                        .unwrap_or_else(|_| {
                            Err(BridgeError::backend(
                                "detect",
                                None,
                                "the back end panicked",
                            ))
                        });
                        share.seconds += t.elapsed().as_secs_f64();
                        let mut q = lock();
                        q.units.end_unit();
                        match r {
                            Ok(ps) => {
                                share.frames += b - a;
                                share.units += 1;
                                share.splits += member.own_splits();
                                q.done.insert(a, ps);
                                drop(q);
                                let mut d = frames_done.lock().unwrap_or_else(|e| e.into_inner());
                                *d += b - a;
                                progress(*d);
                            }
                            Err(e) if e.is_oom() && q.units.split((a, b)) => {
                                share.splits += 1;
                            }
                            Err(e) => {
                                share.error = Some(e.to_string());
                                q.units.stop_device(Some((a, b)), e, policy, |e| match e {
                                    BridgeError::InvalidInput(_) => e,
                                    other => BridgeError::backend(
                                        "detect",
                                        None,
                                        format!("{device} failed on frames {a}..{b}: {other}"),
                                    ),
                                });
                                break;
                            }
                        }
                    }
                    share
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| DeviceShare {
                    error: Some("the worker thread panicked".into()),
                    ..DeviceShare::new(Device::Cpu)
                })
            })
            .collect()
    });
    let q = queue.into_inner().unwrap_or_else(|e| e.into_inner());
    let drained = q.units.finish()?;
    let covered: usize = shares.iter().map(|s| s.frames).sum();
    if covered != n || !drained {
        return Err(BridgeError::backend(
            "detect",
            None,
            format!("{covered} of {n} frames detected: no device could take the rest"),
        ));
    }
    Ok((q.done.into_values().flatten().collect(), shares))
}
