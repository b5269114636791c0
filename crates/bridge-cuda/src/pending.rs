//! Bookkeeping of asynchronous work, written over a small [`Completion`] trait so that its
//! rules are unit-tested without a GPU (the tests below use a fake event).
//!
//! - [`Pending`]: the last use of one device buffer, plus host memory that must outlive it (the
//!   source of an asynchronous upload). A new use replaces the last one only after its stream
//!   was made to wait for it, so one event always covers every earlier use; work on the same
//!   stream is ordered already and needs no wait.
//! - [`Ring`]: small reusable host buffers (pinned, for truly asynchronous small uploads): a
//!   buffer is reused only once the copy that read it has completed; at most `cap` are in
//!   flight, after which the oldest is waited for.

use std::collections::VecDeque;
use std::sync::Arc;

use bridge_core::Result;

/// A marker of queued work (a CUDA event in production, a fake in tests).
pub(crate) trait Completion {
    /// An identifier of the stream the work was queued on.
    fn stream_key(&self) -> usize;
    /// Whether the work has finished (never blocks).
    fn is_complete(&self) -> bool;
    /// Block until the work has finished.
    fn synchronize(&self) -> Result<()>;
}

/// The last pending use of a buffer and host memory to keep until it completes.
pub(crate) struct Pending<E, K = Vec<u8>> {
    last: Option<Arc<E>>,
    keep: Vec<K>,
}

impl<E, K> Default for Pending<E, K> {
    fn default() -> Self {
        Pending {
            last: None,
            keep: Vec::new(),
        }
    }
}

impl<E: Completion, K> Pending<E, K> {
    /// The event a consumer on stream `stream` must wait for before using the buffer: none
    /// when nothing is pending, the work is done, or it was queued on that same stream.
    pub(crate) fn to_wait_on(&self, stream: usize) -> Option<Arc<E>> {
        self.last
            .as_ref()
            .filter(|e| e.stream_key() != stream && !e.is_complete())
            .cloned()
    }

    /// Record a new use. The caller has made the new use's stream wait for
    /// [`Pending::to_wait_on`] (or the use is on the same stream), so the new event completes
    /// after every earlier one.
    pub(crate) fn set(&mut self, event: Arc<E>) {
        self.last = Some(event);
    }

    /// Keep `host` alive until the current last use has completed.
    pub(crate) fn keep(&mut self, host: K) {
        self.keep.push(host);
    }

    /// Drop kept host memory if the last use has completed (cheap; never blocks).
    pub(crate) fn collect(&mut self) {
        if self.last.as_ref().is_none_or(|e| e.is_complete()) {
            self.last = None;
            self.keep.clear();
        }
    }

    /// Block until the last use has completed, then forget it and release kept memory. On an
    /// error the kept memory is retained (the copy may still be reading it).
    pub(crate) fn wait(&mut self) -> Result<()> {
        if let Some(e) = &self.last {
            e.synchronize()?;
        }
        self.last = None;
        self.keep.clear();
        Ok(())
    }

    /// Whether anything is recorded (a use or kept memory).
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.last.is_none() && self.keep.is_empty()
    }
}

/// Reusable host buffers whose last copy must complete before reuse (or before they are freed:
/// a ring dropped with copies in flight waits for them).
pub(crate) struct Ring<E: Completion, T> {
    free: Vec<T>,
    busy: VecDeque<(Arc<E>, T)>,
    cap: usize,
}

