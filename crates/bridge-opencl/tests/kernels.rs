#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Portable kernels on OpenCL: the preamble, the program cache, launches, build failures.

mod common;

use std::sync::Arc;

use bridge_core::BridgeError;
use bridge_opencl::{kernels, round_up};
use rand::{Rng, SeedableRng, rngs::StdRng};

#[test]
fn every_portable_kernel_builds_with_every_option_set() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    for src in kernels::ALL {
        for opts in src.option_sets {
            let p = backend.program_from(dev, src, opts).unwrap();
            for entry in src.entry_points {
                p.kernel(entry).unwrap();
            }
        }
    }
}

#[test]
fn saxpy_is_exact() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(7);
    let n = 10_007usize;
    // Small integers: a * x + y is exact whether or not the compiler fuses it.
    let x: Vec<f32> = (0..n)
        .map(|_| rng.random_range(-1000..1000) as f32)
        .collect();
    let y: Vec<f32> = (0..n)
        .map(|_| rng.random_range(-1000..1000) as f32)
        .collect();
    let a = 3.0f32;
    let xb = backend.upload_slice(dev, &x).unwrap();
    let yb = backend.upload_slice(dev, &y).unwrap();
    let p = backend.program_from(dev, &kernels::SAXPY, &[]).unwrap();
    let mut k = p.kernel("saxpy").unwrap();
    k.arg_scalar(0, n as u32).unwrap().arg_scalar(1, a).unwrap();
    k.arg_buffer(2, &xb).unwrap().arg_buffer(3, &yb).unwrap();
    k.launch(&[round_up(n, 64)], Some(&[64])).unwrap();
    let got = yb.read_vec::<f32>().unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| a * x + y).collect();
    assert_eq!(got, want);
    // Non-blocking launch with a token; buffers are kept alive by it.
    let pending = k.enqueue(&[round_up(n, 64)], None).unwrap();
    drop(xb);
    pending.wait().unwrap();
    let got2 = yb.read_vec::<f32>().unwrap();
    assert!(
        got2.iter()
            .zip(&want)
            .zip(&x)
            .all(|((g, w), x)| *g == a * x + w)
    );
}

#[test]
fn block_sum_uses_local_memory_barriers_and_atomics() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(8);
    for (opts, block) in [(&[][..], 256usize), (&["-DBLOCK=64"][..], 64)] {
        let n = 100_003usize;
        let x: Vec<i32> = (0..n).map(|_| rng.random_range(-1000..1000)).collect();
        let xb = backend.upload_slice(dev, &x).unwrap();
        let total = backend.upload_slice(dev, &[0i32]).unwrap();
        let p = backend
            .program_from(dev, &kernels::BLOCK_SUM_I32, opts)
            .unwrap();
        let mut k = p.kernel("block_sum_i32").unwrap();
        k.arg_scalar(0, n as u32)
            .unwrap()
            .arg_buffer(1, &xb)
            .unwrap()
            .arg_buffer(2, &total)
            .unwrap();
        k.launch(&[round_up(n, block)], Some(&[block])).unwrap();
        assert_eq!(
            total.read_vec::<i32>().unwrap(),
            vec![x.iter().sum::<i32>()]
        );
    }
}

#[test]
fn programs_are_cached_by_source_and_options() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let a = backend.program_from(dev, &kernels::SAXPY, &[]).unwrap();
    let b = backend.program_from(dev, &kernels::SAXPY, &[]).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let c = backend
        .program_from(dev, &kernels::SAXPY, &["-DUNUSED=1"])
        .unwrap();
    assert!(!Arc::ptr_eq(&a, &c));
    assert_eq!(
        a.source_hash(),
        bridge_core::kernel::source_hash(kernels::SAXPY.source, &[])
    );
}

#[test]
fn build_failure_surfaces_the_log() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let src = "KERNEL broken(GLOBAL float* x) { x[0] = undefined_identifier_xyz; }";
    let e = backend.program(dev, "broken", src, &[]).unwrap_err();
    match &e {
        BridgeError::KernelCompile {
            kernel,
            device,
            log,
        } => {
            assert_eq!(kernel, "broken");
            assert_eq!(*device, dev);
            assert!(log.contains("undefined_identifier_xyz"), "log: {log}");
        }
        other => panic!("expected KernelCompile, got {other}"),
    }
    assert!(e.to_string().contains("undefined_identifier_xyz"));
    // A failed build is not cached: a second call fails the same way.
    assert!(matches!(
        backend.program(dev, "broken", src, &[]),
        Err(BridgeError::KernelCompile { .. })
    ));
}

