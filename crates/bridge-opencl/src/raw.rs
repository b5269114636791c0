//! The only module of the crate with `unsafe` code: thin wrappers over the OpenCL calls that
//! `opencl3` exposes as `unsafe`. Every wrapper is safe to call because it either copies
//! synchronously (blocking transfers), or takes ownership of the host memory it hands to the
//! driver and keeps it alive until the command's event has completed ([`InFlight`]).
//!
//! Errors are returned as raw OpenCL status codes; callers map them with
//! [`crate::error::cl_error`].

use std::ffi::c_void;
use std::ptr;

use opencl3::command_queue::CL_QUEUE_PROFILING_ENABLE;
use opencl3::command_queue::{
    CommandQueue, enqueue_copy_buffer, enqueue_fill_buffer, enqueue_nd_range_kernel,
    enqueue_read_buffer, enqueue_write_buffer,
};
use opencl3::context::Context;
use opencl3::event::Event;
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer, CL_MEM_READ_WRITE};
use opencl3::types::{CL_BLOCKING, CL_NON_BLOCKING, cl_device_id, cl_event, cl_mem};

/// A raw OpenCL status code.
pub(crate) type Code = i32;

/// Create a read-write buffer of `bytes` bytes (not zero) in `ctx`, without a host pointer.
pub(crate) fn create_buffer(ctx: &Context, bytes: usize) -> Result<Buffer<u8>, Code> {
    // SAFETY: `host_ptr` is null and the flags name no host pointer (no USE/COPY/ALLOC_HOST_PTR),
    // which is a valid combination; `ctx` is a live context. Invalid sizes are reported by
    // OpenCL as error codes.
    unsafe { Buffer::<u8>::create(ctx, CL_MEM_READ_WRITE, bytes, ptr::null_mut()) }.map_err(|e| e.0)
}

/// Create a sub-buffer of `parent` covering `origin..origin + len` bytes.
pub(crate) fn create_sub_buffer(
    parent: &Buffer<u8>,
    origin: usize,
    len: usize,
) -> Result<Buffer<u8>, Code> {
    // SAFETY: `parent` is a live buffer; OpenCL checks the region against the parent's size and
    // the device's base-address alignment and reports violations as error codes. The sub-buffer
    // holds its own reference on the parent's storage.
    unsafe { parent.create_sub_buffer(CL_MEM_READ_WRITE, origin, len) }.map_err(|e| e.0)
}

/// Create an in-order command queue for `device` in `ctx`, with event profiling (the device's
/// own start and end time of each command: [`profiled_ns`]).
pub(crate) fn create_queue(ctx: &Context, device: cl_device_id) -> Result<CommandQueue, Code> {
    // SAFETY: the caller passes a device that is a member of `ctx` (the context is created from
    // the platform's device list, which contains it); OpenCL checks this again
    // (CL_INVALID_DEVICE). Properties: in-order (no out-of-order flag), profiling enabled (a
    // property every OpenCL 1.x device supports).
    #[allow(deprecated)]
    let q = unsafe { CommandQueue::create(ctx, device, CL_QUEUE_PROFILING_ENABLE) };
    q.map_err(|e| e.0)
}

/// The device time of a completed command, `CL_PROFILING_COMMAND_START..END` in nanoseconds;
/// `None` where the event has no profiling data (a user event, a queue without profiling, or a
/// command that failed).
pub(crate) fn profiled_ns(event: &Event) -> Option<u64> {
    let start = event.profiling_command_start().ok()?;
    let end = event.profiling_command_end().ok()?;
    Some(end.saturating_sub(start))
}

fn wrap(event: cl_event) -> Event {
    Event::new(event)
}

/// Copy `data` into `mem` at byte `offset`, returning when the copy is complete.
pub(crate) fn write_blocking(
    queue: &CommandQueue,
    mem: cl_mem,
    offset: usize,
    data: &[u8],
) -> Result<(), Code> {
    if data.is_empty() {
        return Ok(());
    }
    // SAFETY: the write is blocking, so the driver has finished reading `data` (a live slice
    // of `data.len()` bytes) when the call returns. `mem` is a live buffer (the caller holds
    // it); out-of-range offsets are rejected by OpenCL with CL_INVALID_VALUE.
    let ev = unsafe {
        enqueue_write_buffer(
            queue.get(),
            mem,
            CL_BLOCKING,
            offset,
            data.len(),
            data.as_ptr().cast::<c_void>(),
            0,
            ptr::null(),
        )
    }?;
    wrap(ev);
    Ok(())
}

