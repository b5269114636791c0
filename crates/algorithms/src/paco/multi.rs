//! PACO on several devices at once: a work queue of statistics units.
//!
//! [`paco_on`] takes a list of devices like [`LogDetector::detect_movie_on`]. PACO's work is
//! per *trajectory pixel* θ (its covariance, Cholesky factor and whatever uses it); every
//! output position φ0 only sums what its trajectory visits. So the units handed out are:
//!
//! - without sub-pixel templates, ranges of statistics rows: the device computes q and the
//!   whitened matched-filter cube z of those rows and sends them back; the host then sums
//!   along every trajectory in increasing ℓ, in the device's arithmetic (double, or float on
//!   devices without doubles), exactly as `paco_accumulate` does;
//! - with sub-pixel templates, runs of consecutive trajectory pixels (the single-device
//!   batches, cut smaller so every device gets several): the device evaluates every pair
//!   (φ0, ℓ) of its pixels and sends the contributions back; the host adds them to a(φ0),
//!   b(φ0) in unit order, which is the single-device order.
//!
//! Each device uploads the cube once (in the thread that drives it, so uploads overlap) and
//! then takes one unit at a time from the queue: a slower or busier device takes fewer. The
//! maps are bit-identical to the single-device run on any of the devices (and, in double, to
//! the CPU back end): a unit's numbers do not depend on which device or range computed them.
//!
//! Faults stay local, as in detection ([`MultiPolicy`]): out of memory on a unit of several
//! rows or pixels splits it in halves (queued first); on one row or pixel, or while uploading
//! the cube, that device stops and its unit goes to the others; any other failure fails the run
//! naming the device unless [`MultiPolicy::requeue_on_failure`] is set. Every unit is computed
//! once; the run fails when a unit is left that no device can take.
//!
//! Units are computed on the job's working cube (the caller's cube times a power of two when
//! its scale is extreme, see [`PacoJob::cube_scale`], and in float times another that brings
//! it into [0.5, 1)); every member builds its job from the same cube, so with the same powers,
//! and the host converts the reduced a and b to the cube's units once.
//!
//! The CPU may be one of the devices without sub-pixel templates (its statistics rows are the
//! device kernels' numbers bit for bit in double); with templates it runs alone only.
//! Devices of one run must share the arithmetic (all double or all float).
//!
//! [`LogDetector::detect_movie_on`]: crate::detect::LogDetector::detect_movie_on

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use bridge_core::{BridgeError, Device, Result};
use ndarray::{ArrayView1, ArrayView2, ArrayView3};

pub use crate::detect::MultiPolicy;

use super::PacoMaps;
use super::cpu::FastRows;
use super::job::PacoJob;
use super::settings::{PacoParams, SubPixel};
use crate::exec::DeviceHandle;
use crate::units::{Units, next_unit};

mod stages;

/// Most statistics pixels of one unit without templates (one `paco_stats` launch on a device).
const UNIT_GROUPS: usize = 1 << 16;

/// What one device did in a multi-device PACO run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PacoShare {
    /// The device (`opencl:0` in JSON).
    #[serde(serialize_with = "device_name")]
    pub device: Device,
    /// Units (tiles of statistics rows or trajectory pixels) it completed.
    pub units: usize,
    /// Statistics pixels it computed.
    pub pixels: usize,
    /// Seconds it spent, the cube's upload included.
    pub seconds: f64,
    /// Bytes it uploaded (cube, tables, per-unit inputs).
    pub bytes_up: u64,
    /// Bytes it downloaded (q and z rows, or pair contributions).
    pub bytes_down: u64,
    /// Units it split after running out of memory.
    pub splits: usize,
    /// Why it stopped early, if it did.
    pub error: Option<String>,
}

impl PacoShare {
    /// Nothing done yet on `device`.
    pub fn new(device: Device) -> Self {
        PacoShare {
            device,
            units: 0,
            pixels: 0,
            seconds: 0.0,
            bytes_up: 0,
            bytes_down: 0,
            splits: 0,
            error: None,
        }
    }
}

fn device_name<S: serde::Serializer>(d: &Device, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(d)
}

/// The maps of a multi-device run and each device's share.
#[derive(Debug, Clone)]
pub struct PacoMulti {
    /// The maps, identical to a single-device run's.
    pub maps: PacoMaps,
    /// One entry per device, in the order given.
    pub shares: Vec<PacoShare>,
}