#[test]
fn bad_launches_are_typed_errors() {
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let p = backend.program_from(dev, &kernels::SAXPY, &[]).unwrap();
    assert!(matches!(
        p.kernel("nope"),
        Err(BridgeError::InvalidArgument { .. })
    ));
    let mut k = p.kernel("saxpy").unwrap();
    // Wrong scalar size for `uint n`.
    assert!(matches!(
        k.arg_scalar(0, 1u64),
        Err(BridgeError::InvalidArgument { .. })
    ));
    assert!(matches!(
        k.launch(&[], None),
        Err(BridgeError::InvalidArgument { .. })
    ));
    assert!(matches!(
        k.launch(&[64], Some(&[8, 8])),
        Err(BridgeError::InvalidArgument { .. })
    ));
    // Unset arguments are reported by the driver, not a crash.
    let e = k.launch(&[64], None).unwrap_err();
    assert!(matches!(e, BridgeError::Backend { .. }), "{e}");
}

/// The executor passes scalars by value (no upload) and keeps each kernel: the same launch
/// twice with different scalars, and a kernel kept across launches does not keep the buffers
/// of the previous one (they go back to the pool).
#[test]
fn executor_passes_scalars_by_value_and_keeps_kernels() {
    use bridge_core::exec::{Executor, KernelArg};
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let e = bridge_opencl::OpenClExecutor::new(backend.clone(), dev).unwrap();
    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 48.0).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let xb = e.upload(&bytes(&x)).unwrap();
    for a in [2.0f32, -0.5] {
        let yb = e.upload(&bytes(&y)).unwrap();
        let args = [
            KernelArg::U32(n as u32),
            KernelArg::F32(a),
            KernelArg::Buf(&xb),
            KernelArg::Buf(&yb),
        ];
        e.launch(
            &kernels::SAXPY,
            &[],
            "saxpy",
            &[round_up(n, 64)],
            &[64],
            &args,
        )
        .unwrap();
        let out = e.read(&yb, n * 4).unwrap();
        for (i, c) in out.chunks_exact(4).enumerate() {
            let got = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            assert_eq!(got, a * x[i] + y[i], "a = {a}, i = {i}");
        }
    }
    // a scalar of the wrong size is the driver's typed error, not a crash
    let yb = e.upload(&bytes(&y)).unwrap();
    let bad = [
        KernelArg::U32(n as u32),
        KernelArg::F64(2.0),
        KernelArg::Buf(&xb),
        KernelArg::Buf(&yb),
    ];
    let err = e
        .launch(
            &kernels::SAXPY,
            &[],
            "saxpy",
            &[round_up(n, 64)],
            &[64],
            &bad,
        )
        .unwrap_err();
    assert!(
        matches!(err, BridgeError::InvalidArgument { .. }),
        "{err:?}"
    );
    // and the kept kernel still launches correctly after the failed call
    let args = [
        KernelArg::U32(n as u32),
        KernelArg::F32(1.0),
        KernelArg::Buf(&xb),
        KernelArg::Buf(&yb),
    ];
    e.launch(
        &kernels::SAXPY,
        &[],
        "saxpy",
        &[round_up(n, 64)],
        &[64],
        &args,
    )
    .unwrap();
    let out = e.read(&yb, 4).unwrap();
    assert_eq!(
        f32::from_le_bytes([out[0], out[1], out[2], out[3]]),
        x[0] + y[0]
    );
    assert_eq!(backend.executors_created(dev), 1);
}

/// `upload_filled` (the default: the front of the caller's scratch, grown as needed, then one
/// upload): every element arrives, a smaller upload reuses the scratch without growing it, and
/// a failing `fill` is the caller's error with nothing uploaded.
#[test]
fn uploads_filled_in_place_arrive_whole() {
    use bridge_core::exec::{Executor, TypedExecutor};
    let Some((backend, dev)) = common::device() else {
        return;
    };
    let e = bridge_opencl::OpenClExecutor::new(backend.clone(), dev).unwrap();
    let mut scratch = Vec::new();
    for (n, seed) in [(300_001usize, 1u64), (1000, 2)] {
        let want: Vec<u16> = (0..n)
            .map(|j| (j as u64 * 2_654_435_761 + seed) as u16)
            .collect();
        let buf = e
            .upload_filled_elems(n, &mut scratch, |d: &mut [u16]| {
                d.copy_from_slice(&want);
                Ok(())
            })
            .unwrap();
        assert_eq!(
            e.read(buf.raw(), n * 2).unwrap(),
            bytemuck::cast_slice::<u16, u8>(&want)
        );
        assert_eq!(
            scratch.len(),
            300_001usize.div_ceil(4),
            "grown once, then reused"
        );
    }
    let err = e
        .upload_filled_elems::<f32>(10, &mut scratch, |_| {
            Err(BridgeError::invalid_argument("fill", "refused"))
        })
        .unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");
}
