#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Detection on several devices at once (`detect::multi`): a work queue of frame ranges whose
//! result is identical to one device's, with faults kept local (out-of-memory splits, failed
//! devices, panics) and nothing lost or computed twice. Fault injection uses CPU back ends
//! that fail on purpose; the PoCL case runs two real OpenCL devices
//! (`POCL_DEVICES="pthread pthread"`, set for a child run of this binary).

mod open;

use std::sync::atomic::{AtomicUsize, Ordering};

use algorithms::detect::blob_log::{Blob, BlobLogParams, Precision};
use algorithms::detect::{
    CpuBackend, DetectBackend, Feature, FrameView, LocateParams, LogDetector, Movie, MultiPolicy,
    Particle,
};
use algorithms::synth::movie::synthetic_movie;
use bridge_core::{BridgeError, Device, Result};

/// A movie of f32 frames (the device cube equals the CPU's bit for bit in f32).
fn movie(frames: usize) -> Movie {
    match synthetic_movie(frames, 64, 12, 1.0, 7).movie {
        Movie::U16(a) => Movie::F32(a.mapv(|v| f32::from(v) / 65535.0)),
        other => other,
    }
}

fn detector(batch: usize) -> LogDetector {
    LogDetector {
        params: BlobLogParams::seed(),
        batch_size: batch,
        ..LogDetector::default()
    }
}

fn same(a: &[Particle], b: &[Particle]) {
    assert_eq!(a.len(), b.len(), "particle counts");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(
            (x.frame, x.x.to_bits(), x.y.to_bits()),
            (y.frame, y.x.to_bits(), y.y.to_bits())
        );
        assert_eq!(x.sigma.to_bits(), y.sigma.to_bits());
        assert_eq!(x.intensity.to_bits(), y.intensity.to_bits());
    }
}

/// How a [`Flaky`] back end misbehaves.
#[derive(Clone, Copy)]
enum Fault {
    /// Out of memory on batches of more than this many frames.
    OomOver(usize),
    /// Out of memory always.
    OomAlways,
    /// A device error after this many good batches.
    FailAfter(usize),
    /// A panic on the first batch.
    Panic,
}

struct Flaky {
    fault: Fault,
    calls: AtomicUsize,
    device: Device,
}

impl Flaky {
    fn new(fault: Fault, n: usize) -> Self {
        Flaky {
            fault,
            calls: AtomicUsize::new(0),
            device: Device::OpenCl(n),
        }
    }
}

fn oom(device: Device) -> BridgeError {
    BridgeError::OutOfMemory {
        device,
        requested: 1 << 30,
        attempts: 1,
    }
}

impl DetectBackend for Flaky {
    fn device(&self) -> Device {
        self.device
    }
    fn blob_log_batch(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
    ) -> Result<Vec<Vec<Blob>>> {
        self.blob_log_batch_acc(frames, p, Precision::F64)
    }
    fn blob_log_batch_acc(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
        acc: Precision,
    ) -> Result<Vec<Vec<Blob>>> {
        self.misbehave(frames.len())?;
        CpuBackend::default().blob_log_batch_acc(frames, p, acc)
    }
    fn locate_batch(
        &self,
        frames: &[FrameView<'_>],
        p: &LocateParams,
    ) -> Result<Vec<Vec<Feature>>> {
        self.misbehave(frames.len())?;
        CpuBackend::default().locate_batch(frames, p)
    }
}

impl Flaky {
    /// The injected fault of a call on `frames` frames, if it is due.
    fn misbehave(&self, frames: usize) -> Result<()> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        match self.fault {
            Fault::OomOver(n) if frames > n => Err(oom(self.device)),
            Fault::OomAlways => Err(oom(self.device)),
            Fault::FailAfter(n) if call >= n => {
                Err(BridgeError::backend("test", Some(-5), "device lost"))
            }
            Fault::Panic => panic!("injected panic"),
            _ => Ok(()),
        }
    }
}