/// One device of a run: computes one unit at a time.
pub(crate) trait UnitWorker {
    /// The numbers of unit `[a, b)`: q rows then z rows (statistics rows), or two values per
    /// pair slot (pixel runs with templates).
    fn unit(&mut self, range: (usize, usize)) -> Result<Vec<f64>>;
    /// Bytes (uploaded, downloaded) so far.
    fn bytes(&self) -> (u64, u64);
}

struct CpuWorker<'j>(FastRows<'j>);

impl UnitWorker for CpuWorker<'_> {
    fn unit(&mut self, range: (usize, usize)) -> Result<Vec<f64>> {
        let (mut q, z) = self.0.rows(range)?;
        q.extend(z);
        Ok(q)
    }

    fn bytes(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// How a device is reached.
enum Source {
    Cpu,
    #[cfg(any(feature = "opencl", feature = "cuda"))]
    Exec(crate::exec::AnyExecutor),
}

impl Source {
    /// How `device` is reached: the CPU, or its executor (`Unsupported` for torch devices).
    fn of(device: &DeviceHandle) -> Result<Source> {
        if device.device() == Device::Cpu {
            return Ok(Source::Cpu);
        }
        #[cfg(any(feature = "opencl", feature = "cuda"))]
        {
            device.executor_for("PACO").map(Source::Exec)
        }
        #[cfg(not(any(feature = "opencl", feature = "cuda")))]
        {
            device.executor_for("PACO").map(|_| Source::Cpu)
        }
    }

    fn fp64(&self) -> bool {
        match self {
            Source::Cpu => true,
            #[cfg(any(feature = "opencl", feature = "cuda"))]
            Source::Exec(any) => match any {
                #[cfg(feature = "opencl")]
                crate::exec::AnyExecutor::OpenCl(e) => bridge_core::exec::Executor::has_fp64(e),
                #[cfg(feature = "cuda")]
                crate::exec::AnyExecutor::Cuda(e) => bridge_core::exec::Executor::has_fp64(e),
            },
        }
    }
}

#[cfg(any(feature = "opencl", feature = "cuda"))]
type Pairs = super::gpu::PairPlan;
#[cfg(not(any(feature = "opencl", feature = "cuda")))]
type Pairs = ();

/// Build `source`'s worker (uploads the cube).
#[cfg_attr(
    not(any(feature = "opencl", feature = "cuda")),
    allow(unused_variables)
)]
fn make_worker<'j>(
    source: &Source,
    job: &'j PacoJob<'j>,
    pairs: Option<&'j Pairs>,
) -> Result<Box<dyn UnitWorker + 'j>> {
    match source {
        Source::Cpu => Ok(Box::new(CpuWorker(FastRows::new(job)?))),
        #[cfg(any(feature = "opencl", feature = "cuda"))]
        Source::Exec(any) => match any {
            #[cfg(feature = "opencl")]
            crate::exec::AnyExecutor::OpenCl(e) => {
                Ok(Box::new(super::gpu::GpuWorker::new(e.clone(), job, pairs)?))
            }
            #[cfg(feature = "cuda")]
            crate::exec::AnyExecutor::Cuda(e) => {
                Ok(Box::new(super::gpu::GpuWorker::new(e.clone(), job, pairs)?))
            }
        },
    }
}

/// Run PACO on the full output grid on every device of `devices` at once: a work queue of
/// statistics units (rows of q and z without templates, runs of trajectory pixels with them),
/// reduced on the host in the single-device order, so the maps are bit-identical to one
/// device's; out of memory splits a unit. Unknown or unavailable devices, a device named twice, devices of
/// different arithmetic and the CPU next to others with sub-pixel templates are errors before
/// any work starts.
pub fn paco_on(
    cube: ArrayView3<'_, f64>,
    angles: ArrayView1<'_, f64>,
    psf: ArrayView2<'_, f64>,
    params: &PacoParams,
    devices: &[DeviceHandle],
    policy: MultiPolicy,
) -> Result<PacoMulti> {
    for (i, d) in devices.iter().enumerate() {
        if devices[..i].contains(d) {
            return Err(BridgeError::invalid_argument(
                "devices",
                format!("{d} is named twice"),
            ));
        }
    }
    let members: Vec<Member<'_>> = devices.iter().cloned().map(Member::Local).collect();
    paco_members(cube, angles, psf, params, &members, policy)
}

