//! Host↔CUDA and CUDA↔CUDA copies.
//!
//! - *Pageable*: one `cuMemcpyHtoD`/`DtoH` straight from/to the ndarray's memory.
//! - *Pinned-staged*: the bytes go through reusable pinned chunks ([`crate::device::Staging`]:
//!   up to 64 MiB, four buffers by default; `ARRAYBRIDGE_STAGING_CHUNK_MB` and
//!   `ARRAYBRIDGE_STAGING_BUFFERS` change them): while the DMA engine copies one chunk, the
//!   host (in parallel threads) fills or drains another. A copy is cut into chunks of about an
//!   eighth of its size (at least 1 MiB; [`Staging::plan`], `ARRAYBRIDGE_STAGING_ADAPT`), so a
//!   64 MiB copy overlaps too. With `ARRAYBRIDGE_HOST_REGISTER_MB` set (0, never, by default),
//!   a host range at least that large is page-locked in place (`cuMemHostRegister`, its
//!   64 KiB-aligned interior; the bytes around it are plain copies) and copied by the DMA
//!   engine straight from or into it: no staging copy, and a download lands in the caller's
//!   (or the new array's) memory directly. A range the driver refuses to lock is staged.
//! - *Peer*: `cuMemcpyPeerAsync` between devices with peer access enabled; otherwise
//!   *pinned-staged* through host memory, device→pinned on the source stream and pinned→device on
//!   the destination stream, chained by events.
//!
//! Non-contiguous host views are gathered into C order first ([`bridge_core::HostData::to_c_bytes`]).
//! All calls here are blocking unless named `_async` (see the completion contract in
//! [`crate::device`]).

use std::mem::MaybeUninit;
use std::sync::Arc;

use bridge_core::convert::TransferKind;
use bridge_core::{Array, BridgeError, DType, HostData, HostElement, Result, dispatch_dtype};
use cudarc::driver::CudaStream;
use rayon::prelude::*;

use crate::buffer::{CudaStorage, storage_of};
use crate::device::{Gpu, Ready, Staging, gpu};
use crate::error;
use crate::ffi::{self, DeviceMem, PinnedMem};

/// How host memory reaches the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostPath {
    /// Directly from/to pageable memory (the driver stages internally).
    Pageable,
    /// Through the device's pinned staging chunks, double-buffered. The default.
    #[default]
    PinnedStaged,
}

impl HostPath {
    /// The transfer kind a route records for this path.
    pub fn kind(self) -> TransferKind {
        match self {
            HostPath::Pageable => TransferKind::HostCopy,
            HostPath::PinnedStaged => TransferKind::PinnedStaged,
        }
    }
}

/// Uploads of at most this many bytes go as one plain (driver-staged) copy: below it the pinned
/// chunking costs more than it saves.
pub const DIRECT_COPY_MAX: usize = 1 << 20;

/// The size up to which uploads are one plain copy ([`DIRECT_COPY_MAX`] unless
/// `ARRAYBRIDGE_DIRECT_COPY_KB` says otherwise).
pub fn direct_copy_max() -> usize {
    bridge_core::tuning::usize_or("ARRAYBRIDGE_DIRECT_COPY_KB", DIRECT_COPY_MAX >> 10) << 10
}

/// Copy `src` into `dst` with several threads for large buffers.
fn par_copy(dst: &mut [u8], src: &[u8]) {
    par_fill(ffi::as_uninit(dst), src);
}

/// Copy `src` into possibly-uninitialised `dst` (same length) with several threads for large
/// buffers.
fn par_fill(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    const PIECE: usize = 2 << 20;
    let fill = |d: &mut [MaybeUninit<u8>], s: &[u8]| {
        for (d, s) in d.iter_mut().zip(s) {
            d.write(*s);
        }
    };
    if src.len() <= PIECE {
        fill(dst, src);
    } else {
        dst.par_chunks_mut(PIECE)
            .zip(src.par_chunks(PIECE))
            .for_each(|(d, s)| fill(d, s));
    }
}

/// The part `[a, b)` of a host range of `len` bytes at `addr` that a copy page-locks in place:
/// its aligned interior ([`ffi::aligned_interior`]), when the range has at least
/// [`Staging::register_min`] bytes (`ARRAYBRIDGE_HOST_REGISTER_MB`; 0: never) and a whole
/// aligned page; `None`: stage the copy.
fn registered_part(addr: usize, len: usize) -> Option<(usize, usize)> {
    let min = Staging::get().register_min;
    if min == 0 || len < min {
        return None;
    }
    let (a, b) = ffi::aligned_interior(addr, len);
    (a < b).then_some((a, b))
}

