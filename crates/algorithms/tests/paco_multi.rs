#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(not(feature = "opencl"), allow(dead_code, unused_imports))]
//! PACO on several devices at once (`paco::paco_on`): the maps are bit-identical to one
//! device's and to the CPU back end's, with and without sub-pixel templates; an out-of-memory
//! device splits its units or, when it cannot even hold the cube, leaves them to the others.
//! The PoCL cases run two real OpenCL devices (`POCL_DEVICES="pthread pthread"`, set for a
//! child run of this binary, one child per case so that memory limits do not leak).

mod open;

use algorithms::paco::{MultiPolicy, PacoMaps, PacoParams, SubPixel, paco_on, paco_on_device};
use algorithms::synth::adi::synthetic_adi;
use bridge_core::Device;
use ndarray::{Array1, Array2, Array3};

fn cube() -> (Array3<f64>, Array1<f64>, Array2<f64>) {
    synthetic_adi(10, 64, 11)
}

fn params(subpixel: SubPixel) -> PacoParams {
    PacoParams {
        subpixel,
        ..Default::default()
    }
}

/// Bit for bit (NaN is NaN: a device writes its own NaN pattern where the CPU writes Rust's).
fn same_bits(x: &Array2<f64>, y: &Array2<f64>, what: &str) {
    assert_eq!(x.dim(), y.dim());
    for ((i, a), b) in x.indexed_iter().zip(y.iter()) {
        if a.is_nan() && b.is_nan() {
            continue;
        }
        assert_eq!(a.to_bits(), b.to_bits(), "{what} at {i:?}: {a} vs {b}");
    }
}

fn same_maps(x: &PacoMaps, y: &PacoMaps, what: &str) {
    same_bits(&x.a, &y.a, &format!("{what}: a"));
    same_bits(&x.b, &y.b, &format!("{what}: b"));
    same_bits(&x.snr, &y.snr, &format!("{what}: snr"));
}

fn on(devices: &[Device], p: &PacoParams) -> algorithms::paco::PacoMulti {
    let (c, a, psf) = cube();
    paco_on(
        c.view(),
        a.view(),
        psf.view(),
        p,
        &open::open_all(devices).unwrap(),
        MultiPolicy::default(),
    )
    .unwrap()
}

fn single(device: Device, p: &PacoParams) -> PacoMaps {
    let (c, a, psf) = cube();
    paco_on_device(&open::open(device), c.view(), a.view(), psf.view(), p).unwrap()
}

#[test]
fn the_cpu_alone_gives_the_cpu_maps() {
    for sub in [SubPixel::Off, SubPixel::Table { q: 8 }] {
        let p = params(sub);
        let m = on(&[Device::Cpu], &p);
        same_maps(&m.maps, &single(Device::Cpu, &p), &format!("{sub:?}"));
        assert_eq!(m.shares.len(), 1);
        assert!(m.shares[0].units >= 1 && m.shares[0].error.is_none());
    }
}

#[test]
fn bad_device_lists_are_errors() {
    let (c, a, psf) = cube();
    let p = params(SubPixel::Off);
    let run = |d: &[Device], p: &PacoParams| {
        open::open_all(d)
            .and_then(|d| {
                paco_on(
                    c.view(),
                    a.view(),
                    psf.view(),
                    p,
                    &d,
                    MultiPolicy::default(),
                )
            })
            .unwrap_err()
            .to_string()
    };
    assert!(run(&[], &p).contains("at least one device"));
    assert!(run(&[Device::Cpu, Device::Cpu], &p).contains("named twice"));
    assert!(run(&[Device::Cpu, Device::TorchCpu], &p).contains("torch"));
    // a device that computes templates next to the CPU, which does not (needs the backend)
    #[cfg(feature = "opencl")]
    let t = params(SubPixel::Table { q: 8 });
    #[cfg(feature = "opencl")]
    assert!(
        run(&[Device::Cpu, Device::OpenCl(0)], &t).contains("drop cpu"),
        "{}",
        run(&[Device::Cpu, Device::OpenCl(0)], &t)
    );
}

/// Whether the child run has two OpenCL devices with doubles (skips otherwise).
#[cfg(feature = "opencl")]
fn two_pocl(flag: &str) -> bool {
    if !test_support::rerun::in_child(flag) {
        return false; // run by the outer test in a child process
    }
    let n = open::opencl().device_count();
    if n < 2 {
        assert!(
            !test_support::env_flag("ARRAYBRIDGE_REQUIRE_OPENCL"),
            "ARRAYBRIDGE_REQUIRE_OPENCL=1 but {n} OpenCL device(s)"
        );
        eprintln!("skipping: {n} OpenCL device(s)");
        return false;
    }
    true
}