/// Copy `out.len()` bytes from `mem` at byte `offset` into `out`, returning when complete.
pub(crate) fn read_blocking(
    queue: &CommandQueue,
    mem: cl_mem,
    offset: usize,
    out: &mut [u8],
) -> Result<(), Code> {
    if out.is_empty() {
        return Ok(());
    }
    // SAFETY: the read is blocking, so the driver has finished writing `out` (a live, exclusively
    // borrowed slice of `out.len()` bytes) when the call returns. Out-of-range offsets are
    // rejected by OpenCL.
    let ev = unsafe {
        enqueue_read_buffer(
            queue.get(),
            mem,
            CL_BLOCKING,
            offset,
            out.len(),
            out.as_mut_ptr().cast::<c_void>(),
            0,
            ptr::null(),
        )
    }?;
    wrap(ev);
    Ok(())
}

/// Enqueue a device-side copy of `len` bytes; returns its event (no host memory involved).
pub(crate) fn copy(
    queue: &CommandQueue,
    src: cl_mem,
    dst: cl_mem,
    src_offset: usize,
    dst_offset: usize,
    len: usize,
) -> Result<Event, Code> {
    // SAFETY: no host pointers are involved; both memory objects are live (the caller holds
    // them until the returned event completes) and OpenCL validates the ranges and overlap.
    let ev = unsafe {
        enqueue_copy_buffer(
            queue.get(),
            src,
            dst,
            src_offset,
            dst_offset,
            len,
            0,
            ptr::null(),
        )
    }?;
    Ok(wrap(ev))
}

/// Enqueue a fill of `len` bytes at `offset` with a repeated `pattern` (1, 2, 4, 8... bytes;
/// `offset` and `len` multiples of its size); returns its event.
pub(crate) fn fill(
    queue: &CommandQueue,
    mem: cl_mem,
    pattern: &[u8],
    offset: usize,
    len: usize,
) -> Result<Event, Code> {
    // SAFETY: OpenCL copies the pattern (a live slice of `pattern.len()` bytes) when the command
    // is enqueued; `mem` is live until the caller has waited for the event; invalid sizes are
    // reported as error codes.
    let ev = unsafe {
        enqueue_fill_buffer(
            queue.get(),
            mem,
            pattern.as_ptr().cast::<c_void>(),
            pattern.len(),
            offset,
            len,
            0,
            ptr::null(),
        )
    }?;
    Ok(wrap(ev))
}

/// A non-blocking transfer in flight. Owns the host memory the driver reads from or writes
/// into and waits for the command when dropped, so that memory is never freed early.
pub(crate) struct InFlight {
    event: Option<Event>,
    host: Vec<u8>,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "InFlight({} bytes, pending: {})",
            self.host.len(),
            self.event.is_some()
        )
    }
}

impl InFlight {
    /// A transfer that has nothing to wait for.
    pub(crate) fn done(host: Vec<u8>) -> Self {
        InFlight { event: None, host }
    }

    /// A device-only command (kernel launch, device copy) in flight.
    pub(crate) fn from_event(event: Event) -> Self {
        InFlight {
            event: Some(event),
            host: Vec::new(),
        }
    }

    /// Wait for completion and give the host memory back, with the command's device time
    /// ([`profiled_ns`]; `None` for a command with nothing to wait for or without profiling
    /// data).
    pub(crate) fn wait_profiled(mut self) -> Result<(Vec<u8>, Option<u64>), Code> {
        let mut ns = None;
        // On error the command failed or was aborted; the driver no longer uses the memory
        // once the event is terminated, which `wait` guarantees.
        if let Some(ev) = self.event.take() {
            ev.wait().map_err(|e| e.0)?;
            ns = profiled_ns(&ev);
        }
        Ok((std::mem::take(&mut self.host), ns))
    }