impl Gpu {
    fn sync(&self, stream: &CudaStream) -> Result<()> {
        stream
            .synchronize()
            .map_err(error::op(self.device, "cuStreamSynchronize"))
    }

    /// Copy `src` (host bytes) to `dst[0..]` with its page-aligned interior page-locked in
    /// place ([`ffi::with_registered`]) and sent by the DMA engine straight from there, the
    /// few bytes before and after it as plain copies (blocking), when `src` has at least
    /// [`Staging::register_min`] bytes (`ARRAYBRIDGE_HOST_REGISTER_MB`; 0: never). `false`:
    /// not done (too small, or the driver refused to lock the range): stage it instead.
    fn h2d_registered(&self, dst: &DeviceMem, src: &[u8], stream: &CudaStream) -> Result<bool> {
        let Some((a, b)) = registered_part(src.as_ptr() as usize, src.len()) else {
            return Ok(false);
        };
        // SAFETY: `src` is borrowed for this whole call, so its interior stays allocated.
        let done = unsafe {
            ffi::with_registered(
                (&self.ctx, self.device, stream),
                (src.as_ptr().add(a), b - a),
                true,
                || {
                    ffi::htod_sync(dst, 0, &src[..a], stream)?;
                    // SAFETY: the source is page-locked until `with_registered` returns, which
                    // synchronises the stream first (on error too).
                    ffi::htod_async(dst, a, &src[a..b], stream)?;
                    ffi::htod_sync(dst, b, &src[b..], stream)
                },
            )?
        };
        Ok(done.is_some())
    }

    /// Copy `src[0..dst.len()]` into `dst` with `dst`'s page-aligned interior page-locked in
    /// place and written by the DMA engine straight there (no staging, no second copy), the
    /// few bytes before and after it as plain copies (blocking), when `dst` has at least
    /// [`Staging::register_min`] bytes. `false`: not done; stage it instead.
    fn d2h_registered(
        &self,
        dst: &mut [MaybeUninit<u8>],
        src: &DeviceMem,
        stream: &CudaStream,
    ) -> Result<bool> {
        let Some((a, b)) = registered_part(dst.as_ptr() as usize, dst.len()) else {
            return Ok(false);
        };
        let (head, rest) = dst.split_at_mut(a);
        let (interior, tail) = rest.split_at_mut(b - a);
        let range = (interior.as_ptr().cast::<u8>(), interior.len());
        // SAFETY: `dst` is borrowed for this whole call, so its interior stays allocated.
        let done = unsafe {
            ffi::with_registered((&self.ctx, self.device, stream), range, false, || {
                // SAFETY: `interior` is page-locked and exclusively borrowed until
                // `with_registered` returns, which synchronises the stream first (on error
                // too).
                ffi::dtoh_async(interior, src, a, stream)?;
                ffi::dtoh_sync(head, src, 0, stream)?;
                ffi::dtoh_sync(tail, src, b, stream)
            })?
        };
        Ok(done.is_some())
    }

