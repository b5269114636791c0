//! The work queue of the several-device runs (`detect::multi`, `paco::multi`): ranges of work
//! `[a, b)` handed to whichever device asks, split in two when a device runs out of memory on
//! one, handed back when a device stops; the first fatal error ends the run.

use std::collections::VecDeque;
use std::time::Duration;

use bridge_core::BridgeError;

use crate::detect::MultiPolicy;

/// The units still to do and the devices working on them.
pub(crate) struct Units {
    /// Units `[a, b)` still to do.
    todo: VecDeque<(usize, usize)>,
    /// Units being computed right now.
    running: usize,
    /// Devices still working.
    alive: usize,
    /// The first fatal error (the run fails with it).
    fatal: Option<BridgeError>,
}

/// What a device is told when it asks for work.
pub(crate) enum Take {
    /// Compute this unit (then [`Units::end_unit`]).
    Unit((usize, usize)),
    /// Nothing now, but a running unit may still be split or handed back: ask again.
    Wait,
    /// The run is over (all done, or failed).
    Stop,
}

impl Units {
    /// `todo` for `devices` devices.
    pub(crate) fn new(todo: VecDeque<(usize, usize)>, devices: usize) -> Units {
        Units {
            todo,
            running: 0,
            alive: devices,
            fatal: None,
        }
    }

    /// The next unit for a device.
    pub(crate) fn take(&mut self) -> Take {
        if self.fatal.is_some() {
            return Take::Stop;
        }
        match self.todo.pop_front() {
            Some(u) => {
                self.running += 1;
                Take::Unit(u)
            }
            None if self.running == 0 => Take::Stop,
            None => Take::Wait,
        }
    }

    /// A unit taken by [`Units::take`] has come back (done or failed).
    pub(crate) fn end_unit(&mut self) {
        self.running -= 1;
    }

    /// Out of memory on `(a, b)`: its two halves go first. `false` for a unit of one item,
    /// which cannot be split.
    pub(crate) fn split(&mut self, (a, b): (usize, usize)) -> bool {
        if b - a < 2 {
            return false;
        }
        let mid = a + (b - a) / 2;
        self.todo.push_front((mid, b));
        self.todo.push_front((a, mid));
        true
    }

    /// A device stopped with `e`: out of memory (it fits nothing) or with requeue asked for,
    /// the others go on (and the run fails with `e` when none is left); otherwise the run fails
    /// with `named(e)`. `unit` is the unit it was computing, handed back to the others.
    pub(crate) fn stop_device(
        &mut self,
        unit: Option<(usize, usize)>,
        e: BridgeError,
        policy: MultiPolicy,
        named: impl FnOnce(BridgeError) -> BridgeError,
    ) {
        if let Some(u) = unit {
            self.todo.push_front(u);
        }
        self.alive -= 1;
        if e.is_oom() || policy.requeue_on_failure {
            if self.alive == 0 {
                self.fatal = Some(e);
            }
        } else {
            self.fatal = Some(named(e));
        }
    }

    /// The end of the run: the fatal error, else whether every unit was taken.
    pub(crate) fn finish(self) -> Result<bool, BridgeError> {
        match self.fatal {
            Some(e) => Err(e),
            None => Ok(self.todo.is_empty()),
        }
    }
}

/// A device's next unit from `take` (called under the caller's lock), waiting while other
/// devices may still split or hand back one; `None` once the run is over.
pub(crate) fn next_unit(mut take: impl FnMut() -> Take) -> Option<(usize, usize)> {
    loop {
        match take() {
            Take::Unit(u) => return Some(u),
            Take::Stop => return None,
            Take::Wait => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}
