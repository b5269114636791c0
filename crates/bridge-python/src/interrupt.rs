//! A long computation that Ctrl-C stops and a progress bar follows: the computation runs on a
//! worker thread with a [`Control`]; the thread that called from Python waits for it with the
//! GIL released, waking every [`POLL`] to take the GIL, run Python's signal handlers
//! (`check_signals`) and report progress. A `KeyboardInterrupt` (or any error a handler raises)
//! cancels the control, waits for the worker to stop at its next check, and is raised; the
//! worker's result is dropped.

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use bridge_core::control::Control;
use pyo3::prelude::*;

/// How often the waiting thread checks for signals and reports progress.
const POLL: Duration = Duration::from_millis(50);

/// `f()` on a worker thread, `control` cancelled on Ctrl-C (the signal's exception raised once
/// the worker has stopped), `progress(done, total)` called with the GIL held at each poll and
/// once at the end when given. A panic of `f` is resumed here.
pub(crate) fn run<T: Send>(
    py: Python<'_>,
    control: &Control,
    progress: Option<&Bound<'_, PyAny>>,
    f: impl FnOnce() -> T + Send,
) -> PyResult<T> {
    let progress = progress.map(|p| p.clone().unbind());
    let report = |py: Python<'_>| -> PyResult<()> {
        if let Some(p) = &progress {
            let (done, total) = control.progress();
            p.bind(py).call1((done, total))?;
        }
        Ok(())
    };
    let out = py.detach(|| {
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let worker = s.spawn(move || {
                let _ = tx.send(f());
            });
            let mut stop: Option<PyErr> = None;
            let out = loop {
                match rx.recv_timeout(POLL) {
                    Ok(v) => break Some(v),
                    Err(RecvTimeoutError::Disconnected) => break None,
                    Err(RecvTimeoutError::Timeout) if stop.is_some() => {}
                    Err(RecvTimeoutError::Timeout) => {
                        let checked =
                            Python::attach(|py| py.check_signals().and_then(|()| report(py)));
                        if let Err(e) = checked {
                            control.cancel();
                            stop = Some(e);
                        }
                    }
                }
            };
            // the worker has sent its result, or panicked (resumed here)
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
            match (stop, out) {
                (Some(e), _) => Err(e),
                (None, Some(v)) => Ok(v),
                (None, None) => Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "the computation's thread ended without a result",
                )),
            }
        })
    })?;
    report(py)?;
    Ok(out)
}