/// A member of a PACO run that computes its units in another process (an MPI rank, say): the
/// caller's transport to a [`serve_units`] running there on the same inputs and parameters.
/// Every method blocks until the answer is there; a transport failure is an error.
pub trait UnitPeer: Sync {
    /// The peer's device, and whether it computes in double, known once its executor exists
    /// (before it uploads the cube), or why it cannot take part.
    fn arithmetic(&self) -> (Device, Result<bool>);
    /// Wait until the peer holds the cube (its upload finished), or why it failed.
    fn ready(&self) -> Result<()>;
    /// The numbers of unit `range` (as [`UnitServer::next`] receives it).
    fn unit(&self, range: (usize, usize)) -> Result<Vec<f64>>;
    /// Tell the peer to stop; its bytes (uploaded, downloaded). Called once for every peer
    /// when the run ends, failed or not, so no peer waits for ever.
    fn finish(&self) -> Result<(u64, u64)>;
}

/// The other side of a [`UnitPeer`]: how [`serve_units`] talks to the process that runs
/// [`paco_members`]. A transport failure is an error (the serving ends with it).
pub trait UnitServer {
    /// Report the device and its arithmetic (double or not), or why it cannot take part.
    fn arithmetic(&mut self, device: Device, r: Result<bool>) -> Result<()>;
    /// Report that the cube is uploaded, or why it failed (only after an `Ok` arithmetic).
    fn ready(&mut self, r: Result<()>) -> Result<()>;
    /// The next unit to compute, or `None`: stop.
    fn next(&mut self) -> Result<Option<(usize, usize)>>;
    /// Send the numbers of the unit last received, or why they could not be computed.
    fn result(&mut self, r: Result<Vec<f64>>) -> Result<()>;
    /// The last message: bytes (uploaded, downloaded) on the device.
    fn finish(&mut self, bytes: (u64, u64)) -> Result<()>;
}

/// One member of a [`paco_members`] run.
pub enum Member<'p> {
    /// An open device of this process.
    Local(DeviceHandle),
    /// A device of another process, reached through the caller's transport.
    Peer(&'p dyn UnitPeer),
}

/// [`paco_on`] over devices of this process and [`UnitPeer`]s of others (MPI ranks): the same
/// work queue, fault handling and host reduction, so the maps are bit-identical to one device's.
/// Every peer is finished ([`UnitPeer::finish`]) before this returns, failed or not; its bytes
/// are its share's.
pub fn paco_members(
    cube: ArrayView3<'_, f64>,
    angles: ArrayView1<'_, f64>,
    psf: ArrayView2<'_, f64>,
    params: &PacoParams,
    members: &[Member<'_>],
    policy: MultiPolicy,
) -> Result<PacoMulti> {
    let run = members_run(cube, angles, psf, params, members, policy);
    let mut finished = Vec::new();
    let mut first_err = None;
    for (i, m) in members.iter().enumerate() {
        if let Member::Peer(p) = m {
            match p.finish() {
                Ok(b) => finished.push((i, b)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
    }
    let mut out = run?;
    if let Some(e) = first_err {
        return Err(e);
    }
    for (i, (up, down)) in finished {
        if let Some(s) = out.shares.get_mut(i) {
            (s.bytes_up, s.bytes_down) = (up, down);
        }
    }
    Ok(out)
}

/// Serve the units a [`paco_members`] run in another process hands to this one, on `device`
/// (opened with `open`, e.g. `arraybridge::open_device`), with the same inputs and parameters:
/// report the arithmetic, upload the cube, then compute each unit [`UnitServer::next`] gives
/// until it says stop. A failure of the device, its opening included, is reported to the other
/// side (which decides, as for its own devices); only a transport failure is returned.
pub fn serve_units(
    cube: ArrayView3<'_, f64>,
    angles: ArrayView1<'_, f64>,
    psf: ArrayView2<'_, f64>,
    params: &PacoParams,
    device: Device,
    open: &dyn Fn(Device) -> Result<DeviceHandle>,
    server: &mut dyn UnitServer,
) -> Result<()> {
    let job = match PacoJob::new(cube, angles, psf, params) {
        Ok(j) => j,
        Err(e) => {
            server.arithmetic(device, Err(e))?;
            return drain(server);
        }
    };
    let source = open(device).and_then(|d| Source::of(&d));
    let source = match source {
        Ok(s) => {
            server.arithmetic(device, Ok(s.fp64()))?;
            s
        }
        Err(e) => {
            server.arithmetic(device, Err(e))?;
            return drain(server);
        }
    };
    let (_, h, w) = job.cube.dim();
    let templates = params.subpixel != SubPixel::Off;
    let plan: Option<Pairs> = if templates {
        #[cfg(any(feature = "opencl", feature = "cuda"))]
        {
            let pos = move |i: usize| (i / w, i % w);
            match Pairs::new(&job, &pos, h * w) {
                Ok(p) => Some(p),
                Err(e) => {
                    server.ready(Err(e))?;
                    return drain(server);
                }
            }
        }
        #[cfg(not(any(feature = "opencl", feature = "cuda")))]
        {
            let _ = (h, w);
            None
        }
    } else {
        None
    };
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        make_worker(&source, &job, plan.as_ref())
    }))
    .unwrap_or_else(|_| Err(BridgeError::backend("paco", None, "the back end panicked")));
    let mut worker = match built {
        Ok(w) => {
            server.ready(Ok(()))?;
            w
        }
        Err(e) => {
            server.ready(Err(e))?;
            return drain(server);
        }
    };
    while let Some(range) = server.next()? {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker.unit(range)))
            .unwrap_or_else(|_| Err(BridgeError::backend("paco", None, "the back end panicked")));
        server.result(r)?;
    }
    server.finish(worker.bytes())
}