#[cfg(feature = "opencl")]
fn print_shares(m: &algorithms::paco::PacoMulti) {
    for s in &m.shares {
        eprintln!(
            "{}: {} units, {} pixels, {:.3} s, {} B up, {} B down, {} splits, {:?}",
            s.device, s.units, s.pixels, s.seconds, s.bytes_up, s.bytes_down, s.splits, s.error
        );
    }
}

#[cfg(feature = "opencl")]
#[test]
fn pocl_two_devices_inner() {
    if !two_pocl("ARRAYBRIDGE_TEST_PACO_TWO") {
        return;
    }
    let two = [Device::OpenCl(0), Device::OpenCl(1)];
    for sub in [SubPixel::Off, SubPixel::Table { q: 8 }, SubPixel::VipFft] {
        let p = params(sub);
        let cpu = single(Device::Cpu, &p);
        let one = single(Device::OpenCl(1), &p);
        let m = on(&two, &p);
        print_shares(&m);
        same_maps(&m.maps, &one, &format!("{sub:?}: two devices vs opencl:1"));
        same_maps(&m.maps, &cpu, &format!("{sub:?}: two devices vs cpu"));
        let units: usize = m.shares.iter().map(|s| s.units).sum();
        assert!(units >= 2, "{units} units");
        assert!(m.shares.iter().all(|s| s.error.is_none() && s.bytes_up > 0));
    }
    // the CPU next to a device (no templates)
    let p = params(SubPixel::Off);
    let m = on(&[Device::Cpu, Device::OpenCl(0)], &p);
    same_maps(&m.maps, &single(Device::Cpu, &p), "cpu + opencl:0");
}

#[cfg(feature = "opencl")]
fn limit(dev: Device, bytes: usize) {
    use bridge_core::memory::{MemoryInfo, MemoryLimit};
    let b = open::opencl();
    let total = b.memory_stats(dev).unwrap().total;
    let l = MemoryLimit::fraction(bytes as f64 / total as f64).unwrap();
    b.set_memory_limit(dev, Some(l)).unwrap();
}

#[cfg(feature = "opencl")]
#[test]
fn pocl_oom_splits_inner() {
    if !two_pocl("ARRAYBRIDGE_TEST_PACO_OOM") {
        return;
    }
    let (c, _, _) = cube();
    let (t, h, w) = c.dim();
    let round = |b: usize| b.div_ceil(512) * 512;
    // opencl:1 holds the cube, its centred copy, q and z, but the band buffer of one
    // statistics row (56 columns × 49 × 8 bytes) only: every larger unit splits there
    let base = 3 * round(t * h * w * 8) + round(h * w * 8) + 4 * 512;
    let row = 56 * 49 * 8;
    limit(Device::OpenCl(1), base + row + row / 2);
    let p = params(SubPixel::Off);
    let m = on(&[Device::OpenCl(0), Device::OpenCl(1)], &p);
    print_shares(&m);
    same_maps(
        &m.maps,
        &single(Device::Cpu, &p),
        "with a memory limit on opencl:1",
    );
    assert!(
        m.shares[1].splits > 0 || m.shares[1].units == 0,
        "{:?}",
        m.shares[1]
    );
    // a device that cannot hold the cube leaves everything to the other
    limit(Device::OpenCl(1), 4096);
    let m = on(&[Device::OpenCl(0), Device::OpenCl(1)], &p);
    print_shares(&m);
    same_maps(&m.maps, &single(Device::Cpu, &p), "opencl:1 without memory");
    assert_eq!(m.shares[1].units, 0);
    assert!(m.shares[1].error.as_deref().unwrap().contains("memory"));
    // with templates, too
    let p = params(SubPixel::Table { q: 8 });
    let m = on(&[Device::OpenCl(0), Device::OpenCl(1)], &p);
    same_maps(
        &m.maps,
        &single(Device::Cpu, &p),
        "templates, opencl:1 without memory",
    );
    // both without memory: a clear error, no hang
    limit(Device::OpenCl(0), 4096);
    let (c, a, psf) = cube();
    let e = paco_on(
        c.view(),
        a.view(),
        psf.view(),
        &p,
        &open::open_all(&[Device::OpenCl(0), Device::OpenCl(1)]).unwrap(),
        MultiPolicy::default(),
    )
    .unwrap_err();
    assert!(e.is_oom(), "{e}");
}

#[cfg(feature = "opencl")]
#[test]
fn pocl_two_devices() {
    test_support::rerun_with_env(
        &[
            ("POCL_DEVICES", "pthread pthread"),
            ("ARRAYBRIDGE_TEST_PACO_TWO", "1"),
        ],
        &["pocl_two_devices_inner"],
    );
}

