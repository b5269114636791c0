#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Host ↔ torch conversions on CPU libtorch (CI): every dtype, zero-copy and copy paths, the
//! aliasing contract, dtype errors. CUDA paths are in `torch_cuda.rs`.

use std::sync::{Arc, Mutex};

use bridge_core::convert::{ConversionObserver, ConversionRecord, Registry, TransferKind};
use bridge_core::{Array, BridgeError, DType, Device, HostData, HostElement, MemoryType};
use bridge_torch::tch::{Kind, Tensor};
use bridge_torch::{TorchStorage, dtype_of, tensor_of, tensor_view};
use ndarray::{ArrayD, Axis, IxDyn, s};
use rand::distr::{Distribution, StandardUniform};
use rand::{Rng, SeedableRng};

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

fn registry() -> (Registry, Arc<Records>) {
    let mut reg = Registry::new();
    reg.register_backend(bridge_torch::backend());
    let rec = Arc::new(Records::default());
    reg.set_observer(Some(rec.clone()));
    (reg, rec)
}

fn to_torch(reg: &Registry, a: Array) -> Array {
    reg.convert(a, MemoryType::Torch, Device::TorchCpu).unwrap()
}

fn to_host(reg: &Registry, a: Array) -> Array {
    reg.convert(a, MemoryType::Host, Device::Cpu).unwrap()
}

fn random<T: Copy>(shape: &[usize], f: impl Fn(&mut rand::rngs::StdRng) -> T) -> ArrayD<T> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    ArrayD::from_shape_simple_fn(IxDyn(shape), || f(&mut rng))
}

fn random_host(dtype: DType, shape: &[usize]) -> HostData {
    fn gen_<T>(shape: &[usize]) -> ArrayD<T>
    where
        T: Copy,
        StandardUniform: Distribution<T>,
    {
        random(shape, |r| r.random::<T>())
    }
    match dtype {
        DType::U8 => HostData::U8(gen_(shape)),
        DType::U16 => HostData::U16(gen_(shape)),
        DType::I32 => HostData::I32(gen_(shape)),
        DType::I64 => HostData::I64(gen_(shape)),
        DType::F16 => HostData::F16(random(shape, |r| {
            bridge_core::f16::from_f32(r.random_range(-1000.0..1000.0))
        })),
        DType::BF16 => HostData::BF16(random(shape, |r| {
            bridge_core::bf16::from_f32(r.random_range(-1e30..1e30))
        })),
        DType::F32 => HostData::F32(gen_::<f32>(shape).mapv(|v| v * 2.0 - 1.0)),
        DType::F64 => HostData::F64(gen_::<f64>(shape).mapv(|v| v * 1e300)),
    }
}

/// Bit-exact comparison through the logical (row-major) byte order.
fn same_bits(a: &HostData, b: &HostData) -> bool {
    a.dtype() == b.dtype() && a.shape() == b.shape() && a.to_c_bytes() == b.to_c_bytes()
}

/// The tensor's logical contents as host data, read through `tensor_view`.
fn read_tensor(t: &Tensor, dtype: DType) -> HostData {
    fn v<T: HostElement>(t: &Tensor) -> HostData {
        T::wrap(tensor_view::<T>(t).unwrap().to_owned())
    }
    match dtype {
        DType::U8 => v::<u8>(t),
        DType::U16 => v::<u16>(t),
        DType::I32 => v::<i32>(t),
        DType::I64 => v::<i64>(t),
        DType::F16 => v::<bridge_core::f16>(t),
        DType::BF16 => v::<bridge_core::bf16>(t),
        DType::F32 => v::<f32>(t),
        DType::F64 => v::<f64>(t),
    }
}

#[test]
fn planner_sees_zero_copy_edges() {
    let (reg, _) = registry();
    assert!(reg.topology().has_device(Device::TorchCpu));
    let r = reg
        .plan(
            MemoryType::Host,
            Device::Cpu,
            MemoryType::Torch,
            Device::TorchCpu,
        )
        .unwrap();
    assert_eq!(r.kind(), TransferKind::ZeroCopy);
    let r = reg
        .plan(
            MemoryType::Torch,
            Device::TorchCpu,
            MemoryType::Host,
            Device::Cpu,
        )
        .unwrap();
    assert!(r.is_zero_copy());
}