/// After a failure was reported: answer every unit with an error until told to stop.
fn drain(server: &mut dyn UnitServer) -> Result<()> {
    while server.next()?.is_some() {
        server.result(Err(BridgeError::backend(
            "paco",
            None,
            "this member failed earlier and computes nothing",
        )))?;
    }
    server.finish((0, 0))
}

/// A peer as one of the run's workers.
struct PeerWorker<'p>(&'p dyn UnitPeer);

impl UnitWorker for PeerWorker<'_> {
    fn unit(&mut self, range: (usize, usize)) -> Result<Vec<f64>> {
        self.0.unit(range)
    }

    fn bytes(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// A member once its arithmetic is known.
enum Ready<'p> {
    Local(Source),
    Peer(&'p dyn UnitPeer),
    /// It cannot take part (the error goes through the policy like an upload failure).
    Failed(Mutex<Option<BridgeError>>),
}

/// The worker of a member whose arithmetic is known (a peer: once it holds the cube).
fn member_worker<'j>(
    ready: &'j Ready<'j>,
    job: &'j PacoJob<'j>,
    pairs: Option<&'j Pairs>,
) -> Result<Box<dyn UnitWorker + 'j>> {
    match ready {
        Ready::Local(s) => make_worker(s, job, pairs),
        Ready::Peer(p) => {
            p.ready()?;
            Ok(Box::new(PeerWorker(*p)))
        }
        Ready::Failed(e) => Err(e
            .lock()
            .ok()
            .and_then(|mut e| e.take())
            .unwrap_or_else(|| BridgeError::backend("paco", None, "member failed"))),
    }
}

/// [`paco_members`] without finishing the peers: the members' arithmetic checked
/// ([`stages::member_arithmetic`], [`stages::shared_arithmetic`]), then the CPU alone
/// ([`stages::cpu_alone`]), the pixel runs with templates (`stages::templates_run`) or the
/// statistics rows ([`stages::rows_run`]).
fn members_run(
    cube: ArrayView3<'_, f64>,
    angles: ArrayView1<'_, f64>,
    psf: ArrayView2<'_, f64>,
    params: &PacoParams,
    members: &[Member<'_>],
    policy: MultiPolicy,
) -> Result<PacoMulti> {
    if members.is_empty() {
        return Err(BridgeError::invalid_argument(
            "devices",
            "at least one device is needed",
        ));
    }
    let job = PacoJob::new(cube, angles, psf, params)?;
    let templates = params.subpixel != SubPixel::Off;
    let (devices, sources, fp64) = stages::member_arithmetic(members)?;
    let has_cpu = devices
        .iter()
        .zip(&fp64)
        .any(|(&d, f)| d == Device::Cpu && f.is_some());
    if templates && has_cpu {
        if members.len() > 1 {
            return Err(BridgeError::Unsupported(
                "PACO with sub-pixel templates on several devices runs on device back ends \
                 only: drop cpu from the device list (or run on the CPU alone)"
                    .into(),
            ));
        }
        // the CPU alone: its own back end
        return stages::cpu_alone(&job);
    }
    let dbl = stages::shared_arithmetic(&devices, &fp64, &sources)?;
    if templates {
        #[cfg(any(feature = "opencl", feature = "cuda"))]
        {
            let (_, h, w) = job.cube.dim();
            let pos = move |i: usize| (i / w, i % w);
            let plan = Pairs::new(&job, &pos, h * w)?;
            return stages::templates_run(&job, &plan, &devices, &sources, policy, dbl);
        }
    }
    stages::rows_run(&job, params, &devices, &sources, policy, dbl)
}

struct Queue<'s> {
    /// Units `[a, b)` and the devices working on them.
    units: Units,
    /// Results waiting for the units before them: start → (end, numbers).
    done: BTreeMap<usize, (usize, Vec<f64>)>,
    /// Start of the next unit the sink takes (units are handed to it in order).
    next: usize,
    sink: &'s mut (dyn FnMut((usize, usize), Vec<f64>) + Send),
}