impl<E: Completion, T> Ring<E, T> {
    /// A ring of at most `cap` buffers (at least one).
    pub(crate) fn new(cap: usize) -> Self {
        Ring {
            free: Vec::new(),
            busy: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// Move the buffers whose copies have completed back to the free list (oldest first; work
    /// on one stream completes in order, so the scan stops at the first one still running).
    pub(crate) fn reclaim(&mut self) {
        while let Some((e, _)) = self.busy.front() {
            if !e.is_complete() {
                break;
            }
            if let Some((_, t)) = self.busy.pop_front() {
                self.free.push(t);
            }
        }
    }

    /// A buffer to fill: a free one, a new one from `make` while fewer than `cap` exist, or
    /// the oldest busy one after waiting for its copy.
    pub(crate) fn take(&mut self, make: impl FnOnce() -> Result<T>) -> Result<T> {
        self.reclaim();
        if let Some(t) = self.free.pop() {
            return Ok(t);
        }
        if self.busy.len() < self.cap {
            return make();
        }
        match self.busy.pop_front() {
            Some((e, t)) => match e.synchronize() {
                Ok(()) => Ok(t),
                Err(err) => {
                    // still possibly read by the device: keep it out of use
                    self.busy.push_front((e, t));
                    Err(err)
                }
            },
            None => make(),
        }
    }

    /// Hand a filled buffer to the copy marked by `event`. Where several threads filled
    /// buffers at once, more than `cap` may exist: idle ones are freed down to `cap`.
    pub(crate) fn retire(&mut self, event: Arc<E>, t: T) {
        self.busy.push_back((event, t));
        while self.free.len() + self.busy.len() > self.cap && self.free.pop().is_some() {}
    }

    /// Buffers in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.busy.len()
    }
}

impl<E: Completion, T> Drop for Ring<E, T> {
    fn drop(&mut self) {
        // a buffer a copy may still read is freed once the copy has ended; one whose copy's end
        // cannot be known (a failed wait) is leaked rather than freed under the DMA
        for (e, t) in self.busy.drain(..) {
            if e.is_complete() || e.synchronize().is_ok() {
                drop(t);
            } else {
                std::mem::forget(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;

    /// A flag the test sets (event completion).
    #[derive(Clone, Default)]
    struct Flag(Arc<AtomicBool>);
    impl Flag {
        fn set(&self, v: bool) {
            self.0.store(v, Ordering::SeqCst);
        }
        fn get(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A counter of host waits.
    #[derive(Clone, Default)]
    struct Count(Arc<AtomicUsize>);
    impl Count {
        fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A fake event: complete when the test says so; counts host waits.
    struct Fake {
        stream: usize,
        done: Flag,
        waits: Count,
    }

    impl Completion for Fake {
        fn stream_key(&self) -> usize {
            self.stream
        }
        fn is_complete(&self) -> bool {
            self.done.get()
        }
        fn synchronize(&self) -> Result<()> {
            self.waits.0.fetch_add(1, Ordering::SeqCst);
            self.done.set(true);
            Ok(())
        }
    }

    fn fake(stream: usize) -> (Arc<Fake>, Flag, Count) {
        let (done, waits) = (Flag::default(), Count::default());
        let e = Arc::new(Fake {
            stream,
            done: done.clone(),
            waits: waits.clone(),
        });
        (e, done, waits)
    }

    #[test]
    fn same_stream_needs_no_wait_other_streams_do_until_done() {
        let mut p: Pending<Fake> = Pending::default();
        assert!(p.to_wait_on(1).is_none(), "nothing pending");
        let (e, done, _) = fake(1);
        p.set(e);
        assert!(p.to_wait_on(1).is_none(), "stream order covers it");
        assert!(p.to_wait_on(2).is_some(), "another stream must wait");
        done.set(true);
        assert!(p.to_wait_on(2).is_none(), "finished work needs no wait");
    }

    #[test]
    fn kept_host_memory_lives_until_the_use_completes() {
        let mut p: Pending<Fake, Rc<()>> = Pending::default();
        let host = Rc::new(());
        let (e, done, waits) = fake(1);
        p.set(e);
        p.keep(Rc::clone(&host));
        p.collect();
        assert_eq!(Rc::strong_count(&host), 2, "copy still running: kept");
        // a later use on the same stream replaces the event; the memory stays kept
        let (e2, done2, _) = fake(1);
        p.set(e2);
        done.set(true);
        p.collect();
        assert_eq!(
            Rc::strong_count(&host),
            2,
            "kept until the newest use completes"
        );
        done2.set(true);
        p.collect();
        assert_eq!(Rc::strong_count(&host), 1, "released once complete");
        assert!(p.is_idle());
        assert_eq!(waits.get(), 0, "collect never blocks");
    }

    #[test]
    fn wait_blocks_once_then_forgets() {
        let mut p: Pending<Fake> = Pending::default();
        let (e, _, waits) = fake(3);
        p.set(e);
        p.keep(vec![1, 2, 3]);
        p.wait().unwrap();
        assert_eq!(waits.get(), 1);
        assert!(p.is_idle());
        p.wait().unwrap();
        assert_eq!(waits.get(), 1, "nothing left to wait for");
    }

    #[test]
    fn ring_reuses_only_completed_buffers_and_bounds_what_is_in_flight() {
        let mut r: Ring<Fake, u32> = Ring::new(2);
        let mut made = 0;
        let mut mk = || -> Result<u32> {
            made += 1;
            Ok(made)
        };
        let a = r.take(&mut mk).unwrap();
        let (ea, da, wa) = fake(1);
        r.retire(ea, a);
        let b = r.take(&mut mk).unwrap();
        assert_ne!(a, b, "a is still being copied");
        let (eb, db, wb) = fake(1);
        r.retire(eb, b);
        assert_eq!(r.in_flight(), 2);
        // cap reached and nothing complete: the oldest is waited for and reused
        let c = r.take(&mut mk).unwrap();
        assert_eq!((c, wa.get(), wb.get()), (a, 1, 0));
        let (ec, dc, _) = fake(1);
        r.retire(ec, c);
        // completion frees without a wait, oldest first: b (not done) stops the scan
        da.set(true);
        dc.set(true);
        r.reclaim();
        assert_eq!(r.in_flight(), 2);
        db.set(true);
        r.reclaim();
        assert_eq!(r.in_flight(), 0);
        assert_eq!(r.take(&mut mk).unwrap(), c, "reused, not made");
        assert_eq!((made, wb.get()), (2, 0));
    }

    /// A buffer that raises its flag when freed.
    struct Freed(Flag);
    impl Drop for Freed {
        fn drop(&mut self) {
            self.0.set(true);
        }
    }

    #[test]
    fn a_ring_dropped_mid_copy_waits_before_freeing() {
        let mut r: Ring<Fake, Freed> = Ring::new(2);
        let (running, done) = (Flag::default(), Flag::default());
        let (e1, _, w1) = fake(1);
        let (e2, d2, w2) = fake(1);
        d2.set(true);
        r.retire(e1, Freed(running.clone()));
        r.retire(e2, Freed(done.clone()));
        drop(r);
        // the running copy was waited for once, the finished one not at all; both freed
        assert_eq!((w1.get(), w2.get()), (1, 0));
        assert!(running.get() && done.get());
    }

    #[test]
    fn buffers_filled_at_once_are_trimmed_to_the_cap() {
        let mut r: Ring<Fake, u32> = Ring::new(2);
        let mut made = 0;
        let mut mk = || -> Result<u32> {
            made += 1;
            Ok(made)
        };
        // three threads take a buffer before any retires: three exist
        let (a, b, c) = (
            r.take(&mut mk).unwrap(),
            r.take(&mut mk).unwrap(),
            r.take(&mut mk).unwrap(),
        );
        let (ea, da, _) = fake(1);
        let (eb, db, _) = fake(1);
        let (ec, _, _) = fake(1);
        r.retire(ea, a);
        r.retire(eb, b);
        da.set(true);
        db.set(true);
        r.reclaim();
        r.retire(ec, c);
        // c in flight, and one of the two idle ones kept
        assert_eq!((r.in_flight(), r.free.len()), (1, 1));
    }
}