#[test]
fn contiguous_round_trip_every_dtype_is_zero_copy() {
    let (reg, rec) = registry();
    for dtype in DType::ALL {
        let data = random_host(dtype, &[3, 5, 7]);
        let original = data.clone();
        let base = bridge_core::with_host_data!(&data, a => a.as_ptr() as usize);
        let t = to_torch(&reg, Array::from_host(data));
        let data = original;
        assert_eq!(t.memory_type(), MemoryType::Torch);
        assert_eq!(t.device(), Device::TorchCpu);
        assert_eq!((t.shape(), t.dtype()), (&[3usize, 5, 7][..], dtype));
        let storage = t.storage::<TorchStorage>().unwrap();
        assert!(storage.aliases_ndarray());
        storage.with_tensor(|tensor| {
            assert_eq!(dtype_of(tensor).unwrap(), dtype);
            assert_eq!(tensor.size(), vec![3, 5, 7]);
            assert_eq!(
                tensor.data_ptr() as usize,
                base,
                "{dtype}: tensor aliases the ndarray"
            );
            assert!(same_bits(&read_tensor(tensor, dtype), &data), "{dtype}");
        });
        let back = to_host(&reg, t);
        let back = back.host().unwrap();
        assert!(same_bits(back, &data), "{dtype}");
        let back_ptr = bridge_core::with_host_data!(back, a => a.as_ptr() as usize);
        assert_eq!(back_ptr, base, "{dtype}: the same buffer came back");
        let records = rec.take();
        assert_eq!(records.len(), 2);
        for r in &records {
            assert_eq!(r.bytes_moved, 0, "{dtype}: {}", r.route);
            assert_eq!(r.route.kind(), TransferKind::ZeroCopy);
        }
    }
}

#[test]
fn strided_layouts_alias_without_copy() {
    let (reg, rec) = registry();
    let a = random(&[6, 8], |r| r.random::<f32>());
    // Transposed (Fortran order) and a step slice: non-negative strides, zero-copy.
    for view in [
        a.clone().reversed_axes(),
        a.clone().slice_move(s![.., ..;3]).into_dyn(),
        a.clone().slice_move(s![1..5;2, 2..]).into_dyn(),
    ] {
        assert!(!view.is_standard_layout());
        let strides = view.strides().to_vec();
        let t = to_torch(&reg, Array::from_ndarray(view.clone()));
        let tensor = tensor_of(&t).unwrap();
        assert_eq!(
            tensor.stride(),
            strides.iter().map(|&s| s as i64).collect::<Vec<_>>()
        );
        assert_eq!(tensor_view::<f32>(&tensor).unwrap(), view.view());
        drop(tensor);
        let back = to_host(&reg, t).into_ndarray::<f32>().unwrap();
        assert_eq!(back, view);
        assert_eq!(back.strides(), &strides[..], "layout preserved");
        let records = rec.take();
        assert!(records.iter().all(|r| r.bytes_moved == 0), "{records:?}");
    }
}

#[test]
fn negative_strides_take_the_copy_path_every_dtype() {
    let (reg, rec) = registry();
    for dtype in DType::ALL {
        let data = random_host(dtype, &[4, 9]);
        let mut flipped = data.clone();
        bridge_core::with_host_data!(&mut flipped, a => a.invert_axis(Axis(1)));
        assert!(flipped.strides().iter().any(|&s| s < 0));
        let nbytes = 36 * dtype.size_of() as u64;
        let t = to_torch(&reg, Array::from_host(flipped.clone()));
        let tensor = tensor_of(&t).unwrap();
        assert!(tensor.is_contiguous());
        assert!(same_bits(&read_tensor(&tensor, dtype), &flipped), "{dtype}");
        drop(tensor);
        let back = to_host(&reg, t);
        assert!(same_bits(back.host().unwrap(), &flipped), "{dtype}");
        assert!(back.host().unwrap().is_standard_layout());
        let records = rec.take();
        assert_eq!(records[0].bytes_moved, nbytes, "{dtype}: host→torch copied");
        assert_eq!(
            records[1].bytes_moved, 0,
            "{dtype}: the copy is handed back"
        );
    }
}

