//! Movies that already live where the work runs go in without a conversion: a `u16` movie
//! uploaded once to an OpenCL or CUDA device is read in place by `blob_log_array` (the
//! registry's conversion records prove that no byte moves), and a `torch:cpu` tensor is read
//! through a view of its memory. Results are those of the host path on the same device. The
//! per-device cases are one body run on every device (`test_support::device_suite!`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod open;

use std::sync::{Arc, Mutex};

use algorithms::detect::{Blob, BlobLogParams, FrameView, Prescale, blob_log_array};
use bridge_core::convert::{ConversionObserver, ConversionRecord, Registry};
use bridge_core::{Array, Device};
use ndarray::Array3;
use rand::{Rng, SeedableRng};

/// Conversion records, as the registry's observer sees them.
#[derive(Default)]
struct Records(Mutex<Vec<ConversionRecord>>);

impl ConversionObserver for Records {
    fn on_conversion(&self, record: &ConversionRecord) {
        self.0.lock().unwrap().push(record.clone());
    }
}

impl Records {
    fn take(&self) -> Vec<ConversionRecord> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// A random u16 movie with bright Gaussian spots on a noisy background.
fn movie(t: usize, n: usize, seed: u64) -> Array3<u16> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut m = Array3::<u16>::zeros((t, n, n));
    for f in 0..t {
        let spots: Vec<(f64, f64, f64)> = (0..6)
            .map(|_| {
                (
                    rng.random_range(6.0..n as f64 - 6.0),
                    rng.random_range(6.0..n as f64 - 6.0),
                    rng.random_range(1.2..2.5),
                )
            })
            .collect();
        for y in 0..n {
            for x in 0..n {
                let mut v = 800.0 + rng.random_range(0.0..200.0);
                for &(cy, cx, s) in &spots {
                    let d2 = (y as f64 - cy).powi(2) + (x as f64 - cx).powi(2);
                    v += 30000.0 * (-d2 / (2.0 * s * s)).exp();
                }
                m[[f, y, x]] = v.min(65535.0) as u16;
            }
        }
    }
    m
}

fn params() -> BlobLogParams {
    BlobLogParams {
        min_sigma: 1.0,
        max_sigma: 3.0,
        num_sigma: 5,
        threshold: None,
        threshold_rel: Some(0.2),
        ..BlobLogParams::default()
    }
}

fn frames(m: &Array3<u16>) -> Vec<FrameView<'_>> {
    m.outer_iter().map(FrameView::U16).collect()
}

fn assert_same(a: &[Vec<Blob>], b: &[Vec<Blob>]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x, y);
    }
}