    /// Copy host bytes to `dst[0..]` through the staging chunks (blocking): chunk `i` is
    /// copied into pinned buffer `i % buffers` while the DMA engine sends the chunks before it.
    pub(crate) fn h2d_staged(
        &self,
        dst: &DeviceMem,
        src: &[u8],
        stream: &CudaStream,
    ) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        if self.h2d_registered(dst, src, stream)? {
            return Ok(());
        }
        let (chunk, nbuf) = Staging::get().plan(src.len());
        let mut bufs = self.take_staging(nbuf)?;
        let run = |bufs: &mut Vec<PinnedMem>| -> Result<()> {
            let mut events: Vec<Option<Ready>> = (0..nbuf).map(|_| None).collect();
            for (i, piece) in src.chunks(chunk).enumerate() {
                let k = i % nbuf;
                if let Some(ev) = events[k].take() {
                    Ready::synchronize(&ev)?;
                }
                let buf = &mut bufs[k];
                par_copy(&mut buf.as_mut_slice()[..piece.len()], piece);
                // SAFETY: buffer `k` is not touched again until `events[k]` (recorded right
                // after this copy) has been synchronised, or the stream is synchronised below.
                unsafe { ffi::htod_async(dst, i * chunk, &buf.as_slice()[..piece.len()], stream)? };
                events[k] = Some(self.record(stream)?);
            }
            Ok(())
        };
        let r = run(&mut bufs);
        // Always drain the stream before the buffers can be reused or freed.
        let s = self.sync(stream);
        self.give_staging(bufs);
        r.and(s)
    }

    /// Copy `src[0..dst.len()]` to host bytes through the staging chunks (blocking): up to
    /// `buffers` chunk copies are in flight on the DMA engine while the host drains the oldest.
    pub(crate) fn d2h_staged(
        &self,
        dst: &mut [MaybeUninit<u8>],
        src: &DeviceMem,
        stream: &CudaStream,
    ) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        if self.d2h_registered(dst, src, stream)? {
            return Ok(());
        }
        let (chunk, nbuf) = Staging::get().plan(dst.len());
        let mut bufs = self.take_staging(nbuf)?;
        let run = |bufs: &mut Vec<PinnedMem>, dst: &mut [MaybeUninit<u8>]| -> Result<()> {
            let chunks: Vec<&mut [MaybeUninit<u8>]> = dst.chunks_mut(chunk).collect();
            let n = chunks.len();
            let lens: Vec<usize> = chunks.iter().map(|c| c.len()).collect();
            let mut events: Vec<Option<Ready>> = (0..nbuf).map(|_| None).collect();
            let enqueue = |i: usize,
                           bufs: &mut Vec<PinnedMem>,
                           events: &mut Vec<Option<Ready>>|
             -> Result<()> {
                let k = i % nbuf;
                // SAFETY: buffer `k` is only read after `events[k]` is synchronised, and the
                // stream is synchronised before the buffers are reused or freed.
                unsafe {
                    ffi::dtoh_async(
                        ffi::as_uninit(&mut bufs[k].as_mut_slice()[..lens[i]]),
                        src,
                        i * chunk,
                        stream,
                    )?
                };
                events[k] = Some(self.record(stream)?);
                Ok(())
            };
            for i in 0..nbuf.min(n) {
                enqueue(i, bufs, &mut events)?;
            }
            for (i, out) in chunks.into_iter().enumerate() {
                let k = i % nbuf;
                if let Some(ev) = events[k].take() {
                    ev.synchronize()?;
                }
                par_fill(out, &bufs[k].as_slice()[..lens[i]]);
                if i + nbuf < n {
                    enqueue(i + nbuf, bufs, &mut events)?;
                }
            }
            Ok(())
        };
        let r = run(&mut bufs, dst);
        let s = self.sync(stream);
        self.give_staging(bufs);
        r.and(s)
    }

    /// Upload raw bytes as a new one-dimensional `u8` CUDA array of `bytes.len()` elements (at
    /// least one), straight from the caller's slice (blocking): no host copy before the
    /// transfer. Below [`DIRECT_COPY_MAX`] bytes one plain copy; above, the pinned staging path.
    pub fn upload_bytes(self: &Arc<Self>, bytes: &[u8]) -> Result<Array> {
        let st = self.upload_storage(bytes)?;
        Array::from_storage(Box::new(st), vec![bytes.len().max(1)], DType::U8)
    }

    /// [`Gpu::upload_bytes`] as a raw [`CudaStorage`] of `bytes.len()` bytes (at least one).
    pub fn upload_storage(self: &Arc<Self>, bytes: &[u8]) -> Result<CudaStorage> {
        let st = CudaStorage::alloc(self, bytes.len().max(1))?;
        let stream = self.stream()?;
        if bytes.len() <= direct_copy_max() {
            ffi::htod_sync(st.mem(), 0, bytes, &stream)?;
        } else {
            self.h2d_staged(st.mem(), bytes, &stream)?;
        }
        Ok(st)
    }

    /// Upload a host array (any layout) as a new CUDA array, by `path` (blocking).
    pub fn upload_with(self: &Arc<Self>, host: &HostData, path: HostPath) -> Result<Array> {
        let bytes = host.to_c_bytes();
        let out = self.alloc(host.dtype(), host.shape())?;
        let st = storage_of(&out)?;
        let stream = self.stream()?;
        match path {
            HostPath::Pageable => ffi::htod_sync(st.mem(), 0, &bytes, &stream)?,
            HostPath::PinnedStaged => self.h2d_staged(st.mem(), &bytes, &stream)?,
        }
        Ok(out)
    }

    /// Upload through the pinned staging buffers (blocking). See [`Gpu::upload_with`].
    pub fn upload(self: &Arc<Self>, host: &HostData) -> Result<Array> {
        self.upload_with(host, HostPath::PinnedStaged)
    }

    /// Non-blocking upload on `stream`: returns the array and a [`Ready`] event the consumer
    /// waits on. The host data may be dropped as soon as this returns: the bytes are copied
    /// once into memory the array keeps until the copy has completed (the CUDA documentation
    /// does not promise that a pageable source is consumed when `cuMemcpyHtoDAsync` returns).
    /// The array must not be read before the event has completed or been waited on.
    pub fn upload_async(
        self: &Arc<Self>,
        host: &HostData,
        stream: &CudaStream,
    ) -> Result<(Array, Arc<Ready>)> {
        let bytes = host.to_c_bytes().into_owned();
        let out = self.alloc(host.dtype(), host.shape())?;
        let st = storage_of(&out)?;
        // SAFETY: `bytes` moves into the array's pending record below and is released only
        // once the event recorded after this copy has completed (or the array is dropped,
        // which waits for it first).
        unsafe { ffi::htod_async(st.mem(), 0, &bytes, stream)? };
        let ready = Arc::new(self.record(stream)?);
        st.set_pending(Arc::clone(&ready));
        st.keep_host(bytes);
        Ok((out, ready))
    }

    /// Download a CUDA array to a new host array in C order, by `path` (blocking).
    pub fn download_with(self: &Arc<Self>, array: &Array, path: HostPath) -> Result<HostData> {
        let st = storage_of(array)?;
        if st.gpu().device() != self.device {
            return Err(BridgeError::invalid_argument(
                "array",
                format!("lives on {}, not {}", st.gpu().device(), self.device),
            ));
        }
        st.wait()?;
        let stream = self.stream()?;
        let shape = array.shape().to_vec();
        dispatch_dtype!(array.dtype(), T => {
            let n = array.len();
            // Not zeroed first: every byte is written by the copy before `set_len`.
            let mut v: Vec<T> = Vec::with_capacity(n);
            {
                let dst = &mut ffi::spare_bytes(&mut v)[..n * std::mem::size_of::<T>()];
                match path {
                    HostPath::Pageable => ffi::dtoh_sync(dst, st.mem(), 0, &stream)?,
                    HostPath::PinnedStaged => self.d2h_staged(dst, st.mem(), &stream)?,
                }
            }
            // SAFETY: the copy above returned Ok, so all `n` elements' bytes were written, and
            // every bit pattern is a valid `T` (Pod).
            unsafe { v.set_len(n) };
            let a = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&shape), v)
                .map_err(|e| BridgeError::shape_mismatch(format!("{shape:?}"), e.to_string(), "download"))?;
            Ok(T::wrap(a))
        })
    }

    /// Download through the pinned staging buffers (blocking).
    pub fn download(self: &Arc<Self>, array: &Array) -> Result<HostData> {
        self.download_with(array, HostPath::PinnedStaged)
    }

    /// Download a CUDA array's bytes (C order) into the caller's buffer, through the pinned
    /// staging chunks (blocking). A buffer reused from one download to the next has its pages
    /// mapped already, so the copy is not slowed by first-touch page faults as a new host
    /// array is (`bench transfer`'s `staged-reused` row against `pinned-staged`). `dst.len()`
    /// must be the array's size in bytes.
    pub fn download_into(self: &Arc<Self>, array: &Array, dst: &mut [u8]) -> Result<()> {
        let st = storage_of(array)?;
        if st.gpu().device() != self.device {
            return Err(BridgeError::invalid_argument(
                "array",
                format!("lives on {}, not {}", st.gpu().device(), self.device),
            ));
        }
        if dst.len() != array.nbytes() {
            return Err(BridgeError::invalid_argument(
                "download_into",
                format!(
                    "the buffer has {} bytes, the {} array {:?} has {}",
                    dst.len(),
                    array.dtype(),
                    array.shape(),
                    array.nbytes()
                ),
            ));
        }
        st.wait()?;
        let stream = self.stream()?;
        self.d2h_staged(ffi::as_uninit(dst), st.mem(), &stream)
    }

    /// Read `dst.len()` raw bytes of a CUDA array starting at byte `offset` (blocking, pageable
    /// path): a part of a buffer without downloading all of it. A range outside the array is
    /// an [`BridgeError::InvalidArgument`].
    pub fn read_bytes(
        self: &Arc<Self>,
        array: &Array,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        let st = storage_of(array)?;
        if offset
            .checked_add(dst.len())
            .is_none_or(|e| e > array.nbytes())
        {
            return Err(BridgeError::invalid_argument(
                "read_bytes",
                format!(
                    "bytes {offset}..{offset}+{} are outside the {}-byte array",
                    dst.len(),
                    array.nbytes()
                ),
            ));
        }
        self.read_storage(st, offset, dst)
    }

    /// Read `dst.len()` raw bytes of a [`CudaStorage`] from byte `offset` (blocking, after the
    /// work pending on it). A range outside the allocation is an
    /// [`BridgeError::InvalidArgument`].
    pub fn read_storage(
        self: &Arc<Self>,
        st: &CudaStorage,
        offset: usize,
        dst: &mut [u8],
    ) -> Result<()> {
        if st.gpu().device() != self.device {
            return Err(BridgeError::invalid_argument(
                "array",
                format!("lives on {}, not {}", st.gpu().device(), self.device),
            ));
        }
        let end = offset.checked_add(dst.len());
        if end.is_none_or(|e| e > st.nbytes) {
            return Err(BridgeError::invalid_argument(
                "read_bytes",
                format!(
                    "bytes {offset}..{offset}+{} are outside the {}-byte array",
                    dst.len(),
                    st.nbytes
                ),
            ));
        }
        if dst.is_empty() {
            return Ok(());
        }
        st.wait()?;
        let stream = self.stream()?;
        ffi::dtoh_sync(ffi::as_uninit(dst), st.mem(), offset, &stream)
    }

    /// A device-to-device copy of a CUDA array on this device (blocking).
    pub fn copy(self: &Arc<Self>, array: &Array) -> Result<Array> {
        let src = storage_of(array)?;
        src.wait()?;
        let out = self.alloc(array.dtype(), array.shape())?;
        let stream = self.stream()?;
        ffi::dtod_async(
            storage_of(&out)?.mem(),
            0,
            src.mem(),
            0,
            array.nbytes(),
            &stream,
        )?;
        self.sync(&stream)?;
        Ok(out)
    }

    /// Copy a CUDA array from another device (or this one) to this device (blocking), by `kind`:
    /// [`TransferKind::PeerCopy`] (`cuMemcpyPeerAsync`; peer access is enabled on first use),
    /// [`TransferKind::PinnedStaged`] (device→pinned host chunks→device, double-buffered, on
    /// two streams chained by events), or [`TransferKind::DeviceCopy`] (same device only).
    /// Both cross-device paths also work with the source on this device, which lets a single
    /// GPU exercise them.
    pub fn copy_from(self: &Arc<Self>, array: &Array, kind: TransferKind) -> Result<Array> {
        let src = storage_of(array)?;
        let src_gpu = Arc::clone(src.gpu());
        let same = src_gpu.device() == self.device;
        src.wait()?;
        let n = array.nbytes();
        match kind {
            TransferKind::PeerCopy => {
                if !same {
                    self.enable_peer(&src_gpu)?;
                }
                let out = self.alloc(array.dtype(), array.shape())?;
                let stream = self.stream()?;
                ffi::peer_async(storage_of(&out)?.mem(), src.mem(), n, &stream)?;
                self.sync(&stream)?;
                Ok(out)
            }
            TransferKind::PinnedStaged => {
                let out = self.alloc(array.dtype(), array.shape())?;
                self.peer_staged(storage_of(&out)?, &src_gpu, src, n)?;
                Ok(out)
            }
            _ if same => self.copy(array),
            other => Err(BridgeError::Unsupported(format!(
                "a {other} transfer from {} to {}",
                src_gpu.device(),
                self.device
            ))),
        }
    }

    /// Enable peer access in both directions between this device and `other` (once).
    pub fn enable_peer(&self, other: &Gpu) -> Result<()> {
        if self
            .peers_enabled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&other.ordinal)
        {
            return Ok(());
        }
        ffi::enable_peer_access(&self.ctx, &other.ctx, self.device)?;
        ffi::enable_peer_access(&other.ctx, &self.ctx, other.device)?;
        self.peers_enabled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(other.ordinal);
        other
            .peers_enabled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.ordinal);
        Ok(())
    }

    fn peer_staged(
        self: &Arc<Self>,
        dst: &CudaStorage,
        src_gpu: &Arc<Gpu>,
        src: &CudaStorage,
        n: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let mut bufs = src_gpu.take_staging(2)?;
        let s_src = src_gpu.stream()?;
        let s_dst = self.stream()?;
        let run = |bufs: &mut Vec<PinnedPair>| -> Result<()> {
            let mut dst_done: [Option<Ready>; 2] = [None, None];
            let mut off = 0usize;
            let mut i = 0usize;
            while off < n {
                let len = Staging::get().chunk.min(n - off);
                let k = i % 2;
                if let Some(ev) = dst_done[k].take() {
                    ev.synchronize()?;
                }
                // SAFETY: buffer `k` is free (its previous upload finished, checked above) and
                // is next touched only by the upload ordered after this download by an event.
                unsafe {
                    ffi::dtoh_async(
                        ffi::as_uninit(&mut bufs[k].as_mut_slice()[..len]),
                        src.mem(),
                        off,
                        &s_src,
                    )?
                };
                let downloaded = src_gpu.record(&s_src)?;
                downloaded.wait_on(&s_dst)?;
                // SAFETY: ordered after the download by the event; `dst_done[k]` guards reuse.
                unsafe { ffi::htod_async(dst.mem(), off, &bufs[k].as_slice()[..len], &s_dst)? };
                dst_done[k] = Some(self.record(&s_dst)?);
                off += len;
                i += 1;
            }
            Ok(())
        };
        let r = run(&mut bufs);
        let a = src_gpu.sync(&s_src);
        let b = self.sync(&s_dst);
        src_gpu.give_staging(bufs);
        r.and(a).and(b)
    }
}

