//! Several processes under `mpirun` (the opt-in `mpi` feature).
//!
//! MPI is initialised only when the process was started by a launcher (`mpirun`, `mpiexec`,
//! `srun`: one of `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`, `PMIX_RANK` is set); a binary built with
//! the feature and started on its own never touches MPI. With one rank, every command runs as
//! usual. With several, `paco` spreads its statistics units over the ranks: rank 0 reads the
//! inputs and broadcasts them, each rank computes on its node-local device
//! ([`rank_device`]), rank 0 hands out units one at a time over point-to-point messages and
//! reduces the results in the single-device order, so its files are byte-identical to one
//! process's; the other ranks write nothing.
//!
//! `detect` is spread the same way: rank 0 reads the movie chunk by chunk and broadcasts each
//! chunk; the ranks take frame ranges; rank 0 writes the particles in frame order. With several
//! input files (`--out-dir`), rank 0 hands out whole files instead ([`ask_file`],
//! [`file_request`], [`give_file`]) and detects files itself too; each rank reads its file and
//! writes its CSV.
//!
//! Failures never hang: an error on any rank is printed (naming the rank) and that rank calls
//! `MPI_Abort`, which ends every rank with a non-zero status. A device failure on a worker
//! rank is sent to rank 0 and handled like a local device's (`--requeue`, out-of-memory
//! splits); if it is fatal, rank 0 prints it and aborts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use algorithms::detect::{Feature, FramePeer, FrameServer, Movie, Particle, Refined};
use algorithms::paco::{UnitPeer, UnitServer};
use bridge_core::{BridgeError, Device, Result};
use mpi::Threading;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator, Destination, Equivalence, MatchedReceiveVec, Root, Source};
use ndarray::Array3;

/// Where this process stands among the ranks.
#[derive(Debug, Clone, Copy)]
pub struct Place {
    /// Rank in `MPI_COMM_WORLD`.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Rank among the ranks of this node (`MPI_Comm_split_type` shared).
    pub local_rank: usize,
    /// Ranks on this node.
    pub local_size: usize,
}

static PLACE: OnceLock<Place> = OnceLock::new();
/// Every MPI call of this process holds this lock (MPI may give `MPI_THREAD_SERIALIZED` only).
static LOCK: Mutex<()> = Mutex::new(());

const TAG_KIND: i32 = 1;
const TAG_READY: i32 = 2;
const TAG_UNIT: i32 = 3;
const TAG_STOP: i32 = 4;
const TAG_RESULT: i32 = 5;
const TAG_FAIL: i32 = 6;
const TAG_FINISH: i32 = 7;
/// A worker asks rank 0 for the next input file (payload: its last file's report).
const TAG_FILE: i32 = 8;

/// Set once rank 0 has answered every other rank's last request for a file: from then on an
/// error ends only this rank (no `MPI_Abort`).
static RELEASED: AtomicBool = AtomicBool::new(false);

/// The environment variables a launcher sets (Open MPI, MPICH/Hydra and Slurm's PMI, PMIx).
pub const LAUNCHER_VARS: [&str; 3] = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"];

/// Initialise MPI when started by a launcher; `None` (MPI untouched) otherwise. Keep the
/// universe alive until the end of `main`: dropping it finalises MPI.
pub fn init() -> Result<Option<Universe>> {
    if !LAUNCHER_VARS.iter().any(|v| std::env::var_os(v).is_some()) {
        return Ok(None);
    }
    let (universe, level) = mpi::initialize_with_threading(Threading::Multiple)
        .ok_or_else(|| BridgeError::unavailable("mpi", "MPI was already initialised"))?;
    if !matches!(level, Threading::Serialized | Threading::Multiple) {
        return Err(BridgeError::unavailable(
            "mpi",
            format!(
                "the MPI library gives thread support {level:?}; arraybridge needs \
                 MPI_THREAD_SERIALIZED or more"
            ),
        ));
    }
    let world = universe.world();
    let rank = world.rank();
    let shared = world.split_shared(rank);
    let to = |v: i32| usize::try_from(v).unwrap_or(0);
    let _ = PLACE.set(Place {
        rank: to(rank),
        size: to(world.size()),
        local_rank: to(shared.rank()),
        local_size: to(shared.size()),
    });
    Ok(Some(universe))
}

