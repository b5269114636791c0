#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Detection on several devices at once (`detect::multi`): a work queue of frame ranges whose
//! result is identical to one device's, with faults kept local (out-of-memory splits, failed
//! devices, panics) and nothing lost or computed twice. Fault injection uses CPU back ends
//! that fail on purpose; the PoCL case runs two real OpenCL devices
//! (`POCL_DEVICES="pthread pthread"`, set for a child run of this binary).

use std::sync::atomic::{AtomicUsize, Ordering};

use algorithms::detect::blob_log::{Accumulate, Blob, BlobLogParams};
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
        max_sigma: 3.0,
        threshold: None,
        threshold_rel: Some(0.2),
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
        self.blob_log_batch_acc(frames, p, Accumulate::F64)
    }
    fn blob_log_batch_acc(
        &self,
        frames: &[FrameView<'_>],
        p: &BlobLogParams,
        acc: Accumulate,
    ) -> Result<Vec<Vec<Blob>>> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        match self.fault {
            Fault::OomOver(n) if frames.len() > n => return Err(oom(self.device)),
            Fault::OomAlways => return Err(oom(self.device)),
            Fault::FailAfter(n) if call >= n => {
                return Err(BridgeError::backend("test", Some(-5), "device lost"));
            }
            Fault::Panic => panic!("injected panic"),
            _ => {}
        }
        CpuBackend.blob_log_batch_acc(frames, p, acc)
    }
    fn locate_batch(
        &self,
        frames: &[FrameView<'_>],
        p: &LocateParams,
    ) -> Result<Vec<Vec<Feature>>> {
        CpuBackend.locate_batch(frames, p)
    }
}

#[test]
fn two_devices_equal_one() {
    let m = movie(23);
    let det = detector(4);
    let one = det.detect_movie(&m, Device::Cpu).unwrap();
    assert!(!one.is_empty());
    let (a, b) = (CpuBackend, CpuBackend);
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
    let one = det.detect_movie(&m, Device::Cpu).unwrap();
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
        .detect_movie_multi(&m, &[&small, &CpuBackend], MultiPolicy::default(), |_| {})
        .unwrap();
    same(&out.particles, &one);
}

#[test]
fn a_device_that_cannot_fit_one_frame_hands_it_to_the_others() {
    let m = movie(9);
    let det = detector(3);
    let one = det.detect_movie(&m, Device::Cpu).unwrap();
    let full = Flaky::new(Fault::OomAlways, 0);
    let out = det
        .detect_movie_multi(&m, &[&full, &CpuBackend], MultiPolicy::default(), |_| {})
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
    let one = det.detect_movie(&m, Device::Cpu).unwrap();
    let lost = Flaky::new(Fault::FailAfter(1), 3);
    let err = det
        .detect_movie_multi(&m, &[&lost, &CpuBackend], MultiPolicy::default(), |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("opencl:3") && err.contains("device lost"),
        "{err}"
    );
    let lost = Flaky::new(Fault::FailAfter(1), 3);
    let done = AtomicUsize::new(0);
    let out = det
        .detect_movie_multi(
            &m,
            &[&lost, &CpuBackend],
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
        .detect_movie_multi(&m, &[&bad, &CpuBackend], MultiPolicy::default(), |_| {})
        .unwrap_err();
    assert!(err.to_string().contains("panicked"), "{err}");
    let bad = Flaky::new(Fault::Panic, 1);
    let out = det
        .detect_movie_multi(
            &m,
            &[&bad, &CpuBackend],
            MultiPolicy {
                requeue_on_failure: true,
            },
            |_| {},
        )
        .unwrap();
    same(&out.particles, &det.detect_movie(&m, Device::Cpu).unwrap());
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
        .detect_movie_on(&m, &[Device::Cpu, Device::Cpu], MultiPolicy::default())
        .unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    assert!(
        det.detect_movie_on(
            &m,
            &[Device::Cpu, Device::OpenCl(99)],
            MultiPolicy::default()
        )
        .is_err()
    );
}

/// Two PoCL devices in this process (the child run sets `POCL_DEVICES`): identical to one
/// OpenCL device and to the CPU, both devices take work.
#[cfg(feature = "opencl")]
#[test]
fn pocl_two_devices_inner() {
    if std::env::var("ARRAYBRIDGE_TEST_TWO_POCL").is_err() {
        return; // run by `pocl_two_devices` in a child process
    }
    let n = bridge_opencl::shared().device_count();
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
    let cpu = det.detect_movie(&m, Device::Cpu).unwrap();
    let one = det
        .detect_movie_on(&m, &[Device::OpenCl(0)], MultiPolicy::default())
        .unwrap();
    let two = det
        .detect_movie_on(
            &m,
            &[Device::OpenCl(0), Device::OpenCl(1)],
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
                det.serve_frames(m, d, &mut server).unwrap();
            });
            links.push(ChannelPeer {
                down: std::sync::Mutex::new(down_tx),
                up: std::sync::Mutex::new(up_rx),
            });
        }
        let mut members = vec![DetectMember::Local(&CpuBackend)];
        members.extend(links.iter().map(|l| DetectMember::Peer(l)));
        det.detect_movie_members(m, &members, policy, |_| {})
    })
}

#[test]
fn peers_in_other_processes_give_the_same_particles() {
    let m = movie(9);
    let det = detector(2);
    let one = det.detect_movie_with(&m, &CpuBackend, |_| {}).unwrap();
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