    /// True when the command has completed (successfully or not).
    pub(crate) fn is_complete(&self) -> Result<bool, Code> {
        match &self.event {
            None => Ok(true),
            Some(ev) => {
                let status = ev.command_execution_status().map_err(|e| e.0)?;
                // CL_COMPLETE is 0; negative values are errors (also terminal).
                Ok(status.0 <= 0)
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(ev) = self.event.take() {
            // Keep `host` alive until the driver is done with it; errors cannot be reported here.
            let _ = ev.wait();
        }
    }
}

/// Start a non-blocking write of `data` into `mem` at `offset`.
pub(crate) fn write_async(
    queue: &CommandQueue,
    mem: cl_mem,
    offset: usize,
    data: Vec<u8>,
) -> Result<InFlight, Code> {
    if data.is_empty() {
        return Ok(InFlight::done(data));
    }
    // SAFETY: `data`'s heap allocation is moved into the returned `InFlight`, which never touches
    // it and does not release it before the event has completed (`wait` or `Drop`). Moving a
    // `Vec` does not move its heap buffer, so the pointer stays valid.
    let ev = unsafe {
        enqueue_write_buffer(
            queue.get(),
            mem,
            CL_NON_BLOCKING,
            offset,
            data.len(),
            data.as_ptr().cast::<c_void>(),
            0,
            ptr::null(),
        )
    }?;
    let event = wrap(ev);
    flush(queue)?;
    Ok(InFlight {
        event: Some(event),
        host: data,
    })
}

/// Start a non-blocking read of `len` bytes from `mem` at `offset` into a new host vector.
pub(crate) fn read_async(
    queue: &CommandQueue,
    mem: cl_mem,
    offset: usize,
    len: usize,
) -> Result<InFlight, Code> {
    let mut host = vec![0u8; len];
    if len == 0 {
        return Ok(InFlight::done(host));
    }
    // SAFETY: as for `write_async`: the vector's heap buffer (of `len` initialised bytes) is
    // owned by the returned `InFlight`, which does not read, move or free it before the event
    // has completed. The driver is the only writer meanwhile.
    let ev = unsafe {
        enqueue_read_buffer(
            queue.get(),
            mem,
            CL_NON_BLOCKING,
            offset,
            len,
            host.as_mut_ptr().cast::<c_void>(),
            0,
            ptr::null(),
        )
    }?;
    let event = wrap(ev);
    flush(queue)?;
    Ok(InFlight {
        event: Some(event),
        host,
    })
}

/// Submit queued commands to the device.
pub(crate) fn flush(queue: &CommandQueue) -> Result<(), Code> {
    queue.flush().map_err(|e| e.0)
}

/// Wait for every command of the queue.
pub(crate) fn finish(queue: &CommandQueue) -> Result<(), Code> {
    queue.finish().map_err(|e| e.0)
}

/// Set a buffer argument.
pub(crate) fn set_arg_mem(kernel: &Kernel, index: u32, mem: cl_mem) -> Result<(), Code> {
    // SAFETY: clSetKernelArg copies `size_of::<cl_mem>()` bytes from a pointer to a live
    // `cl_mem` handle, which is the documented form of a buffer argument. OpenCL validates the
    // index, the size and the memory object.
    unsafe { kernel.set_arg(index, &mem) }.map_err(|e| e.0)
}

/// Set a scalar argument from a plain-old-data value.
pub(crate) fn set_arg_scalar<T: bytemuck::Pod>(
    kernel: &Kernel,
    index: u32,
    value: &T,
) -> Result<(), Code> {
    // SAFETY: clSetKernelArg copies `size_of::<T>()` bytes from a live `T` (plain old data, no
    // padding or pointers). A size that does not match the kernel's parameter is rejected with
    // CL_INVALID_ARG_SIZE.
    unsafe { kernel.set_arg(index, value) }.map_err(|e| e.0)
}

/// Reserve `bytes` of local memory for a `__local` pointer argument.
pub(crate) fn set_arg_local(kernel: &Kernel, index: u32, bytes: usize) -> Result<(), Code> {
    // SAFETY: a null value with a non-zero size is the documented way to size a local-memory
    // argument; OpenCL validates index and size.
    unsafe { kernel.set_arg_local_buffer(index, bytes) }.map_err(|e| e.0)
}

/// Enqueue an ND-range launch; `local`, when given, has as many entries as `global`.
pub(crate) fn launch(
    queue: &CommandQueue,
    kernel: &Kernel,
    global: &[usize],
    local: Option<&[usize]>,
) -> Result<Event, Code> {
    let local_ptr = local.map_or(ptr::null(), |l| l.as_ptr());
    // SAFETY: `global` (and `local`, when present) point to `global.len()` live `size_t` values
    // (the caller checks the lengths agree and are 1..=3); the global offset is null (allowed).
    // The buffers bound as arguments are kept alive by the caller until the event completes.
    let ev = unsafe {
        enqueue_nd_range_kernel(
            queue.get(),
            kernel.get(),
            global.len() as u32,
            ptr::null(),
            global.as_ptr(),
            local_ptr,
            0,
            ptr::null(),
        )
    }?;
    Ok(wrap(ev))
}

/// Wait for an event.
pub(crate) fn wait(event: &Event) -> Result<(), Code> {
    event.wait().map_err(|e| e.0)
}

/// A user event of `ctx` (tests: a command whose completion, or failure, the test decides).
#[cfg(test)]
pub(crate) fn user_event(ctx: &Context) -> Result<Event, Code> {
    opencl3::event::create_user_event(ctx.get()).map(wrap)
}

/// Set a user event's status: `CL_COMPLETE` (0) or a negative error code (tests).
#[cfg(test)]
pub(crate) fn set_user_event_status(event: &Event, status: Code) -> Result<(), Code> {
    opencl3::event::set_user_event_status(event.get(), status)
}