/// A CPU back end that starts its first batch only once `calls` (a [`Flaky`]'s) has reached
/// `until` (at most 10 s later): the flaky device then surely makes its failing call, however
/// the threads are scheduled (a loaded machine let the healthy device take every unit first).
struct WaitsFor<'a> {
    calls: &'a AtomicUsize,
    until: usize,
}

impl WaitsFor<'_> {
    fn wait(&self) {
        let start = std::time::Instant::now();
        while self.calls.load(Ordering::SeqCst) < self.until
            && start.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl DetectBackend for WaitsFor<'_> {
    fn device(&self) -> Device {
        Device::Cpu
    }
    fn blob_log_batch(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
    ) -> Result<Vec<Vec<Blob>>> {
        self.blob_log_batch_acc(frames, p, Precision::F64)
    }
    fn blob_log_batch_acc(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
        acc: Precision,
    ) -> Result<Vec<Vec<Blob>>> {
        self.wait();
        CpuBackend::default().blob_log_batch_acc(frames, p, acc)
    }
    fn locate_batch(
        &self,
        frames: &[FrameView<'_>],
        p: &LocateParams,
    ) -> Result<Vec<Vec<Feature>>> {
        self.wait();
        CpuBackend::default().locate_batch(frames, p)
    }
}

#[test]
fn two_devices_equal_one() {
    let m = movie(23);
    let det = detector(4);
    let one = det.detect_movie(&m, &open::cpu()).unwrap();
    assert!(!one.is_empty());
    let (a, b) = (CpuBackend::default(), CpuBackend::default());
    let out = det
        .detect_movie_multi(&m, &[&a, &b], MultiPolicy::default(), |_| {})
        .unwrap();
    same(&out.particles, &one);
    assert_eq!(out.shares.iter().map(|s| s.frames).sum::<usize>(), 23);
    assert_eq!(
        out.shares.iter().map(|s| s.units).sum::<usize>(),
        6,
        "23 frames in units of 4"
    );
}

#[test]
fn out_of_memory_splits_the_unit_on_that_device() {
    let m = movie(17);
    let det = detector(8);
    let one = det.detect_movie(&m, &open::cpu()).unwrap();
    // alone: the device that fits one frame at a time still finishes, by halving
    let small = Flaky::new(Fault::OomOver(1), 0);
    let out = det
        .detect_movie_multi(&m, &[&small], MultiPolicy::default(), |_| {})
        .unwrap();
    same(&out.particles, &one);
    assert!(out.shares[0].splits > 0);
    assert_eq!(out.shares[0].frames, 17);
    // beside a healthy device
    let small = Flaky::new(Fault::OomOver(2), 0);
    let out = det
        .detect_movie_multi(
            &m,
            &[&small, &CpuBackend::default()],
            MultiPolicy::default(),
            |_| {},
        )
        .unwrap();
    same(&out.particles, &one);
}

#[test]
fn a_device_that_cannot_fit_one_frame_hands_it_to_the_others() {
    let m = movie(9);
    let det = detector(3);
    let one = det.detect_movie(&m, &open::cpu()).unwrap();
    let full = Flaky::new(Fault::OomAlways, 0);
    let out = det
        .detect_movie_multi(
            &m,
            &[&full, &CpuBackend::default()],
            MultiPolicy::default(),
            |_| {},
        )
        .unwrap();
    same(&out.particles, &one);
    assert_eq!(out.shares[0].frames, 0);
    assert!(out.shares[0].error.as_deref().unwrap().contains("memory"));
    // when no device can take a frame: an error, not a hang
    let (x, y) = (
        Flaky::new(Fault::OomAlways, 0),
        Flaky::new(Fault::OomAlways, 1),
    );
    let err = det
        .detect_movie_multi(&m, &[&x, &y], MultiPolicy::default(), |_| {})
        .unwrap_err();
    assert!(err.is_oom(), "{err}");
}

#[test]
fn a_failed_device_fails_the_run_unless_requeue_is_asked_for() {
    let m = movie(20);
    let det = detector(2);
    let one = det.detect_movie(&m, &open::cpu()).unwrap();
    let lost = Flaky::new(Fault::FailAfter(1), 3);
    let healthy = WaitsFor {
        calls: &lost.calls,
        until: 2,
    };
    let err = det
        .detect_movie_multi(&m, &[&lost, &healthy], MultiPolicy::default(), |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("opencl:3") && err.contains("device lost"),
        "{err}"
    );
    let lost = Flaky::new(Fault::FailAfter(1), 3);
    let healthy = WaitsFor {
        calls: &lost.calls,
        until: 2,
    };
    let done = AtomicUsize::new(0);
    let out = det
        .detect_movie_multi(
            &m,
            &[&lost, &healthy],
            MultiPolicy {
                requeue_on_failure: true,
            },
            |n| {
                done.fetch_max(n, Ordering::SeqCst);
            },
        )
        .unwrap();
    same(&out.particles, &one);
    assert_eq!(
        done.load(Ordering::SeqCst),
        20,
        "progress reaches every frame"
    );
    assert!(
        out.shares[0]
            .error
            .as_deref()
            .unwrap()
            .contains("device lost")
    );
    assert_eq!(
        out.shares.iter().map(|s| s.frames).sum::<usize>(),
        20,
        "nothing twice"
    );
}

#[test]
fn a_panicking_back_end_is_a_failure_not_a_hang() {
    let m = movie(6);
    let det = detector(2);
    let bad = Flaky::new(Fault::Panic, 1);
    let err = det
        .detect_movie_multi(
            &m,
            &[&bad, &CpuBackend::default()],
            MultiPolicy::default(),
            |_| {},
        )
        .unwrap_err();
    assert!(err.to_string().contains("panicked"), "{err}");
    let bad = Flaky::new(Fault::Panic, 1);
    let out = det
        .detect_movie_multi(
            &m,
            &[&bad, &CpuBackend::default()],
            MultiPolicy {
                requeue_on_failure: true,
            },
            |_| {},
        )
        .unwrap();
    same(&out.particles, &det.detect_movie(&m, &open::cpu()).unwrap());
}

#[test]
fn bad_device_lists_are_errors() {
    let m = movie(2);
    let det = detector(1);
    assert!(
        det.detect_movie_multi(&m, &[], MultiPolicy::default(), |_| {})
            .is_err()
    );
    let err = det
        .detect_movie_on(&m, &[open::cpu(), open::cpu()], MultiPolicy::default())
        .unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    assert!(
        open::try_open(Device::OpenCl(99))
            .and_then(|d| det.detect_movie_on(&m, &[open::cpu(), d], MultiPolicy::default()))
            .is_err()
    );
}

/// Two PoCL devices in this process (the child run sets `POCL_DEVICES`): identical to one
/// OpenCL device and to the CPU, both devices take work.
#[cfg(feature = "opencl")]
#[test]
fn pocl_two_devices_inner() {
    if !test_support::rerun::in_child("ARRAYBRIDGE_TEST_TWO_POCL") {
        return; // run by `pocl_two_devices` in a child process
    }
    let n = open::opencl().device_count();
    if n < 2 {
        assert!(
            !test_support::env_flag("ARRAYBRIDGE_REQUIRE_OPENCL"),
            "ARRAYBRIDGE_REQUIRE_OPENCL=1 but {n} OpenCL device(s)"
        );
        eprintln!("skipping: {n} OpenCL device(s)");
        return;
    }
    let m = movie(24);
    let det = detector(3);
    let cpu = det.detect_movie(&m, &open::cpu()).unwrap();
    let one = det
        .detect_movie_on(&m, &[open::open(Device::OpenCl(0))], MultiPolicy::default())
        .unwrap();
    let two = det
        .detect_movie_on(
            &m,
            &[open::open(Device::OpenCl(0)), open::open(Device::OpenCl(1))],
            MultiPolicy::default(),
        )
        .unwrap();
    same(&one.particles, &cpu);
    same(&two.particles, &cpu);
    for s in &two.shares {
        eprintln!(
            "{}: {} frames in {} units, {:.3} s",
            s.device, s.frames, s.units, s.seconds
        );
    }
    assert_eq!(two.shares.iter().map(|s| s.frames).sum::<usize>(), 24);
}

#[cfg(feature = "opencl")]
#[test]
fn pocl_two_devices() {
    test_support::rerun_with_env(
        &[
            ("POCL_DEVICES", "pthread pthread"),
            ("ARRAYBRIDGE_TEST_TWO_POCL", "1"),
        ],
        &["pocl_two_devices_inner"],
    );
}

/// A u16 movie of bright spots for `locate` (the synthetic movie at seed `seed`).
fn spots_movie(frames: usize, seed: u64) -> Movie {
    synthetic_movie(frames, 64, 12, 1.0, seed).movie
}

fn same_features(a: &[Vec<Feature>], b: &[Vec<Feature>], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: frame counts");
    for (t, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.len(), y.len(), "{what}: frame {t} feature counts");
        for (f, g) in x.iter().zip(y) {
            let bits = |f: &Feature| {
                [f.y, f.x, f.mass, f.size, f.ecc, f.signal, f.raw_mass, f.ep].map(f64::to_bits)
            };
            assert_eq!(bits(f), bits(g), "{what}: frame {t}");
        }
    }
}

