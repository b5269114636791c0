//! The working float type (`f32` or `f64`) of the LoG pipeline.
//!
//! scikit-image runs `blob_log` in float32 for float32 input and in float64 otherwise; every
//! intermediate result is rounded to the working type exactly where NumPy rounds it. [`Real`]
//! carries the few operations needed to reproduce that.

use std::cell::RefCell;
use std::fmt::{Debug, Display};
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::thread::LocalKey;

/// A working float type: `f32` or `f64` (also an element and a scalar argument of the device
/// kernels).
pub trait Real:
    Copy
    + bridge_core::exec::DeviceElement
    + bridge_core::exec::KernelScalar
    + Send
    + Sync
    + Debug
    + Display
    + Default
    + PartialOrd
    + PartialEq
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + Pooled
{
    /// True for `f32`.
    const IS_F32: bool;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// Round an f64 to this type (round to nearest).
    fn from_f64(v: f64) -> Self;
    /// Widen to f64 (exact).
    fn to_f64(self) -> f64;
    /// Correctly rounded square root in this type.
    fn sqrt(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// True when NaN.
    fn is_nan(self) -> bool;
    /// The slice as f64 values when this type is `f64` (for kernels written for f64 only).
    fn as_f64s(s: &[Self]) -> Option<&[f64]>;
    /// The mutable slice as f64 values when this type is `f64`.
    fn as_f64s_mut(s: &mut [Self]) -> Option<&mut [f64]>;
    /// The slice as f32 values when this type is `f32` (for kernels written for f32 only).
    fn as_f32s(s: &[Self]) -> Option<&[f32]>;
    /// The mutable slice as f32 values when this type is `f32`.
    fn as_f32s_mut(s: &mut [Self]) -> Option<&mut [f32]>;
}

/// An element type of the per-thread buffer pools ([`take_buf`], [`give_buf`]): the working
/// floats and the bytes of raw frames packed for a device.
pub trait Pooled: Copy + 'static {
    /// The value a new buffer is filled with.
    const FILL: Self;
    /// This thread's pool of reusable buffers of this type.
    fn pool() -> &'static LocalKey<RefCell<Vec<Vec<Self>>>>;
}

thread_local! {
    static POOL_F32: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
    static POOL_F64: RefCell<Vec<Vec<f64>>> = const { RefCell::new(Vec::new()) };
    static POOL_U8: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static POOL_U64: RefCell<Vec<Vec<u64>>> = const { RefCell::new(Vec::new()) };
}

macro_rules! pooled {
    ($t:ty, $fill:expr, $pool:ident) => {
        impl Pooled for $t {
            const FILL: Self = $fill;
            fn pool() -> &'static LocalKey<RefCell<Vec<Vec<Self>>>> {
                &$pool
            }
        }
    };
}
pooled!(f32, 0.0, POOL_F32);
pooled!(f64, 0.0, POOL_F64);
pooled!(u8, 0, POOL_U8);
pooled!(u64, 0, POOL_U64);

/// Bytes kept for reuse per thread and type, and buffers. A 2048² frame's f64 cube (14 scales)
/// is 470 MB: bounded by buffer length instead (8 M elements, as before), it was allocated
/// afresh for every frame, and every page of it faulted in again (100 M minor faults, 38% of
/// the CPU time of a 1000-frame 2048² movie). What a thread keeps is what it just used.
const POOL_MAX_BYTES: usize = 1 << 30;
const POOL_MAX_BUFS: usize = 4;

/// A buffer of `len` elements from this thread's pool (contents unspecified: callers overwrite
/// every element they read), or a new zeroed one. Reusing buffers across frames avoids paying
/// page faults and zeroing for every frame of a movie. The pool hands out its smallest buffer
/// that is large enough (best fit), so a small request does not take the large buffer a later
/// large one needs.
pub fn take_buf<T: Pooled>(len: usize) -> Vec<T> {
    let reused = T::pool().with(|p| {
        let mut p = p.borrow_mut();
        let (i, _) = p
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len)
            .min_by_key(|(_, v)| v.capacity())?;
        Some(p.swap_remove(i))
    });
    match reused {
        Some(mut v) => {
            v.resize(len, T::FILL);
            v
        }
        None => vec![T::FILL; len],
    }
}

