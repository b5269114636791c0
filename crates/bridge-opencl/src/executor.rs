//! [`OpenClExecutor`]: the [`Executor`] of an OpenCL device (raw buffer: [`ClBuffer`]).
//!
//! **Non-blocking launches.** [`Executor::launch`] sets the arguments of a cached kernel,
//! enqueues it on the device's in-order queue, flushes the queue and returns: the kernel runs
//! while the host goes on. Each launch's [`Pending`](crate::Pending) token — its event and a clone of every
//! buffer it is given — is kept in the device's list of launches in flight (one list
//! per device and backend instance, shared by every executor of the device and their clones)
//! until a wait collects it:
//!
//! * [`Executor::read`], [`Executor::read_at`] and [`Executor::synchronize`] wait for every
//!   launch in the list (then read, in queue order after them);
//! * a launch collects the launches that have already completed, and waits for the oldest
//!   while more than [`MAX_IN_FLIGHT`] are in flight, so the list (and the memory it keeps)
//!   stays bounded;
//! * an allocation that runs out of device memory waits for them all, which gives their
//!   buffers back to the pool, and tries once more.
//!
//! Fills and reads are blocking commands on the same in-order queue, so they run after the
//! launches enqueued before them. [`Executor::upload`] writes its fresh buffer on a second
//! queue of the device (the transfer queue), blocking too: an upload does not wait for the
//! kernels in flight (another thread's batch computes while this one's frames go up), and the
//! launches that use the buffer, enqueued after it returns, see its bytes. A buffer the algorithm drops while a queued kernel
//! uses it stays alive in the launch's token, so the device's pool cannot hand its memory to
//! another allocation (whatever queue would use it) before the kernel has run.
//!
//! **Errors.** A kernel that fails while in flight is reported by the wait that collects it —
//! the next read, synchronize, or a launch that waits for the oldest — as
//! [`bridge_core::BridgeError::Backend`] naming the kernel; it is never dropped. (When two
//! threads share the device, whichever waits first may collect the other's failure.)
//!
//! **Kernel time.** The queue is created with event profiling, and each collected launch adds
//! its `CL_PROFILING_COMMAND_START..END` — the device's own time of the kernel — to the
//! running total of the executor that launched it ([`Executor::kernel_seconds`]; clones share
//! it, [`OpenClExecutor::new`] starts a new one). The pipelines difference it around a run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bridge_core::exec::{Executor, KernelArg, sealed};
use bridge_core::kernel::KernelSource;
use bridge_core::{Array, BridgeError, Device, Result};

use crate::backend::OpenClBackend;
use crate::buffer::{ClBuffer, ClStorage};
pub use crate::launches::MAX_IN_FLIGHT;
use crate::launches::{Launch, Launches};

/// The executor of one OpenCL device on a backend instance (in a program, the one
/// `arraybridge::registry()` owns).
///
/// Each kernel is built once per backend, device, source, options and entry point and kept
/// (its arguments set under a lock, then enqueued); a launch returns once its kernel is
/// enqueued and flushed (see the [module docs](self) for when it is waited for, its errors and
/// its time).
#[derive(Debug, Clone)]
pub struct OpenClExecutor {
    cl: Arc<OpenClBackend>,
    device: Device,
    fp64: bool,
    cpu: bool,
    /// The device's launches in flight (shared by every executor of the device).
    launches: Arc<Launches>,
    /// Device nanoseconds of this executor's (and its clones') collected launches.
    clock: Arc<AtomicU64>,
}