/// This process's place when it runs with other ranks (more than one); `None` otherwise.
pub fn place() -> Option<Place> {
    PLACE.get().copied().filter(|p| p.size > 1)
}

/// End every rank with `code` (`MPI_Abort`).
pub fn abort(code: i32) -> ! {
    let _guard = lock();
    SimpleCommunicator::world().abort(code)
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn world() -> SimpleCommunicator {
    SimpleCommunicator::world()
}

/// Broadcast `data` from rank 0 (its length must already be known everywhere), in pieces
/// MPI's `int` counts can hold.
pub fn broadcast<T: Equivalence>(data: &mut [T]) {
    let _guard = lock();
    let w = world();
    let root = w.process_at_rank(0);
    for piece in data.chunks_mut(1 << 27) {
        root.broadcast_into(piece);
    }
}

/// A vector of `n` zeros, or an error (never an abort) when memory is short.
pub fn try_zeros<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        BridgeError::InvalidInput(
            format!("{what}: {n} values broadcast by rank 0 do not fit in this rank's memory")
                .into(),
        )
    })?;
    v.resize(n, T::default());
    Ok(v)
}

/// Rank 0: every other rank has stopped (see [`released`]).
pub fn mark_released() {
    RELEASED.store(true, Ordering::SeqCst);
}

/// Whether every other rank has already stopped cleanly, so an error on this rank need not end
/// them through `MPI_Abort` (rank 0 after handing out every input file).
pub fn released() -> bool {
    RELEASED.load(Ordering::SeqCst)
}

/// A worker rank: send rank 0 the report of the last input file (empty before the first) and
/// get the index of the next one, `None` when there is none left.
pub fn ask_file(last: &[u8]) -> Result<Option<usize>> {
    send(0, TAG_FILE, last);
    match receive(0) {
        Msg::Counts(TAG_UNIT, v) if v.len() == 1 => Ok(Some(
            usize::try_from(v[0]).map_err(|_| unexpected(0, "handing out files"))?,
        )),
        Msg::Counts(TAG_STOP, _) => Ok(None),
        _ => Err(unexpected(0, "handing out files")),
    }
}