#[cfg(feature = "opencl")]
#[test]
fn pocl_out_of_memory() {
    test_support::rerun_with_env(
        &[
            ("POCL_DEVICES", "pthread pthread"),
            ("ARRAYBRIDGE_TEST_PACO_OOM", "1"),
        ],
        &["pocl_oom_splits_inner"],
    );
}

/// Messages of the in-process transport below (what MPI carries between ranks).
enum Up {
    Kind(Device, bridge_core::Result<bool>),
    Ready(bridge_core::Result<()>),
    Result(bridge_core::Result<Vec<f64>>),
    Finish(u64, u64),
}

/// A [`UnitPeer`] over channels to a thread that runs `serve_units`.
struct ChannelPeer {
    down: std::sync::Mutex<std::sync::mpsc::Sender<Option<(usize, usize)>>>,
    up: std::sync::Mutex<std::sync::mpsc::Receiver<Up>>,
}

impl ChannelPeer {
    fn recv(&self) -> Up {
        self.up.lock().unwrap().recv().unwrap()
    }
}

impl algorithms::paco::UnitPeer for ChannelPeer {
    fn arithmetic(&self) -> (Device, bridge_core::Result<bool>) {
        match self.recv() {
            Up::Kind(d, r) => (d, r),
            _ => panic!("expected the arithmetic first"),
        }
    }
    fn ready(&self) -> bridge_core::Result<()> {
        match self.recv() {
            Up::Ready(r) => r,
            _ => panic!("expected ready"),
        }
    }
    fn unit(&self, range: (usize, usize)) -> bridge_core::Result<Vec<f64>> {
        self.down.lock().unwrap().send(Some(range)).unwrap();
        match self.recv() {
            Up::Result(r) => r,
            _ => panic!("expected a result"),
        }
    }
    fn finish(&self) -> bridge_core::Result<(u64, u64)> {
        self.down.lock().unwrap().send(None).unwrap();
        loop {
            if let Up::Finish(a, b) = self.recv() {
                return Ok((a, b));
            }
        }
    }
}

struct ChannelServer {
    down: std::sync::mpsc::Receiver<Option<(usize, usize)>>,
    up: std::sync::mpsc::Sender<Up>,
}

impl algorithms::paco::UnitServer for ChannelServer {
    fn arithmetic(&mut self, d: Device, r: bridge_core::Result<bool>) -> bridge_core::Result<()> {
        self.up.send(Up::Kind(d, r)).unwrap();
        Ok(())
    }
    fn ready(&mut self, r: bridge_core::Result<()>) -> bridge_core::Result<()> {
        self.up.send(Up::Ready(r)).unwrap();
        Ok(())
    }
    fn next(&mut self) -> bridge_core::Result<Option<(usize, usize)>> {
        Ok(self.down.recv().unwrap())
    }
    fn result(&mut self, r: bridge_core::Result<Vec<f64>>) -> bridge_core::Result<()> {
        self.up.send(Up::Result(r)).unwrap();
        Ok(())
    }
    fn finish(&mut self, (a, b): (u64, u64)) -> bridge_core::Result<()> {
        self.up.send(Up::Finish(a, b)).unwrap();
        Ok(())
    }
}

/// `paco_members` with the CPU here and peers (threads running `serve_units` on `peers`),
/// as rank 0 runs it under MPI.
fn with_peers(
    peers: &[Device],
    p: &PacoParams,
    policy: MultiPolicy,
) -> bridge_core::Result<algorithms::paco::PacoMulti> {
    use algorithms::paco::{Member, paco_members, serve_units};
    let (c, a, psf) = cube();
    std::thread::scope(|s| {
        let mut links = Vec::new();
        for &d in peers {
            let (down_tx, down_rx) = std::sync::mpsc::channel();
            let (up_tx, up_rx) = std::sync::mpsc::channel();
            let (c, a, psf, p) = (&c, &a, &psf, p);
            s.spawn(move || {
                let mut server = ChannelServer {
                    down: down_rx,
                    up: up_tx,
                };
                serve_units(
                    c.view(),
                    a.view(),
                    psf.view(),
                    p,
                    d,
                    &open::try_open,
                    &mut server,
                )
                .unwrap();
            });
            links.push(ChannelPeer {
                down: std::sync::Mutex::new(down_tx),
                up: std::sync::Mutex::new(up_rx),
            });
        }
        let mut members = vec![Member::Local(open::cpu())];
        members.extend(links.iter().map(|l| Member::Peer(l)));
        paco_members(c.view(), a.view(), psf.view(), p, &members, policy)
    })
}