#[test]
fn writes_through_the_tensor_are_visible_in_the_ndarray() {
    let (reg, rec) = registry();
    let a = ArrayD::<f32>::zeros(IxDyn(&[4, 4]));
    let mut t = to_torch(&reg, Array::from_ndarray(a));
    {
        let tensor = t.storage_mut::<TorchStorage>().unwrap().tensor_mut();
        let _ = tensor.fill_(3.5);
        let mut row = tensor.narrow(0, 1, 1);
        row.copy_(&Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([1, 4]));
    }
    let back = to_host(&reg, t).into_ndarray::<f32>().unwrap();
    assert_eq!(
        back.index_axis(Axis(0), 0)
            .iter()
            .copied()
            .collect::<Vec<f32>>(),
        vec![3.5; 4]
    );
    assert_eq!(
        back.index_axis(Axis(0), 1)
            .iter()
            .copied()
            .collect::<Vec<f32>>(),
        vec![1.0, 2.0, 3.0, 4.0]
    );
    assert!(rec.take().iter().all(|r| r.bytes_moved == 0));

    // u16 (torch.uint16, which tch cannot name) is aliased too.
    let u = ArrayD::<u16>::from_elem(IxDyn(&[3]), 65535);
    let mut t = to_torch(&reg, Array::from_ndarray(u));
    let _ = t
        .storage_mut::<TorchStorage>()
        .unwrap()
        .tensor_mut()
        .fill_(40000i64);
    let back = to_host(&reg, t).into_ndarray::<u16>().unwrap();
    assert_eq!(back.as_slice().unwrap(), &[40000, 40000, 40000]);
}

#[test]
fn a_kept_tensor_handle_forces_a_copy_and_stays_valid() {
    let (reg, rec) = registry();
    let a = random(&[16, 16], |r| r.random::<i64>());
    let t = to_torch(&reg, Array::from_ndarray(a.clone()));
    let mut kept = tensor_of(&t).unwrap();
    let back = to_host(&reg, t).into_ndarray::<i64>().unwrap();
    assert_eq!(back, a);
    let records = rec.take();
    assert_eq!(records[1].bytes_moved, 16 * 16 * 8, "shared buffer: copied");
    // The kept handle still owns the buffer (no dangling) and no longer shares with `back`.
    let _ = kept.fill_(-1i64);
    assert!(tensor_view::<i64>(&kept).unwrap().iter().all(|&v| v == -1));
    assert_eq!(back, a);
}

#[test]
fn tensors_outlive_the_array_they_came_from() {
    let (reg, _) = registry();
    let a = random(&[1000], |r| r.random::<f64>());
    let t = to_torch(&reg, Array::from_ndarray(a.clone()));
    let tensor = bridge_torch::into_tensor(t).unwrap();
    let slice = tensor.narrow(0, 10, 5);
    drop(tensor);
    // Only a torch view of the storage is left; the ndarray is kept alive by its deleter.
    let v = tensor_view::<f64>(&slice).unwrap();
    assert_eq!(
        v.as_slice().unwrap(),
        a.slice(s![10..15]).as_slice().unwrap()
    );
}

#[test]
fn torch_allocated_tensors_are_copied_to_the_host() {
    let (reg, rec) = registry();
    let t = Tensor::arange(12, (Kind::Float, bridge_torch::tch::Device::Cpu))
        .view([3, 4])
        .transpose(0, 1);
    assert!(!t.is_contiguous());
    let arr = bridge_torch::array_from_tensor(t).unwrap();
    assert_eq!(arr.shape(), &[4, 3]);
    let back = to_host(&reg, arr).into_ndarray::<f32>().unwrap();
    let expected = ArrayD::from_shape_fn(IxDyn(&[4, 4 - 1]), |ix| (ix[1] * 4 + ix[0]) as f32);
    assert_eq!(back, expected);
    assert_eq!(rec.take()[0].bytes_moved, 12 * 4);
}