impl OpenClExecutor {
    /// The executor of `device` (`opencl:N`) on `cl`: what it knows of the device (doubles,
    /// type) is asked once per device and backend instance and kept there
    /// ([`OpenClBackend::executors_created`]); its queue, pool and programs are the backend's.
    /// [`bridge_core::BridgeError::BackendUnavailable`] / `UnknownDevice` without the device.
    pub fn new(cl: Arc<OpenClBackend>, device: Device) -> Result<Self> {
        let info = cl.executor_info(device)?;
        let launches = cl.launches(device);
        Ok(OpenClExecutor {
            cl,
            device,
            fp64: info.fp64,
            cpu: info.cpu,
            launches,
            clock: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The same executor, telling its users that the device has no doubles
    /// ([`Executor::has_fp64`] false): the float32 paths that devices without `cl_khr_fp64`
    /// take, run on one that has it (to test and compare them). Kernels that need doubles are
    /// still built if asked for; the algorithms then choose their float32 ones.
    pub fn without_fp64(mut self) -> Self {
        self.fp64 = false;
        self
    }

    /// The executor of the device `buffer` lives on, on the backend instance that allocated it
    /// (the array carries its device: no process-wide lookup).
    /// [`bridge_core::BridgeError::BackendUnavailable`] when that backend instance has been
    /// dropped while the buffer lived on.
    pub fn of_buffer(buffer: &ClBuffer) -> Result<Self> {
        let device = buffer.state.device();
        let inner = buffer
            .state
            .backend
            .upgrade()
            .and_then(|b| b.downcast::<crate::backend::Inner>().ok())
            .ok_or_else(|| {
            bridge_core::BridgeError::unavailable(
                "opencl",
                format!(
                    "the OpenCL backend instance that allocated this array on {device} has been \
                     dropped; keep it (or the registry holding it) alive while its arrays are used"
                ),
            )
        })?;
        Self::new(Arc::new(OpenClBackend { inner }), device)
    }

    /// The executor of the device `array` lives on ([`Self::of_buffer`]); `Unsupported` for an
    /// array that is not OpenCL memory.
    pub fn of_array(array: &Array) -> Result<Self> {
        Self::of_buffer(OpenClBackend::buffer(array)?)
    }

    /// The backend instance.
    pub fn backend(&self) -> &Arc<OpenClBackend> {
        &self.cl
    }

    /// How many launches of the device are in flight: enqueued, and not yet collected by a
    /// wait (at most [`MAX_IN_FLIGHT`] once a launch returns).
    pub fn launches_in_flight(&self) -> usize {
        self.launches.len()
    }

    /// `f`, and once more after every launch in flight was collected (their buffers back in
    /// the pool) when it runs out of device memory. A launch that failed, found while
    /// collecting them (perhaps another thread's), is this call's error, never an
    /// out-of-memory one: whoever retries out-of-memory by splitting its work must not take
    /// a kernel's failure for its own (a wait that reports a failed kernel as
    /// `CL_OUT_OF_RESOURCES`, as NVIDIA's OpenCL does for an illegal address, reads as out of
    /// memory).
    fn retry_oom<T>(&self, f: impl Fn() -> Result<T>) -> Result<T> {
        match f() {
            Err(e) if e.is_oom() && self.launches.len() > 0 => {
                self.launches.drain().map_err(|k| {
                    BridgeError::backend(
                        self.device.to_string(),
                        None,
                        format!(
                            "a kernel launched earlier on this device failed (found while an \
                             allocation waited for the launches in flight): {k}"
                        ),
                    )
                })?;
                f()
            }
            r => r,
        }
    }
}

impl sealed::Sealed for OpenClExecutor {}

impl Executor for OpenClExecutor {
    type Buffer = ClBuffer;

    fn device(&self) -> Device {
        self.device
    }

    fn has_fp64(&self) -> bool {
        self.fp64
    }

    fn is_cpu(&self) -> bool {
        self.cpu
    }

    fn upload(&self, bytes: &[u8]) -> Result<ClBuffer> {
        let buf = self.retry_oom(|| self.cl.alloc(self.device, bytes.len().max(4)))?;
        if !bytes.is_empty() {
            // a fresh buffer: on the transfer queue, not behind the kernels in flight
            buf.write_fresh(0, bytes)?;
        }
        self.cl.count_upload(self.device, bytes.len());
        Ok(buf)
    }

    fn alloc(&self, bytes: usize) -> Result<ClBuffer> {
        self.retry_oom(|| self.cl.alloc(self.device, bytes.max(4)))
    }

    fn zeroed(&self, bytes: usize) -> Result<ClBuffer> {
        self.retry_oom(|| self.cl.alloc_zeroed(self.device, bytes.max(4)))
    }

    fn launch(
        &self,
        program: &'static KernelSource,
        opts: &[&str],
        entry: &str,
        global: &[usize],
        local: &[usize],
        args: &[KernelArg<'_, ClBuffer>],
    ) -> Result<()> {
        let kernel = self.cl.cached_kernel(self.device, program, opts, entry)?;
        let mut k = kernel.lock().unwrap_or_else(|p| p.into_inner());
        for (i, a) in args.iter().enumerate() {
            let i = i as u32;
            let set = match a {
                KernelArg::Buf(b) => k.arg_buffer(i, b).map(|_| ()),
                KernelArg::U32(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::I32(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::U64(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::I64(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::F32(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::F64(v) => k.arg_scalar(i, *v).map(|_| ()),
                KernelArg::Local(bytes) => k.arg_local(i, (*bytes).max(1)).map(|_| ()),
            };
            if let Err(e) = set {
                k.clear_buffers();
                return Err(e);
            }
        }
        let pending = k.enqueue(global, Some(local));
        // a kept kernel must not keep its buffers (the launch's token keeps them until the
        // kernel has run; then they go back to the pool when dropped)
        k.clear_buffers();
        let kernel = k.name().to_owned();
        drop(k);
        self.launches.push(Launch {
            pending: pending?,
            kernel,
            clock: Arc::clone(&self.clock),
        })
    }

    fn read(&self, buf: &ClBuffer, bytes: usize) -> Result<Vec<u8>> {
        self.launches.drain()?;
        let mut out = vec![0u8; bytes];
        if bytes > 0 {
            buf.read(0, &mut out)?;
        }
        Ok(out)
    }

    fn read_at(&self, buf: &ClBuffer, offset: usize, bytes: usize) -> Result<Vec<u8>> {
        // checked before anything is allocated, and for empty reads too
        buf.check_range(offset, bytes, "read_at")?;
        self.launches.drain()?;
        let mut out = vec![0u8; bytes];
        if bytes > 0 {
            buf.read(offset, &mut out)?;
        }
        Ok(out)
    }

    fn synchronize(&self) -> Result<()> {
        self.launches.drain()?;
        // and whatever else the queue holds (commands enqueued outside the executor)
        self.cl.synchronize(self.device)
    }

    fn launches_are_async(&self) -> bool {
        true
    }

    /// The device time of this executor's (and its clones') launches collected so far, from
    /// the queue's event profiling: a running total, exact once a wait
    /// ([`Executor::synchronize`], a read) has collected the launches of interest.
    fn kernel_seconds(&self) -> Option<f64> {
        Some(self.clock.load(Ordering::Relaxed) as f64 * 1e-9)
    }

    /// The device's global memory and the pool's figures (OpenCL has no free-memory query).
    fn memory_stats(&self) -> Option<bridge_core::memory::MemoryStats> {
        bridge_core::memory::MemoryInfo::memory_stats(self.cl.as_ref(), self.device).ok()
    }

    fn buffer_of<'a>(&self, array: &'a Array) -> Option<&'a ClBuffer> {
        if array.device() != self.device {
            return None;
        }
        array.storage::<ClStorage>().map(ClStorage::buffer)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use bridge_core::backend::Backend;
    use bridge_core::exec::{Executor, KernelArg};
    use test_support::require::{OPENCL, or_skip};

    use super::*;
    use crate::{Pending, kernels, raw, round_up};

    /// An executor of the first device on a fresh backend, or `None` (skipped) without one.
    fn executor() -> Option<OpenClExecutor> {
        let backend = Arc::new(OpenClBackend::new());
        let probe = match backend.devices() {
            Ok(d) if !d.is_empty() => Ok(d[0].device),
            Ok(_) => Err("no device".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        let device = or_skip(OPENCL, "an OpenCL device", probe)?;
        Some(OpenClExecutor::new(backend, device).expect("the executor of the first device"))
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|f| f.to_ne_bytes()).collect()
    }

    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// A launch in flight whose command has failed (a user event set to an error status): what
    /// a kernel failing on the device after its launch returned looks like to the executor.
    fn failed_launch(e: &OpenClExecutor, name: &str) -> Launch {
        failed_launch_with(e, name, opencl3::error_codes::CL_INVALID_OPERATION)
    }

    /// [`failed_launch`] with the status `code`.
    fn failed_launch_with(e: &OpenClExecutor, name: &str, code: i32) -> Launch {
        let state = e.cl.inner.state(e.device).expect("the device state");
        let ev = raw::user_event(&state.context).expect("a user event");
        raw::set_user_event_status(&ev, code).expect("a failed status");
        Launch {
            pending: Pending::new(raw::InFlight::from_event(ev), None, e.device, |_| Ok(())),
            kernel: name.to_owned(),
            clock: Arc::new(AtomicU64::new(0)),
        }
    }

    /// An allocation out of device memory waits for the launches in flight and tries again; a
    /// launch it finds failed (another thread's kernel, say) is the allocation's error, naming
    /// the kernel, and not an out-of-memory error (which a caller would answer by splitting its
    /// own work, losing the kernel's failure). A user event's failure reaches the wait as
    /// `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST` whatever its status, so this cannot
    /// inject the case the wrapping is for: a driver whose wait reports a failed kernel as
    /// `CL_OUT_OF_RESOURCES` (NVIDIA's OpenCL does so for an illegal address), which alone
    /// would read as out of memory.
    #[test]
    fn a_failed_kernel_found_by_an_allocation_is_not_out_of_memory() {
        use bridge_core::memory::{MemoryInfo, MemoryLimit};
        let Some(e) = executor() else { return };
        e.cl.set_memory_limit(e.device, Some(MemoryLimit::fraction(1e-9).unwrap()))
            .unwrap();
        assert!(e.upload(&[0u8; 1 << 20]).unwrap_err().is_oom());
        e.launches.lock().push_back(failed_launch_with(
            &e,
            "injected_oor",
            opencl3::error_codes::CL_OUT_OF_RESOURCES,
        ));
        let err = e.upload(&[0u8; 1 << 20]).unwrap_err();
        assert!(!err.is_oom(), "{err:?}");
        assert!(err.to_string().contains("injected_oor"), "{err}");
        assert_eq!(e.launches_in_flight(), 0);
        e.cl.set_memory_limit(e.device, None).unwrap();
        assert_eq!(
            e.read(&e.upload(&[7u8; 8]).unwrap(), 8).unwrap(),
            vec![7u8; 8]
        );
    }

    /// A kernel that fails after its launch returned is the error of the next wait (read,
    /// read_at, synchronize), once; the executor goes on working afterwards.
    #[test]
    fn asynchronous_failures_surface_at_the_next_wait() {
        let Some(e) = executor() else { return };
        let buf = e.upload(&bytes(&[1.0, 2.0])).unwrap();
        let waits: [&dyn Fn() -> Result<()>; 3] = [
            &|| e.synchronize(),
            &|| e.read(&buf, 8).map(|_| ()),
            &|| e.read_at(&buf, 4, 4).map(|_| ()),
        ];
        for (i, wait) in waits.iter().enumerate() {
            let name = format!("injected_{i}");
            e.launches.lock().push_back(failed_launch(&e, &name));
            let err = wait().unwrap_err();
            assert!(
                matches!(&err, BridgeError::Backend { message, .. } if message.contains(&name)),
                "{err:?}"
            );
            assert_eq!(e.launches_in_flight(), 0);
            // reported once, not lost and not repeated
            wait().unwrap();
        }
        assert_eq!(floats(&e.read(&buf, 8).unwrap()), vec![1.0, 2.0]);
    }

    /// Launches return before their kernel has run; the list in flight stays bounded; a buffer
    /// dropped while a queued kernel uses it stays valid (its memory is not handed to the next
    /// allocation early); the device time of the collected launches is the executor's total,
    /// shared by its clones and not by another executor of the device.
    #[test]
    fn launches_are_asynchronous_bounded_and_timed() {
        let Some(e) = executor() else { return };
        assert!(e.launches_are_async());
        let other = OpenClExecutor::new(Arc::clone(&e.cl), e.device).unwrap();
        let clone = e.clone();
        let n = 4096usize;
        let y0: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
        let yb = e.upload(&bytes(&y0)).unwrap();
        let rounds = 3 * MAX_IN_FLIGHT;
        for r in 0..rounds {
            // a fresh input each round, dropped at once: the pool would reuse its memory for
            // the next round's if the queued launch did not keep it
            let x: Vec<f32> = (0..n).map(|i| ((i + r) % 7) as f32).collect();
            let xb = e.upload(&bytes(&x)).unwrap();
            let args = [
                KernelArg::U32(n as u32),
                KernelArg::F32(1.0),
                KernelArg::Buf(&xb),
                KernelArg::Buf(&yb),
            ];
            let on = if r % 2 == 0 { &e } else { &clone };
            on.launch(
                &kernels::SAXPY,
                &[],
                "saxpy",
                &[round_up(n, 64)],
                &[64],
                &args,
            )
            .unwrap();
            drop(xb);
            assert!(e.launches_in_flight() <= MAX_IN_FLIGHT);
        }
        let before = e.kernel_seconds().unwrap();
        e.synchronize().unwrap();
        assert_eq!(e.launches_in_flight(), 0);
        let total = e.kernel_seconds().unwrap();
        assert!(total > 0.0 && total >= before, "{before} {total}");
        assert_eq!(clone.kernel_seconds(), Some(total));
        assert_eq!(other.kernel_seconds(), Some(0.0));
        let want: Vec<f32> = (0..n)
            .map(|i| y0[i] + (0..rounds).map(|r| ((i + r) % 7) as f32).sum::<f32>())
            .collect();
        assert_eq!(floats(&e.read(&yb, n * 4).unwrap()), want);
    }
}