#[test]
fn locate_on_several_devices_equals_one() {
    let p = LocateParams::new(7);
    for (seed, batch) in [(3, 4), (11, 1), (29, 5)] {
        let m = spots_movie(13, seed);
        let one = algorithms::detect::locate_movie(&m, &p, &open::open(Device::Cpu)).unwrap();
        assert!(one.iter().map(Vec::len).sum::<usize>() > 0);
        let (a, b) = (CpuBackend::default(), CpuBackend::default());
        let out = algorithms::detect::locate_movie_multi(
            &m,
            &p,
            &[&a, &b],
            batch,
            MultiPolicy::default(),
            |_| {},
        )
        .unwrap();
        same_features(&out.features, &one, "two cpu back ends");
        assert_eq!(out.shares.iter().map(|s| s.frames).sum::<usize>(), 13);
        assert_eq!(
            out.shares.iter().map(|s| s.units).sum::<usize>(),
            13usize.div_ceil(batch)
        );
        let out =
            algorithms::detect::locate_movie_on(&m, &p, &[open::cpu()], batch, Default::default())
                .unwrap();
        same_features(&out.features, &one, "locate_movie_on cpu");
    }
}

#[test]
fn locate_faults_stay_local() {
    let m = spots_movie(11, 5);
    let p = LocateParams::new(7);
    let one = algorithms::detect::locate_movie(&m, &p, &open::open(Device::Cpu)).unwrap();
    // out of memory on more than one frame: split down to single frames on that device
    let small = Flaky::new(Fault::OomOver(1), 0);
    let out = algorithms::detect::locate_movie_multi(
        &m,
        &p,
        &[&small],
        4,
        MultiPolicy::default(),
        |_| {},
    )
    .unwrap();
    same_features(&out.features, &one, "oom splits");
    assert!(out.shares[0].splits > 0);
    // a device that fits nothing hands its frames to the other
    let full = Flaky::new(Fault::OomAlways, 0);
    let out = algorithms::detect::locate_movie_multi(
        &m,
        &p,
        &[&full, &CpuBackend::default()],
        3,
        MultiPolicy::default(),
        |_| {},
    )
    .unwrap();
    same_features(&out.features, &one, "oom hand-off");
    assert_eq!(out.shares[0].frames, 0);
    // a lost device fails the run, or with requeue leaves its frames to the other
    let lost = Flaky::new(Fault::FailAfter(1), 2);
    let healthy = WaitsFor {
        calls: &lost.calls,
        until: 2,
    };
    let err = algorithms::detect::locate_movie_multi(
        &m,
        &p,
        &[&lost, &healthy],
        2,
        MultiPolicy::default(),
        |_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("opencl:2"), "{err}");
    let lost = Flaky::new(Fault::FailAfter(1), 2);
    let healthy = WaitsFor {
        calls: &lost.calls,
        until: 2,
    };
    let out = algorithms::detect::locate_movie_multi(
        &m,
        &p,
        &[&lost, &healthy],
        2,
        MultiPolicy {
            requeue_on_failure: true,
        },
        |_| {},
    )
    .unwrap();
    same_features(&out.features, &one, "requeue");
    assert!(out.shares[0].error.is_some());
    // bad calls
    assert!(
        algorithms::detect::locate_movie_multi(&m, &p, &[], 2, MultiPolicy::default(), |_| {})
            .is_err()
    );
    assert!(
        algorithms::detect::locate_movie_multi(
            &m,
            &p,
            &[&CpuBackend::default()],
            0,
            MultiPolicy::default(),
            |_| {}
        )
        .is_err()
    );
    let err = algorithms::detect::locate_movie_on(
        &m,
        &p,
        &[open::cpu(), open::cpu()],
        2,
        MultiPolicy::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    let bad = LocateParams::new(6);
    assert!(
        algorithms::detect::locate_movie_on(&m, &bad, &[open::cpu()], 2, Default::default())
            .is_err()
    );
}

/// `locate` on two PoCL devices (float64): bit for bit the features of one device and of the
/// CPU, on synthetic u16 and f32 movies and the detection fixture movie; then with opencl:1
/// under a memory limit too small for one frame (it runs out of memory and leaves its frames
/// to opencl:0), still the same.
#[cfg(feature = "opencl")]
#[test]
fn pocl_two_devices_locate_inner() {
    if !test_support::rerun::in_child("ARRAYBRIDGE_TEST_TWO_POCL_LOCATE") {
        return; // run by `pocl_two_devices_locate` in a child process
    }
    let n = open::opencl().device_count();
    if n < 2 {
        assert!(
            !test_support::env_flag("ARRAYBRIDGE_REQUIRE_OPENCL"),
            "ARRAYBRIDGE_REQUIRE_OPENCL=1 but {n} OpenCL device(s)"
        );
        eprintln!("skipping: {n} OpenCL device(s)");
        return;
    }
    use algorithms::detect::{locate_movie, locate_movie_on};
    let two = [open::open(Device::OpenCl(0)), open::open(Device::OpenCl(1))];
    let fixture = {
        let npy =
            test_support::npy::read(&test_support::fixtures::path("detect/movie/movie_u16.npy"));
        let shape = (npy.shape[0], npy.shape[1], npy.shape[2]);
        Movie::U16(ndarray::Array3::from_shape_vec(shape, npy.u16s()).unwrap())
    };
    let mut movies = vec![
        ("u16", spots_movie(10, 41), LocateParams::new(7)),
        ("f32", movie(9), LocateParams::new(5)),
        ("fixture", fixture, LocateParams::new(7)),
    ];
    let mut topn = LocateParams::new(9);
    topn.topn = Some(3);
    topn.minmass = 1.0;
    movies.push(("u16 topn", spots_movie(7, 43), topn));
    for (name, m, p) in &movies {
        let cpu = locate_movie(m, p, &open::open(Device::Cpu)).unwrap();
        let one = locate_movie(m, p, &open::open(Device::OpenCl(0))).unwrap();
        same_features(&one, &cpu, &format!("{name}: opencl:0 vs cpu"));
        let out = locate_movie_on(m, p, &two, 2, MultiPolicy::default()).unwrap();
        same_features(&out.features, &cpu, &format!("{name}: two devices vs cpu"));
        for s in &out.shares {
            eprintln!(
                "[{name}] {}: {} frames in {} units, {:.3} s",
                s.device, s.frames, s.units, s.seconds
            );
            assert!(s.error.is_none());
        }
        assert_eq!(out.shares.iter().map(|s| s.frames).sum::<usize>(), m.len());
    }
    // opencl:1 cannot hold one frame: it runs out of memory, opencl:0 does everything (units of
    // one frame, so that opencl:1 is not left without a unit when opencl:0, whose kernels are
    // built once and kept, takes every unit of a short movie before opencl:1 starts)
    set_limit(Device::OpenCl(1), 1024);
    for (name, m, p) in &movies {
        let cpu = locate_movie(m, p, &open::open(Device::Cpu)).unwrap();
        let out = locate_movie_on(m, p, &two, 1, MultiPolicy::default()).unwrap();
        same_features(&out.features, &cpu, &format!("{name}: opencl:1 limited"));
        let s1 = &out.shares[1];
        eprintln!("[{name}] limited opencl:1: {:?}", s1);
        assert_eq!(s1.frames, 0);
        assert!(
            s1.error.as_deref().unwrap_or("").contains("memory"),
            "{s1:?}"
        );
        assert_eq!(out.shares[0].frames, m.len());
    }
    // opencl:1 holds one 64×64 u16 frame's working set (≈ 420 KB) but not two: its units of
    // four frames split down to single frames, which it completes
    set_limit(Device::OpenCl(1), 700 << 10);
    let (_, m, p) = &movies[0];
    let cpu = locate_movie(m, p, &open::open(Device::Cpu)).unwrap();
    let alone = locate_movie_on(
        m,
        p,
        &[open::open(Device::OpenCl(1))],
        4,
        MultiPolicy::default(),
    )
    .unwrap();
    same_features(&alone.features, &cpu, "u16: opencl:1 alone, split");
    let s1 = &alone.shares[0];
    eprintln!("[u16] opencl:1 alone with room for one frame: {s1:?}");
    assert!(
        s1.error.is_none() && s1.splits > 0 && s1.frames == m.len(),
        "{s1:?}"
    );
    let out = locate_movie_on(m, p, &two, 4, MultiPolicy::default()).unwrap();
    same_features(&out.features, &cpu, "u16: opencl:1 splits beside opencl:0");
    eprintln!("[u16] beside opencl:0: {:?}", out.shares[1]);
    assert!(out.shares.iter().all(|s| s.error.is_none()));
}

#[cfg(feature = "opencl")]
fn set_limit(dev: Device, bytes: usize) {
    use bridge_core::memory::{MemoryInfo, MemoryLimit};
    let b = open::opencl();
    let total = b.memory_stats(dev).unwrap().total;
    let l = MemoryLimit::fraction(bytes as f64 / total as f64).unwrap();
    b.set_memory_limit(dev, Some(l)).unwrap();
}

#[cfg(feature = "opencl")]
#[test]
fn pocl_two_devices_locate() {
    test_support::rerun_with_env(
        &[
            ("POCL_DEVICES", "pthread pthread"),
            ("ARRAYBRIDGE_TEST_TWO_POCL_LOCATE", "1"),
        ],
        &["pocl_two_devices_locate_inner"],
    );
}

/// Messages of the in-process transport below (what MPI carries between ranks).
enum Up {
    Device(Device, Result<()>),
    Result(Result<Vec<Particle>>),
    Finish,
}

/// A [`FramePeer`] over channels to a thread that runs `serve_frames`.
struct ChannelPeer {
    down: std::sync::Mutex<std::sync::mpsc::Sender<Option<(usize, usize)>>>,
    up: std::sync::Mutex<std::sync::mpsc::Receiver<Up>>,
}

impl algorithms::detect::FramePeer for ChannelPeer {
    fn device(&self) -> (Device, Result<()>) {
        match self.up.lock().unwrap().recv().unwrap() {
            Up::Device(d, r) => (d, r),
            _ => panic!("expected the device first"),
        }
    }
    fn frames(&self, range: (usize, usize)) -> Result<Vec<Particle>> {
        self.down.lock().unwrap().send(Some(range)).unwrap();
        match self.up.lock().unwrap().recv().unwrap() {
            Up::Result(r) => r,
            _ => panic!("expected particles"),
        }
    }
    fn finish(&self) -> Result<()> {
        self.down.lock().unwrap().send(None).unwrap();
        while !matches!(self.up.lock().unwrap().recv().unwrap(), Up::Finish) {}
        Ok(())
    }
}

struct ChannelServer {
    down: std::sync::mpsc::Receiver<Option<(usize, usize)>>,
    up: std::sync::mpsc::Sender<Up>,
}

impl algorithms::detect::FrameServer for ChannelServer {
    fn device(&mut self, d: Device, r: Result<()>) -> Result<()> {
        self.up.send(Up::Device(d, r)).unwrap();
        Ok(())
    }
    fn next(&mut self) -> Result<Option<(usize, usize)>> {
        Ok(self.down.recv().unwrap())
    }
    fn result(&mut self, r: Result<Vec<Particle>>) -> Result<()> {
        self.up.send(Up::Result(r)).unwrap();
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        self.up.send(Up::Finish).unwrap();
        Ok(())
    }
}

/// `detect_movie_members` with the CPU here and peers (threads running `serve_frames` on
/// `peers`), as rank 0 runs it under MPI.
fn with_peers(
    det: &LogDetector,
    m: &Movie,
    peers: &[Device],
    policy: MultiPolicy,
) -> Result<algorithms::detect::MultiOutcome> {
    use algorithms::detect::DetectMember;
    std::thread::scope(|s| {
        let mut links = Vec::new();
        for &d in peers {
            let (down_tx, down_rx) = std::sync::mpsc::channel();
            let (up_tx, up_rx) = std::sync::mpsc::channel();
            s.spawn(move || {
                let mut server = ChannelServer {
                    down: down_rx,
                    up: up_tx,
                };
                det.serve_frames(m, d, &open::try_open, &mut server)
                    .unwrap();
            });
            links.push(ChannelPeer {
                down: std::sync::Mutex::new(down_tx),
                up: std::sync::Mutex::new(up_rx),
            });
        }
        let cpu = CpuBackend::default();
        let mut members = vec![DetectMember::Local(&cpu)];
        members.extend(links.iter().map(|l| DetectMember::Peer(l)));
        det.detect_movie_members(m, &members, policy, |_| {})
    })
}

#[test]
fn peers_in_other_processes_give_the_same_particles() {
    let m = movie(9);
    let det = detector(2);
    let one = det
        .detect_movie_with(&m, &CpuBackend::default(), |_| {})
        .unwrap();
    let out = with_peers(
        &det,
        &m,
        &[Device::Cpu, Device::Cpu],
        MultiPolicy::default(),
    )
    .unwrap();
    same(&one, &out.particles);
    assert_eq!(out.shares.len(), 3);
    assert_eq!(out.shares.iter().map(|s| s.frames).sum::<usize>(), 9);
    // a peer without its device fails the run naming it, or leaves its frames to the others
    let e = with_peers(&det, &m, &[Device::OpenCl(99)], MultiPolicy::default()).unwrap_err();
    assert!(e.to_string().contains("opencl:99"), "{e}");
    let out = with_peers(
        &det,
        &m,
        &[Device::OpenCl(99)],
        MultiPolicy {
            requeue_on_failure: true,
        },
    )
    .unwrap();
    same(&one, &out.particles);
    assert!(out.shares[1].error.is_some());
}

/// An input error names its frame in the movie, whatever splits the movie: `locate`'s batches
/// on one device and the units of a several-device queue (they counted from the batch's or
/// the unit's first frame, 2026-11-28, until the review of that change).
#[test]
fn an_input_error_names_its_frame_in_the_movie() {
    let Movie::F32(mut a) = movie(7) else {
        panic!("an f32 movie")
    };
    a[[5, 10, 10]] = f32::INFINITY;
    let m = Movie::F32(a);
    let frames = m.frames();
    let p = LocateParams::new(5);
    let cpu = CpuBackend::default();
    let frames_of = |e: BridgeError| match e {
        BridgeError::InvalidInput(m) => m.frames,
        other => panic!("an input error: {other}"),
    };
    let e = algorithms::detect::locate_batches(&frames, &p, 2, &cpu, |_| {}).unwrap_err();
    assert_eq!(frames_of(e), Some(5..6));
    let (b, c) = (CpuBackend::default(), CpuBackend::default());
    let e = algorithms::detect::locate_movie_multi(
        &m,
        &p,
        &[&b, &c],
        2,
        MultiPolicy::default(),
        |_| {},
    )
    .unwrap_err();
    assert_eq!(frames_of(e), Some(5..6));
    let e = detector(2)
        .detect_movie_multi(&m, &[&b, &c], MultiPolicy::default(), |_| {})
        .unwrap_err();
    assert_eq!(frames_of(e), Some(5..6));
}