#[test]
fn peers_in_other_processes_give_the_same_maps() {
    let p = params(SubPixel::Off);
    let m = with_peers(&[Device::Cpu, Device::Cpu], &p, MultiPolicy::default()).unwrap();
    same_maps(&m.maps, &single(Device::Cpu, &p), "cpu + 2 peers");
    assert_eq!(m.shares.len(), 3);
    assert!(m.shares.iter().all(|s| s.error.is_none()), "{:?}", m.shares);
    let units: usize = m.shares.iter().map(|s| s.units).sum();
    assert!(units >= 3, "{:?}", m.shares);
}

#[test]
fn a_failing_peer_fails_the_run_or_leaves_its_work_to_the_others() {
    let p = params(SubPixel::Off);
    // a device the peer does not have: the run fails naming it (the peer is stopped, no hang)
    let e = with_peers(&[Device::OpenCl(99)], &p, MultiPolicy::default()).unwrap_err();
    assert!(e.to_string().contains("opencl:99"), "{e}");
    // with requeue, the others do its work and its share says why it stopped
    let m = with_peers(
        &[Device::OpenCl(99)],
        &p,
        MultiPolicy {
            requeue_on_failure: true,
        },
    )
    .unwrap();
    same_maps(&m.maps, &single(Device::Cpu, &p), "requeued");
    assert_eq!(m.shares[1].device, Device::OpenCl(99));
    assert!(m.shares[1].error.is_some());
    // the CPU next to peers with templates is refused, as in a device list
    let e = with_peers(
        &[Device::Cpu],
        &params(SubPixel::Table { q: 8 }),
        MultiPolicy::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("drop cpu"), "{e}");
}

/// A peer that computes its first `ok` units and then fails with a device error that is not
/// out of memory (a kernel that stops working in the middle of the run).
struct FailsAfter<'a> {
    inner: &'a ChannelPeer,
    ok: usize,
    calls: std::sync::atomic::AtomicUsize,
}

impl algorithms::paco::UnitPeer for FailsAfter<'_> {
    fn arithmetic(&self) -> (Device, bridge_core::Result<bool>) {
        self.inner.arithmetic()
    }
    fn ready(&self) -> bridge_core::Result<()> {
        self.inner.ready()
    }
    fn unit(&self, range: (usize, usize)) -> bridge_core::Result<Vec<f64>> {
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if call >= self.ok {
            return Err(bridge_core::BridgeError::backend(
                "opencl",
                None,
                "injected: the kernel launch failed",
            ));
        }
        self.inner.unit(range)
    }
    fn finish(&self) -> bridge_core::Result<(u64, u64)> {
        self.inner.finish()
    }
}

/// `paco_members` with the CPU here and one peer that fails after `ok` units.
fn with_failing_peer(
    ok: usize,
    p: &PacoParams,
    policy: MultiPolicy,
) -> bridge_core::Result<algorithms::paco::PacoMulti> {
    use algorithms::paco::{Member, paco_members, serve_units};
    let (c, a, psf) = cube();
    std::thread::scope(|s| {
        let (down_tx, down_rx) = std::sync::mpsc::channel();
        let (up_tx, up_rx) = std::sync::mpsc::channel();
        let (cr, ar, psfr) = (&c, &a, &psf);
        s.spawn(move || {
            let mut server = ChannelServer {
                down: down_rx,
                up: up_tx,
            };
            serve_units(
                cr.view(),
                ar.view(),
                psfr.view(),
                p,
                Device::Cpu,
                &open::try_open,
                &mut server,
            )
            .unwrap();
        });
        let link = ChannelPeer {
            down: std::sync::Mutex::new(down_tx),
            up: std::sync::Mutex::new(up_rx),
        };
        let flaky = FailsAfter {
            inner: &link,
            ok,
            calls: std::sync::atomic::AtomicUsize::new(0),
        };
        let members = [Member::Local(open::cpu()), Member::Peer(&flaky)];
        paco_members(c.view(), a.view(), psf.view(), p, &members, policy)
    })
}

#[test]
fn a_worker_failing_mid_run_fails_the_run_or_is_requeued() {
    let p = params(SubPixel::Off);
    // without requeue: the run fails, naming the device and what it was doing
    let e = with_failing_peer(0, &p, MultiPolicy::default()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("cpu failed") && text.contains("injected"),
        "{text}"
    );
    // with requeue: the CPU takes over the unit and the rest; the maps are identical
    for ok in [0, 1] {
        let m = with_failing_peer(
            ok,
            &p,
            MultiPolicy {
                requeue_on_failure: true,
            },
        )
        .unwrap();
        same_maps(
            &m.maps,
            &single(Device::Cpu, &p),
            "requeued after a failure",
        );
        let peer = &m.shares[1];
        if let Some(e) = &peer.error {
            assert!(e.contains("injected"), "{e}");
            assert!(peer.units <= ok, "{:?}", m.shares);
        }
    }
}