/// Return a buffer to this thread's pool.
pub fn give_buf<T: Pooled>(v: Vec<T>) {
    let size = std::mem::size_of::<T>();
    T::pool().with(|p| {
        let mut p = p.borrow_mut();
        let held: usize = p.iter().map(|b| b.capacity() * size).sum();
        if p.len() < POOL_MAX_BUFS && held + v.capacity() * size <= POOL_MAX_BYTES {
            p.push(v);
        }
    });
}

impl Real for f32 {
    const IS_F32: bool = true;
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        f32::abs(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    fn as_f64s(_: &[Self]) -> Option<&[f64]> {
        None
    }
    fn as_f64s_mut(_: &mut [Self]) -> Option<&mut [f64]> {
        None
    }
    #[inline(always)]
    fn as_f32s(s: &[Self]) -> Option<&[f32]> {
        Some(s)
    }
    #[inline(always)]
    fn as_f32s_mut(s: &mut [Self]) -> Option<&mut [f32]> {
        Some(s)
    }
}

impl Real for f64 {
    const IS_F32: bool = false;
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn abs(self) -> Self {
        f64::abs(self)
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    #[inline(always)]
    fn as_f64s(s: &[Self]) -> Option<&[f64]> {
        Some(s)
    }
    #[inline(always)]
    fn as_f64s_mut(s: &mut [Self]) -> Option<&mut [f64]> {
        Some(s)
    }
    fn as_f32s(_: &[Self]) -> Option<&[f32]> {
        None
    }
    fn as_f32s_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// `take_buf` hands out the smallest pooled buffer that is large enough, not the first.
    #[test]
    fn take_buf_is_best_fit() {
        // a fresh thread: an empty pool of its own
        std::thread::spawn(|| {
            for cap in [100usize, 10, 50] {
                give_buf(Vec::<f64>::with_capacity(cap));
            }
            let caps = |p: &RefCell<Vec<Vec<f64>>>| {
                let mut c: Vec<usize> = p.borrow().iter().map(Vec::capacity).collect();
                c.sort_unstable();
                c
            };
            assert_eq!(f64::pool().with(caps), vec![10, 50, 100]);
            let a = take_buf::<f64>(20);
            assert_eq!(
                (a.len(), a.capacity()),
                (20, 50),
                "the 50, not the first fit (100)"
            );
            let b = take_buf::<f64>(5);
            assert_eq!(b.capacity(), 10);
            let c = take_buf::<f64>(200);
            assert_eq!(c.len(), 200, "nothing fits: a new buffer");
            assert_eq!(
                f64::pool().with(caps),
                vec![100],
                "the large one is still there"
            );
            let d = take_buf::<f64>(100);
            assert_eq!(d.capacity(), 100);
            assert!(f64::pool().with(caps).is_empty());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_pool_is_bounded_by_bytes_not_by_buffer_length() {
        std::thread::spawn(|| {
            // a 2048² frame's cube of 14 scales: kept and handed out again (no new mapping)
            let big = take_buf::<f64>(14 << 22);
            let at = big.as_ptr();
            give_buf(big);
            let again = take_buf::<f64>(14 << 22);
            assert_eq!(again.as_ptr(), at, "the same buffer is reused");
            give_buf(again);
            // beyond POOL_MAX_BYTES a thread keeps no more
            give_buf(Vec::<f64>::with_capacity(POOL_MAX_BYTES / 8));
            let held: usize = f64::pool().with(|p| p.borrow().iter().map(Vec::capacity).sum());
            assert_eq!(held, 14 << 22);
        })
        .join()
        .unwrap();
    }
}