type PinnedPair = PinnedMem;

/// Upload to CUDA device `ordinal` (convenience for [`Gpu::upload`]).
pub fn to_cuda(host: &HostData, ordinal: usize) -> Result<Array> {
    gpu(ordinal)?.upload(host)
}

/// Download any CUDA array to the host (convenience for [`Gpu::download`]).
pub fn to_host(array: &Array) -> Result<HostData> {
    let g = Arc::clone(storage_of(array)?.gpu());
    g.download(array)
}

impl Gpu {
    /// Page-locked host memory of `bytes`, for callers that keep their data pinned.
    pub fn alloc_pinned(&self, bytes: usize) -> Result<PinnedMem> {
        PinnedMem::alloc(&self.ctx, self.device, bytes)
    }

    /// Plain `cuMemcpyHtoD` from pinned memory into `dst` (blocking): `min(len)` bytes.
    pub fn copy_pinned_to_device(
        self: &Arc<Self>,
        dst: &CudaStorage,
        src: &PinnedMem,
    ) -> Result<()> {
        dst.wait()?;
        let n = src.len().min(dst.mem().bytes());
        let s = self.stream()?;
        ffi::htod_sync(dst.mem(), 0, &src.as_slice()[..n], &s)
    }

    /// Plain `cuMemcpyDtoH` from `src` into pinned memory (blocking): `min(len)` bytes.
    pub fn copy_device_to_pinned(
        self: &Arc<Self>,
        dst: &mut PinnedMem,
        src: &CudaStorage,
    ) -> Result<()> {
        src.wait()?;
        let n = dst.len().min(src.mem().bytes());
        let s = self.stream()?;
        ffi::dtoh_sync(
            ffi::as_uninit(&mut dst.as_mut_slice()[..n]),
            src.mem(),
            0,
            &s,
        )
    }

    /// Plain `cuMemcpyDtoD` between two buffers of this device (blocking): `min(len)` bytes.
    pub fn copy_device_to_device(
        self: &Arc<Self>,
        dst: &CudaStorage,
        src: &CudaStorage,
    ) -> Result<()> {
        src.wait()?;
        dst.wait()?;
        let n = dst.mem().bytes().min(src.mem().bytes());
        let s = self.stream()?;
        ffi::dtod_async(dst.mem(), 0, src.mem(), 0, n, &s)?;
        self.sync(&s)
    }
}