/// A device failed (with `unit` in hand): out of memory (it fits nothing) or with requeue asked
/// for, it stops and the others go on; otherwise the run fails, naming the device.
fn fail(
    q: &mut Queue<'_>,
    share: &mut PacoShare,
    unit: Option<(usize, usize)>,
    e: BridgeError,
    what: &str,
    policy: MultiPolicy,
) {
    share.error = Some(e.to_string());
    let device = share.device;
    q.units.stop_device(unit, e, policy, |e| match e {
        BridgeError::InvalidInput(_)
        | BridgeError::Unsupported(_)
        | BridgeError::Cancelled { .. } => e,
        other => BridgeError::backend("paco", None, format!("{device} failed {what}: {other}")),
    });
}

type MakeWorker<'a, 'j> = dyn Fn(usize) -> Result<Box<dyn UnitWorker + 'j>> + Sync + 'a;

/// Hand `units` to the devices (worker `i` from `make(i)`, built in its own thread), feed the
/// results to `sink` in unit order, and report each device's share.
fn run_units<'j>(
    units: Vec<(usize, usize)>,
    devices: &[Device],
    make: &MakeWorker<'_, 'j>,
    policy: MultiPolicy,
    pixels: &(dyn Fn((usize, usize)) -> usize + Sync),
    sink: &mut (dyn FnMut((usize, usize), Vec<f64>) + Send),
) -> Result<Vec<PacoShare>> {
    let (first, end) = match (units.first(), units.last()) {
        (Some(f), Some(l)) => (f.0, l.1),
        _ => (0, 0),
    };
    let queue = Mutex::new(Queue {
        units: Units::new(units.into(), devices.len()),
        done: BTreeMap::new(),
        next: first,
        sink,
    });
    let lock = || queue.lock().unwrap_or_else(|e| e.into_inner());
    let shares: Vec<PacoShare> = std::thread::scope(|scope| {
        let workers: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(i, &device)| {
                let lock = &lock;
                scope.spawn(move || {
                    let mut share = PacoShare::new(device);
                    let t0 = Instant::now();
                    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| make(i)))
                        .unwrap_or_else(|_| {
                            Err(BridgeError::backend("paco", None, "the back end panicked"))
                        });
                    share.seconds += t0.elapsed().as_secs_f64();
                    let mut worker = match built {
                        Ok(w) => w,
                        Err(e) => {
                            let mut q = lock();
                            fail(&mut q, &mut share, None, e, "uploading the cube", policy);
                            return share;
                        }
                    };
                    while let Some((a, b)) = next_unit(|| lock().units.take()) {
                        let t = Instant::now();
                        // a panic in a back end is that device's failure, never a hang of
                        // the others (its unit would otherwise stay "running")
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            worker.unit((a, b))
                        }))
                        .unwrap_or_else(|_| {
                            Err(BridgeError::backend("paco", None, "the back end panicked"))
                        });
                        share.seconds += t.elapsed().as_secs_f64();
                        let mut q = lock();
                        q.units.end_unit();
                        match r {
                            Ok(data) => {
                                share.units += 1;
                                share.pixels += pixels((a, b));
                                q.done.insert(a, (b, data));
                                let q = &mut *q;
                                while let Some((e, data)) = q.done.remove(&q.next) {
                                    (q.sink)((q.next, e), data);
                                    q.next = e;
                                }
                            }
                            Err(e) if e.is_oom() && q.units.split((a, b)) => {
                                share.splits += 1;
                            }
                            Err(e) => {
                                let what = format!("on unit {a}..{b}");
                                fail(&mut q, &mut share, Some((a, b)), e, &what, policy);
                                break;
                            }
                        }
                    }
                    (share.bytes_up, share.bytes_down) = worker.bytes();
                    share
                })
            })
            .collect();
        workers
            .into_iter()
            .zip(devices)
            .map(|(w, &d)| {
                w.join().unwrap_or_else(|_| PacoShare {
                    error: Some("the worker thread panicked".into()),
                    ..PacoShare::new(d)
                })
            })
            .collect()
    });
    let q = queue.into_inner().unwrap_or_else(|e| e.into_inner());
    let drained = q.units.finish()?;
    if q.next != end || !drained {
        return Err(BridgeError::backend(
            "paco",
            None,
            format!(
                "PACO units done up to {} of {first}..{end}: no device could take the rest",
                q.next
            ),
        ));
    }
    Ok(shares)
}