#[test]
fn host_movies_on_the_cpu_are_read_in_place() {
    let rec = Arc::new(Records::default());
    let reg = Registry::new();
    reg.set_observer(Some(rec.clone()));
    let m = movie(3, 48, 1);
    let want = algorithms::detect::CpuBackend::default();
    let want =
        algorithms::detect::DetectBackend::blob_log_batch(&want, &frames(&m), &params()).unwrap();
    let (got, back) = blob_log_array(
        &reg,
        Array::from_ndarray(m.clone().into_dyn()),
        &params(),
        &open::cpu(),
    )
    .unwrap();
    assert_same(&got, &want);
    assert!(rec.take().is_empty(), "a host movie needs no conversion");
    assert_eq!(back.device(), Device::Cpu);
    // Bad movies are typed errors before anything moves.
    let e = blob_log_array(
        &reg,
        Array::from_ndarray(ndarray::ArrayD::<i32>::zeros(vec![2, 8, 8])),
        &params(),
        &open::cpu(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("u8, u16, f32 or f64"), "{e}");
    let e = blob_log_array(
        &reg,
        Array::from_ndarray(ndarray::ArrayD::<u16>::zeros(vec![0, 8, 8])),
        &params(),
        &open::cpu(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("non-empty"), "{e}");
}

thread_local! {
    /// The records of the registry built by [`registry`] on this test's thread.
    static RECORDS: std::cell::RefCell<Option<Arc<Records>>> = const { std::cell::RefCell::new(None) };
}

/// A registry with every compiled-in device backend and a fresh observer for this thread.
fn registry() -> Registry {
    let rec = Arc::new(Records::default());
    RECORDS.with(|r| *r.borrow_mut() = Some(rec.clone()));
    #[allow(unused_mut)]
    let mut reg = Registry::new();
    #[cfg(feature = "opencl")]
    reg.register_backend(open::opencl());
    #[cfg(feature = "cuda")]
    reg.register_backend(bridge_cuda::backend());
    reg.set_observer(Some(rec));
    reg
}

fn records() -> Arc<Records> {
    RECORDS.with(|r| {
        r.borrow()
            .clone()
            .expect("registry() was called on this thread")
    })
}

// The same body on cpu, opencl:0 and cuda:0 (skipped where absent, failing under the
// ARRAYBRIDGE_REQUIRE_* variables): a movie that lives on the device it runs on is read in place
// (zero bytes converted, twice), with the results of the host path on the same device; a host
// movie sent to a device is converted once and handed back there; `minmax` (per-frame extrema)
// goes through the host once.
test_support::device_suite!(resident_movie, registry = registry(), |reg, dev| {
    use bridge_core::MemoryType;
    let rec = records();
    let m = movie(5, 64, 7);
    let nbytes = (m.len() * 2) as u64;
    let backend = open::detect_backend(dev).unwrap();
    let want = backend.blob_log_batch(&frames(&m), &params()).unwrap();
    assert!(want.iter().map(Vec::len).sum::<usize>() > 5, "spots found");
    let host = || Array::from_ndarray(m.clone().into_dyn());
    let mut movie = if dev == Device::Cpu {
        host()
    } else {
        let on = reg.convert(host(), dev.memory_type(), dev).unwrap();
        let r = rec.take();
        assert_eq!((r.len(), r[0].bytes_moved), (1, nbytes), "one upload");
        on
    };
    for _ in 0..2 {
        let (got, back) = blob_log_array(reg, movie, &params(), &open::open(dev)).unwrap();
        assert_same(&got, &want);
        assert_eq!(back.device(), dev, "the movie stays where it runs");
        let moved: u64 = rec.take().iter().map(|r| r.bytes_moved).sum();
        assert_eq!(moved, 0, "a resident movie must not move");
        movie = back;
    }
    if dev == Device::Cpu {
        return;
    }
    // A host movie sent to the device is converted once and handed back there.
    let (got, back) = blob_log_array(reg, host(), &params(), &open::open(dev)).unwrap();
    assert_same(&got, &want);
    assert_eq!(back.memory_type(), dev.memory_type());
    let r = rec.take();
    assert_eq!((r.len(), r[0].bytes_moved), (1, nbytes));
    // minmax needs per-frame extrema: one conversion to the host, the host path's result.
    let mm = BlobLogParams {
        prescale: Prescale::MinMax,
        ..params()
    };
    let want_mm = backend.blob_log_batch(&frames(&m), &mm).unwrap();
    let (got, back) = blob_log_array(reg, back, &mm, &open::open(dev)).unwrap();
    assert_same(&got, &want_mm);
    assert_eq!(back.memory_type(), MemoryType::Host);
    let r = rec.take();
    assert_eq!((r.len(), r[0].bytes_moved), (1, nbytes));
    drop(movie);
});

// `locate` the same way (`locate_array`): a u16, an f32 and (on devices computing in float64)
// an f64 movie living on the device are read in place, zero bytes converted, twice, with the
// features of the host path on that device (bit for bit) and, in float64, of the CPU; a host
// movie is converted once and handed back there; a strided (non-contiguous) view is not read
// in place.
test_support::device_suite!(resident_locate, registry = registry(), |reg, dev| {
    use algorithms::detect::{DetectBackend, LocateParams, locate_array};
    let rec = records();
    let m = movie(6, 64, 11);
    let p = LocateParams::new(7);
    let backend = open::detect_backend(dev).unwrap();
    let cpu = algorithms::detect::CpuBackend::default();
    let mf = m.mapv(|v| f32::from(v) / 65535.0);
    let md = m.mapv(|v| f64::from(v) / 65535.0);
    let fp64 = match dev {
        Device::Cpu => true,
        #[cfg(feature = "opencl")]
        Device::OpenCl(i) => {
            algorithms::exec::OpenClExecutor::new(open::opencl(), Device::OpenCl(i))
                .map(algorithms::detect::OpenClDetect::with_executor)
                .unwrap()
                .has_fp64()
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => algorithms::exec::CudaExecutor::new(i)
            .map(algorithms::detect::CudaDetect::with_executor)
            .unwrap()
            .has_fp64(),
        _ => false,
    };
    let cases: Vec<(&str, Array, Vec<FrameView<'_>>, u64)> = vec![
        (
            "u16",
            Array::from_ndarray(m.clone().into_dyn()),
            frames(&m),
            (m.len() * 2) as u64,
        ),
        (
            "f32",
            Array::from_ndarray(mf.clone().into_dyn()),
            mf.outer_iter().map(FrameView::F32).collect(),
            (m.len() * 4) as u64,
        ),
        (
            "f64",
            Array::from_ndarray(md.clone().into_dyn()),
            md.outer_iter().map(FrameView::F64).collect(),
            (m.len() * 8) as u64,
        ),
    ];
    for (name, host, fr, nbytes) in cases {
        let want = backend.locate_batch(&fr, &p).unwrap();
        assert!(
            want.iter().map(Vec::len).sum::<usize>() > 5,
            "[{name}] spots found"
        );
        if fp64 {
            assert_eq!(want, cpu.locate_batch(&fr, &p).unwrap(), "[{name}] vs cpu");
        }
        let in_place = dev == Device::Cpu || name != "f64" || fp64;
        let mut movie = if dev == Device::Cpu {
            host
        } else {
            let on = reg.convert(host, dev.memory_type(), dev).unwrap();
            let r = rec.take();
            assert_eq!((r.len(), r[0].bytes_moved), (1, nbytes), "one upload");
            on
        };
        for _ in 0..2 {
            let (got, back) = locate_array(reg, movie, &p, &open::open(dev)).unwrap();
            assert_eq!(got, want, "[{name}] resident vs host frames");
            let moved: u64 = rec.take().iter().map(|r| r.bytes_moved).sum();
            if in_place {
                assert_eq!(moved, 0, "[{name}] a resident movie must not move");
                assert_eq!(back.device(), dev, "[{name}] the movie stays where it runs");
            }
            movie = back;
        }
        if dev == Device::Cpu || !in_place {
            continue;
        }
        // a host movie sent to the device: converted once, handed back there
        let host = match name {
            "u16" => Array::from_ndarray(m.clone().into_dyn()),
            "f32" => Array::from_ndarray(mf.clone().into_dyn()),
            _ => Array::from_ndarray(md.clone().into_dyn()),
        };
        let (got, back) = locate_array(reg, host, &p, &open::open(dev)).unwrap();
        assert_eq!(got, want, "[{name}] host movie on the device");
        assert_eq!(back.device(), dev);
        let r = rec.take();
        assert_eq!((r.len(), r[0].bytes_moved), (1, nbytes));
        drop(movie);
    }
    // bad movies are typed errors before anything moves
    let e = locate_array(
        reg,
        Array::from_ndarray(ndarray::ArrayD::<i32>::zeros(vec![2, 8, 8])),
        &p,
        &open::open(dev),
    )
    .unwrap_err();
    assert!(e.to_string().contains("u8, u16, f32 or f64"), "{e}");
    assert!(rec.take().is_empty());
});

#[cfg(feature = "torch")]
mod torch {
    use super::*;

    #[test]
    fn a_torch_cpu_tensor_is_read_without_a_copy() {
        let rec = Arc::new(Records::default());
        let mut reg = Registry::new();
        reg.register_backend(bridge_torch::backend());
        reg.set_observer(Some(rec.clone()));
        let m = movie(3, 48, 3).mapv(|v| f32::from(v) / 65535.0);
        let fr: Vec<FrameView<'_>> = m.outer_iter().map(FrameView::F32).collect();
        let want = algorithms::detect::DetectBackend::blob_log_batch(
            &algorithms::detect::CpuBackend::default(),
            &fr,
            &params(),
        )
        .unwrap();
        // A tensor made by torch itself (not aliasing an ndarray): its own memory.
        let flat: Vec<f32> = m.iter().copied().collect();
        let tensor = bridge_torch::tch::Tensor::from_slice(&flat).reshape([3, 48, 48]);
        let ptr = tensor.data_ptr() as usize;
        let array = bridge_torch::array_from_tensor(tensor).unwrap();
        assert_eq!(array.device(), Device::TorchCpu);
        let (got, back) = blob_log_array(&reg, array, &params(), &open::cpu()).unwrap();
        assert_same(&got, &want);
        assert!(
            rec.take().is_empty(),
            "no conversion for a torch:cpu tensor"
        );
        let t = bridge_torch::tensor_of(&back).unwrap();
        assert_eq!(
            t.data_ptr() as usize,
            ptr,
            "the same tensor memory came back"
        );
    }
}
