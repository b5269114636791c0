//! A handle on a long computation from outside it: ask it to stop, and read how far it got.
//!
//! A [`Control`] is cheap to clone (one shared allocation); every clone sees the same state. The
//! caller keeps one clone and hands another to the computation (PACO's
//! `PacoParams::control`, say), which checks [`Control::check`] between its pieces of work (a
//! band of rows, a device batch, a unit of a multi-device run) and counts the pieces it finishes
//! with [`Control::advance`] against the total it announced with [`Control::set_total`]. The
//! Python package polls it from the thread that holds the interpreter: Ctrl-C there sets
//! [`Control::cancel`], and the computation returns [`BridgeError::Cancelled`] at its next
//! check; a progress bar reads [`Control::progress`].
//!
//! A default `Control` is never cancelled by anyone but its holders, so a computation given one
//! runs as it did without it (the checks are one relaxed atomic load per piece of work).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::{BridgeError, Result};

#[derive(Debug, Default)]
struct State {
    cancelled: AtomicBool,
    done: AtomicU64,
    total: AtomicU64,
}

/// Cancellation and progress of one computation, shared between it and its caller.
#[derive(Debug, Clone, Default)]
pub struct Control(Arc<State>);

impl Control {
    /// A fresh handle: not cancelled, no progress.
    pub fn new() -> Self {
        Control::default()
    }

    /// Ask the computation to stop at its next check.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::Relaxed);
    }

    /// Whether [`Control::cancel`] was called on any clone.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Relaxed)
    }

    /// `Err(BridgeError::Cancelled)` once cancelled, naming `what` was stopped.
    pub fn check(&self, what: &str) -> Result<()> {
        if self.is_cancelled() {
            Err(BridgeError::Cancelled {
                what: what.to_string(),
            })
        } else {
            Ok(())
        }
    }

    /// Announce `total` pieces of work (and restart the count of those done).
    pub fn set_total(&self, total: u64) {
        self.0.done.store(0, Ordering::Relaxed);
        self.0.total.store(total, Ordering::Relaxed);
    }

    /// `n` more pieces done.
    pub fn advance(&self, n: u64) {
        self.0.done.fetch_add(n, Ordering::Relaxed);
    }

    /// `(done, total)`: the pieces finished so far and the total announced (0 before any).
    pub fn progress(&self) -> (u64, u64) {
        (
            self.0.done.load(Ordering::Relaxed),
            self.0.total.load(Ordering::Relaxed),
        )
    }
}

/// Settings compare their values: two handles are equal whatever their state (a `Control` is
/// not a setting, so a parameter struct holding one still compares by its settings).
impl PartialEq for Control {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn clones_share_cancellation_and_progress() {
        let c = Control::new();
        let other = c.clone();
        assert!(c.check("x").is_ok());
        other.set_total(10);
        other.advance(3);
        assert_eq!(c.progress(), (3, 10));
        c.cancel();
        assert!(other.is_cancelled());
        let e = other.check("PACO").unwrap_err();
        assert!(matches!(e, BridgeError::Cancelled { .. }));
        assert_eq!(e.to_string(), "PACO: cancelled");
        assert_eq!(Control::new(), c, "not a setting: always equal");
    }
}