/// Rank 0: the next request for a file from any rank (the rank and its last report), polling
/// so the lock is not held while waiting; `None` once `stop` is set.
pub fn file_request(stop: &AtomicBool) -> Result<Option<(usize, Vec<u8>)>> {
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(None);
        }
        {
            let _guard = lock();
            let w = world();
            if let Some(probed) = w.any_process().immediate_matched_probe() {
                let (rank, tag) = (probed.1.source_rank(), probed.1.tag());
                let bytes = probed.matched_receive_vec::<u8>().0;
                if tag != TAG_FILE {
                    return Err(unexpected(rank, "handing out files"));
                }
                return Ok(Some((usize::try_from(rank).unwrap_or(0), bytes)));
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
}

/// Rank 0: answer `rank`'s request with the index of its next file, or `None`: stop.
pub fn give_file(rank: usize, file: Option<usize>) -> Result<()> {
    let rank = i32::try_from(rank)
        .map_err(|_| BridgeError::invalid_argument("rank", "beyond MPI's int"))?;
    match file {
        Some(i) => send(rank, TAG_UNIT, &[i as u64]),
        None => send(rank, TAG_STOP, &[0u64]),
    }
    Ok(())
}

/// One message of another rank: its tag and its payload (bytes, numbers or counts).
enum Msg {
    Bytes(i32, Vec<u8>),
    Numbers(Vec<f64>),
    Counts(i32, Vec<u64>),
}

/// Send `data` with `tag` to `rank`.
fn send<T: Equivalence>(rank: i32, tag: i32, data: &[T]) {
    let _guard = lock();
    world().process_at_rank(rank).send_with_tag(data, tag);
}

/// The next message from `rank` (any tag), polling so the lock is not held while waiting.
fn receive(rank: i32) -> Msg {
    loop {
        {
            let _guard = lock();
            let w = world();
            if let Some(probed) = w.process_at_rank(rank).immediate_matched_probe() {
                return match probed.1.tag() {
                    TAG_RESULT => Msg::Numbers(probed.matched_receive_vec::<f64>().0),
                    t @ (TAG_UNIT | TAG_STOP | TAG_FINISH) => {
                        Msg::Counts(t, probed.matched_receive_vec::<u64>().0)
                    }
                    t => Msg::Bytes(t, probed.matched_receive_vec::<u8>().0),
                };
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
}

/// An error as bytes: its kind and message (out-of-memory keeps its fields, so the other side
/// splits the unit as for a local device).
fn encode_error(e: &BridgeError) -> Vec<u8> {
    let v = match e {
        BridgeError::OutOfMemory {
            device,
            requested,
            attempts,
        } => serde_json::json!({
            "kind": "oom", "device": device.to_string(), "requested": requested,
            "attempts": attempts, "message": e.to_string(),
        }),
        BridgeError::InvalidInput(m) => serde_json::json!({
            "kind": "input", "message": m.message,
            "frames": m.frames.as_ref().map(|r| [r.start, r.end]),
        }),
        BridgeError::Unsupported(m) => serde_json::json!({"kind": "unsupported", "message": m}),
        other => serde_json::json!({"kind": "other", "message": other.to_string()}),
    };
    v.to_string().into_bytes()
}

/// The error [`encode_error`] wrote on `rank`.
fn decode_error(bytes: &[u8], rank: i32) -> BridgeError {
    let v: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    let msg = v["message"]
        .as_str()
        .unwrap_or("(unreadable error)")
        .to_string();
    match v["kind"].as_str() {
        Some("oom") => match v["device"].as_str().map(str::parse::<Device>) {
            Some(Ok(device)) => BridgeError::OutOfMemory {
                device,
                requested: v["requested"].as_u64().unwrap_or(0),
                attempts: v["attempts"]
                    .as_u64()
                    .and_then(|a| a.try_into().ok())
                    .unwrap_or(1),
            },
            _ => BridgeError::backend(format!("mpi rank {rank}"), None, msg),
        },
        Some("input") => {
            let frames = v["frames"].as_array().and_then(|r| {
                let (a, b) = (r.first()?.as_u64()?, r.get(1)?.as_u64()?);
                Some(usize::try_from(a).ok()?..usize::try_from(b).ok()?)
            });
            BridgeError::InvalidInput(bridge_core::error::InputError {
                frames,
                message: format!("rank {rank}: {msg}"),
            })
        }
        Some("unsupported") => BridgeError::Unsupported(format!("rank {rank}: {msg}")),
        _ => BridgeError::backend(format!("mpi rank {rank}"), None, msg),
    }
}

fn unexpected(rank: i32, what: &str) -> BridgeError {
    BridgeError::backend(
        "mpi",
        None,
        format!("rank {rank} sent an unexpected message while {what}"),
    )
}

/// Rank 0's view of another rank serving PACO units or detection frames.
pub struct RankPeer {
    rank: i32,
}

impl RankPeer {
    /// The peer at `rank` of `MPI_COMM_WORLD`.
    pub fn new(rank: usize) -> Result<Self> {
        let rank = i32::try_from(rank)
            .map_err(|_| BridgeError::invalid_argument("rank", "beyond MPI's int"))?;
        Ok(RankPeer { rank })
    }
}

impl RankPeer {
    /// Stop the peer; its bytes (uploaded, downloaded). Skips what comes before the end (a
    /// peer that failed early may still say it is ready).
    fn stop(&self) -> (u64, u64) {
        send(self.rank, TAG_STOP, &[0u64, 0]);
        loop {
            if let Msg::Counts(TAG_FINISH, v) = receive(self.rank) {
                return (
                    v.first().copied().unwrap_or(0),
                    v.get(1).copied().unwrap_or(0),
                );
            }
        }
    }
}

impl UnitPeer for RankPeer {
    fn arithmetic(&self) -> (Device, Result<bool>) {
        match receive(self.rank) {
            Msg::Bytes(TAG_KIND, b) => {
                let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
                let device = v["device"]
                    .as_str()
                    .and_then(|d| d.parse().ok())
                    .unwrap_or(Device::Cpu);
                let r = match v["fp64"].as_bool() {
                    Some(f) => Ok(f),
                    None => Err(decode_error(v["error"].to_string().as_bytes(), self.rank)),
                };
                (device, r)
            }
            _ => (Device::Cpu, Err(unexpected(self.rank, "starting"))),
        }
    }

    fn ready(&self) -> Result<()> {
        match receive(self.rank) {
            Msg::Bytes(TAG_READY, b) if b.is_empty() => Ok(()),
            Msg::Bytes(TAG_READY, b) => Err(decode_error(&b, self.rank)),
            _ => Err(unexpected(self.rank, "uploading the cube")),
        }
    }

    fn unit(&self, (a, b): (usize, usize)) -> Result<Vec<f64>> {
        send(self.rank, TAG_UNIT, &[a as u64, b as u64]);
        match receive(self.rank) {
            Msg::Numbers(v) => Ok(v),
            Msg::Bytes(TAG_FAIL, b) => Err(decode_error(&b, self.rank)),
            _ => Err(unexpected(self.rank, "computing a unit")),
        }
    }

    fn finish(&self) -> Result<(u64, u64)> {
        Ok(self.stop())
    }
}

impl FramePeer for RankPeer {
    fn device(&self) -> (Device, Result<()>) {
        let (d, r) = self.arithmetic();
        (d, r.map(|_| ()))
    }

    fn frames(&self, (a, b): (usize, usize)) -> Result<Vec<Particle>> {
        send(self.rank, TAG_UNIT, &[a as u64, b as u64]);
        match receive(self.rank) {
            Msg::Numbers(v) => decode_particles(&v),
            Msg::Bytes(TAG_FAIL, b) => Err(decode_error(&b, self.rank)),
            _ => Err(unexpected(self.rank, "detecting frames")),
        }
    }

    fn finish(&self) -> Result<()> {
        self.stop();
        Ok(())
    }
}

impl FramePeer<Vec<Feature>> for RankPeer {
    fn device(&self) -> (Device, Result<()>) {
        let (d, r) = self.arithmetic();
        (d, r.map(|_| ()))
    }

    fn frames(&self, (a, b): (usize, usize)) -> Result<Vec<Vec<Feature>>> {
        send(self.rank, TAG_UNIT, &[a as u64, b as u64]);
        match receive(self.rank) {
            Msg::Numbers(v) => decode_features(&v),
            Msg::Bytes(TAG_FAIL, b) => Err(decode_error(&b, self.rank)),
            _ => Err(unexpected(self.rank, "locating features")),
        }
    }

    fn finish(&self) -> Result<()> {
        self.stop();
        Ok(())
    }
}

/// Numbers per `locate` feature in a message.
const FEATURE_SLOTS: usize = 8;

/// The features of each frame as numbers, exactly: per frame its count, then each feature's
/// `y, x, mass, size, ecc, signal, raw_mass, ep`.
fn encode_features(frames: &[Vec<Feature>]) -> Vec<f64> {
    let n: usize = frames.iter().map(|f| 1 + f.len() * FEATURE_SLOTS).sum();
    let mut v = Vec::with_capacity(n);
    for fs in frames {
        v.push(fs.len() as f64);
        for f in fs {
            v.extend([f.y, f.x, f.mass, f.size, f.ecc, f.signal, f.raw_mass, f.ep]);
        }
    }
    v
}

/// The features [`encode_features`] wrote.
fn decode_features(v: &[f64]) -> Result<Vec<Vec<Feature>>> {
    let bad = || {
        BridgeError::backend(
            "mpi",
            None,
            format!("a malformed feature message of {} numbers", v.len()),
        )
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let n = v[i];
        if !(n >= 0.0 && n.fract() == 0.0) {
            return Err(bad());
        }
        let n = n as usize;
        let end = n
            .checked_mul(FEATURE_SLOTS)
            .and_then(|k| k.checked_add(i + 1))
            .filter(|&e| e <= v.len())
            .ok_or_else(bad)?;
        out.push(
            v[i + 1..end]
                .chunks_exact(FEATURE_SLOTS)
                .map(|c| Feature {
                    y: c[0],
                    x: c[1],
                    mass: c[2],
                    size: c[3],
                    ecc: c[4],
                    signal: c[5],
                    raw_mass: c[6],
                    ep: c[7],
                })
                .collect(),
        );
        i = end;
    }
    Ok(out)
}

/// Numbers per particle in a message.
const PARTICLE_SLOTS: usize = 19;

/// Particles as numbers, exactly (integers below 2^53 and bit patterns).
fn encode_particles(ps: &[Particle]) -> Vec<f64> {
    let mut v = Vec::with_capacity(ps.len() * PARTICLE_SLOTS);
    for p in ps {
        let r = p.refined;
        v.extend([
            f64::from(p.frame),
            p.x,
            p.y,
            p.intensity,
            p.sigma,
            p.snr,
            f64::from(p.frame_size.0),
            f64::from(p.frame_size.1),
            if p.id.is_some() { 1.0 } else { 0.0 },
            f64::from_bits(p.id.unwrap_or(0) as u64),
            p.response,
            if r.is_some() { 1.0 } else { 0.0 },
        ]);
        let r = r.unwrap_or(Refined {
            y: 0.0,
            x: 0.0,
            mass: 0.0,
            size: 0.0,
            ecc: 0.0,
            signal: 0.0,
            background: 0.0,
        });
        v.extend([r.y, r.x, r.mass, r.size, r.ecc, r.signal, r.background]);
    }
    v
}

/// The particles [`encode_particles`] wrote.
fn decode_particles(v: &[f64]) -> Result<Vec<Particle>> {
    if !v.len().is_multiple_of(PARTICLE_SLOTS) {
        return Err(BridgeError::backend(
            "mpi",
            None,
            format!("a particle message of {} numbers", v.len()),
        ));
    }
    let int = |x: f64| x as u32;
    Ok(v.chunks_exact(PARTICLE_SLOTS)
        .map(|c| Particle {
            frame: int(c[0]),
            x: c[1],
            y: c[2],
            intensity: c[3],
            sigma: c[4],
            snr: c[5],
            frame_size: (int(c[6]), int(c[7])),
            id: (c[8] != 0.0).then(|| c[9].to_bits() as i64),
            response: c[10],
            refined: (c[11] != 0.0).then_some(Refined {
                y: c[12],
                x: c[13],
                mass: c[14],
                size: c[15],
                ecc: c[16],
                signal: c[17],
                background: c[18],
            }),
        })
        .collect())
}

/// Broadcast a movie chunk from rank 0 (`Some`), or receive it (`None`); `None` back on the
/// other ranks when rank 0 says the movie is over ([`end_of_movie`]).
pub fn share_movie(ours: Option<&Movie>) -> Result<Option<Movie>> {
    let mut head = [0u64; 4];
    if let Some(m) = ours {
        let (t, h, w) = m.dim();
        let code = match m {
            Movie::U8(_) => 1,
            Movie::U16(_) => 2,
            Movie::F32(_) => 3,
            Movie::F64(_) => 4,
        };
        head = [code, t as u64, h as u64, w as u64];
    }
    broadcast(&mut head);
    let [code, t, h, w] = head.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if code == 0 {
        return Ok(None);
    }
    let n = t
        .checked_mul(h)
        .and_then(|x| x.checked_mul(w))
        .ok_or_else(|| BridgeError::InvalidInput("movie chunk too large".into()))?;
    fn one<T: Equivalence + Clone + Default>(
        ours: Option<&Array3<T>>,
        n: usize,
        dims: (usize, usize, usize),
    ) -> Result<Array3<T>> {
        let mut v: Vec<T> = match ours {
            Some(a) => a.iter().cloned().collect(),
            None => try_zeros(n, "movie")?,
        };
        broadcast(&mut v);
        Array3::from_shape_vec(dims, v)
            .map_err(|e| BridgeError::InvalidInput(format!("movie chunk: {e}").into()))
    }
    let dims = (t, h, w);
    let movie = match (code, ours) {
        (1, Some(Movie::U8(a))) => Movie::U8(one(Some(a), n, dims)?),
        (1, None) => Movie::U8(one(None, n, dims)?),
        (2, Some(Movie::U16(a))) => Movie::U16(one(Some(a), n, dims)?),
        (2, None) => Movie::U16(one(None, n, dims)?),
        (3, Some(Movie::F32(a))) => Movie::F32(one(Some(a), n, dims)?),
        (3, None) => Movie::F32(one(None, n, dims)?),
        (4, Some(Movie::F64(a))) => Movie::F64(one(Some(a), n, dims)?),
        (4, None) => Movie::F64(one(None, n, dims)?),
        _ => return Err(BridgeError::backend("mpi", None, "unknown movie chunk")),
    };
    Ok(Some(movie))
}

/// Rank 0: the movie is over (the other ranks' [`share_movie`] gives `None`).
pub fn end_of_movie() {
    let mut head = [0u64; 4];
    broadcast(&mut head);
}

/// A worker rank's side: talks to rank 0.
pub struct RootLink;

impl FrameServer for RootLink {
    fn device(&mut self, device: Device, r: Result<()>) -> Result<()> {
        UnitServer::arithmetic(self, device, r.map(|()| true))
    }

    fn next(&mut self) -> Result<Option<(usize, usize)>> {
        UnitServer::next(self)
    }

    fn result(&mut self, r: Result<Vec<Particle>>) -> Result<()> {
        UnitServer::result(self, r.map(|ps| encode_particles(&ps)))
    }

    fn finish(&mut self) -> Result<()> {
        UnitServer::finish(self, (0, 0))
    }
}

impl FrameServer<Vec<Feature>> for RootLink {
    fn device(&mut self, device: Device, r: Result<()>) -> Result<()> {
        UnitServer::arithmetic(self, device, r.map(|()| true))
    }

    fn next(&mut self) -> Result<Option<(usize, usize)>> {
        UnitServer::next(self)
    }

    fn result(&mut self, r: Result<Vec<Vec<Feature>>>) -> Result<()> {
        UnitServer::result(self, r.map(|fs| encode_features(&fs)))
    }

    fn finish(&mut self) -> Result<()> {
        UnitServer::finish(self, (0, 0))
    }
}

impl UnitServer for RootLink {
    fn arithmetic(&mut self, device: Device, r: Result<bool>) -> Result<()> {
        let v = match r {
            Ok(f) => serde_json::json!({"device": device.to_string(), "fp64": f}),
            Err(e) => {
                let err: serde_json::Value =
                    serde_json::from_slice(&encode_error(&e)).unwrap_or_default();
                serde_json::json!({"device": device.to_string(), "error": err})
            }
        };
        send(0, TAG_KIND, v.to_string().as_bytes());
        Ok(())
    }

    fn ready(&mut self, r: Result<()>) -> Result<()> {
        let b = match r {
            Ok(()) => Vec::new(),
            Err(e) => encode_error(&e),
        };
        send(0, TAG_READY, &b);
        Ok(())
    }

    fn next(&mut self) -> Result<Option<(usize, usize)>> {
        match receive(0) {
            Msg::Counts(TAG_UNIT, v) if v.len() == 2 => {
                let to = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
                Ok(Some((to(v[0]), to(v[1]))))
            }
            Msg::Counts(TAG_STOP, _) => Ok(None),
            _ => Err(unexpected(0, "waiting for a unit")),
        }
    }

    fn result(&mut self, r: Result<Vec<f64>>) -> Result<()> {
        match r {
            Ok(v) => send(0, TAG_RESULT, &v),
            Err(e) => send(0, TAG_FAIL, &encode_error(&e)),
        }
        Ok(())
    }

    fn finish(&mut self, (up, down): (u64, u64)) -> Result<()> {
        send(0, TAG_FINISH, &[up, down]);
        Ok(())
    }
}