#[test]
fn empty_and_scalar_arrays() {
    let (reg, _) = registry();
    for shape in [vec![0usize], vec![3, 0, 2], vec![]] {
        let a = ArrayD::<bridge_core::bf16>::zeros(IxDyn(&shape));
        let t = to_torch(&reg, Array::from_ndarray(a.clone()));
        assert_eq!(t.shape(), &shape[..]);
        assert_eq!(bridge_core::Storage::nbytes(t.storage_dyn()), a.len() * 2);
        let back = to_host(&reg, t)
            .into_ndarray::<bridge_core::bf16>()
            .unwrap();
        assert_eq!(back, a);
    }
}

#[test]
fn dtype_errors_are_typed() {
    let b = Tensor::from_slice(&[true, false]);
    assert!(matches!(
        bridge_torch::array_from_tensor(b),
        Err(BridgeError::Unsupported(m)) if m.contains("bool")
    ));
    let c = Tensor::from_slice(&[1i16, 2]);
    assert!(matches!(dtype_of(&c), Err(BridgeError::Unsupported(_))));
    let f = Tensor::from_slice(&[1.0f32]);
    assert!(matches!(
        tensor_view::<f64>(&f),
        Err(BridgeError::DTypeMismatch {
            expected: DType::F64,
            found: DType::F32,
            ..
        })
    ));
    assert!(matches!(
        bridge_torch::kind_of(DType::U16),
        Err(BridgeError::UnsupportedDType { .. })
    ));
    let host = Array::from_ndarray(ArrayD::<u8>::zeros(IxDyn(&[1])));
    assert!(tensor_of(&host).is_err());
}

#[test]
fn backend_reports_devices_and_host_memory() {
    use bridge_core::backend::Backend;
    use bridge_core::memory::MemoryInfo;
    let b = bridge_torch::backend();
    let devs = b.devices().unwrap();
    assert_eq!(devs[0].device, Device::TorchCpu);
    assert_eq!(devs.len(), 1 + bridge_torch::cuda_device_count());
    let m = b.memory_stats(Device::TorchCpu).unwrap();
    assert!(m.total > 0);
    assert_eq!(b.release_pool(Device::TorchCpu), 0);
    assert!(b.memory_stats(Device::Cpu).is_err());
}

#[test]
fn a_replaced_tensor_is_what_comes_back() {
    let (reg, rec) = registry();
    let a = ArrayD::<i32>::zeros(IxDyn(&[2, 2]));
    let mut t = to_torch(&reg, Array::from_ndarray(a));
    *t.storage_mut::<TorchStorage>().unwrap().tensor_mut() =
        Tensor::from_slice(&[1i32, 2, 3, 4]).view([2, 2]);
    let back = to_host(&reg, t).into_ndarray::<i32>().unwrap();
    assert_eq!(back.as_slice().unwrap(), &[1, 2, 3, 4]);
    assert_eq!(rec.take()[1].bytes_moved, 16, "the replacement was copied");
}

#[test]
fn conversions_from_many_threads_and_drops_elsewhere() {
    let (reg, _) = registry();
    let reg = Arc::new(reg);
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let reg = Arc::clone(&reg);
            std::thread::spawn(move || {
                for j in 0..50 {
                    let a = ArrayD::from_elem(IxDyn(&[64, 3]), (i * 100 + j) as f64);
                    let t = to_torch(&reg, Array::from_ndarray(a.clone()));
                    // Hand a tensor handle to another thread and drop the array here: the
                    // storage (and the ndarray) is released on whichever thread lets go last.
                    let tensor = tensor_of(&t).unwrap();
                    let other =
                        std::thread::spawn(move || tensor_view::<f64>(&tensor).unwrap().sum());
                    let back = to_host(&reg, t).into_ndarray::<f64>().unwrap();
                    assert_eq!(back, a);
                    assert_eq!(other.join().unwrap(), a.sum());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
