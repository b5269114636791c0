//! Batches on several worker threads at once, their results in order: the machinery of
//! [`LogDetector::detect_movie_with`](super::LogDetector::detect_movie_with) and
//! [`locate_batches`](super::locate_batches) where a back end takes more than one batch at a
//! time ([`DetectBackend::batches_in_flight`](super::DetectBackend::batches_in_flight)).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bridge_core::{BridgeError, Result};

/// `work(i)` for every `i` in `0..n` on `workers` threads named `{name}-0`, `{name}-1`, …,
/// each taking the next index as it finishes one (so indices start in order); `done(i, out)`
/// on the calling thread for each result in index order. On an error the workers take no
/// more indices, `done` is called for no index after it, and the error of the lowest failed
/// index is returned (the one a loop in order would have returned: every lower index was
/// taken before it). A panic in `work` is the error `panicked(i)` of its index, never a hang.
/// With one worker (or one index) it is that loop, on the calling thread (a panic unwinds).
pub(crate) fn in_order<T: Send>(
    n: usize,
    workers: usize,
    name: &str,
    work: impl Fn(usize) -> Result<T> + Sync,
    panicked: impl Fn(usize) -> BridgeError + Sync,
    mut done: impl FnMut(usize, T),
) -> Result<()> {
    if workers <= 1 || n <= 1 {
        for i in 0..n {
            done(i, work(i)?);
        }
        return Ok(());
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<T>)>();
    std::thread::scope(|s| {
        let (work, panicked) = (&work, &panicked);
        for k in 0..workers.max(1) {
            let (tx, next, stop) = (tx.clone(), &next, &stop);
            let run = move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(i)))
                        .unwrap_or_else(|_| Err(panicked(i)));
                    let failed = r.is_err();
                    if tx.send((i, r)).is_err() || failed {
                        stop.store(true, Ordering::Relaxed);
                        break;
                    }
                }
            };
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{k}"))
                .spawn_scoped(s, run);
            if let Err(e) = spawned {
                if k == 0 {
                    return Err(BridgeError::backend(
                        name,
                        None,
                        format!("could not start a worker thread: {e}"),
                    ));
                }
                // the workers already started take every index
                log::warn!("{name}: could not start worker {k}: {e}");
            }
        }
        drop(tx);
        let mut ready = std::collections::BTreeMap::new();
        let mut in_order = 0usize;
        let mut failed: Option<(usize, BridgeError)> = None;
        for (i, r) in rx {
            match r {
                Ok(out) => {
                    ready.insert(i, out);
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    if failed.as_ref().is_none_or(|(f, _)| i < *f) {
                        failed = Some((i, e));
                    }
                }
            }
            while let Some(out) = ready.remove(&in_order) {
                if failed.as_ref().is_none_or(|(f, _)| in_order < *f) {
                    done(in_order, out);
                }
                in_order += 1;
            }
        }
        match failed {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    })
}

/// `frames` in batches of `batch_size` (at least 1), each given to `work(batch, first frame)`
/// by `workers` threads named `{name}-…` ([`in_order`]; a panic is [`panicked_on`] `device`);
/// the results concatenated in frame order, `progress(frames done)` after each batch, in
/// order, on the calling thread.
pub(crate) fn frame_batches<V: Sync, T: Send>(
    frames: &[V],
    batch_size: usize,
    (workers, name, device): (usize, &str, bridge_core::Device),
    work: impl Fn(&[V], usize) -> Result<Vec<T>> + Sync,
    mut progress: impl FnMut(usize),
) -> Result<Vec<T>> {
    let bs = batch_size.max(1);
    let batches: Vec<&[V]> = frames.chunks(bs).collect();
    let (mut out, mut done) = (Vec::with_capacity(frames.len()), 0usize);
    in_order(
        batches.len(),
        workers,
        name,
        |bi| work(batches[bi], bi * bs),
        |bi| panicked_on(device, bi * bs, batches[bi].len()),
        |bi, items| {
            out.extend(items);
            done += batches[bi].len();
            progress(done);
        },
    )?;
    Ok(out)
}

/// The error of a batch of `frames` frames from frame `first` whose back end on `device`
/// panicked (see [`in_order`]).
pub(crate) fn panicked_on(device: bridge_core::Device, first: usize, frames: usize) -> BridgeError {
    BridgeError::backend(
        device.to_string(),
        None,
        format!(
            "the back end panicked on frames {first}..{}",
            first + frames
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Results come in order whatever the workers' timing; every index runs once.
    #[test]
    fn results_come_in_order() {
        for workers in [1, 2, 3, 8] {
            let mut seen = Vec::new();
            in_order(
                20,
                workers,
                "test",
                |i| {
                    std::thread::sleep(std::time::Duration::from_millis((i * 7 % 5) as u64));
                    Ok(i * 10)
                },
                |i| BridgeError::backend("test", None, format!("panic {i}")),
                |i, v| seen.push((i, v)),
            )
            .unwrap();
            assert_eq!(seen, (0..20).map(|i| (i, i * 10)).collect::<Vec<_>>());
        }
    }

    /// The lowest failed index's error; no result at or after it; a panic is an error.
    #[test]
    fn the_first_failure_is_the_error() {
        for workers in [1, 2, 4] {
            let mut seen = Vec::new();
            let err = in_order(
                30,
                workers,
                "test",
                |i| match i {
                    7 => {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        Err(BridgeError::InvalidInput(format!("bad {i}").into()))
                    }
                    9 => panic!("boom"),
                    _ => Ok(i),
                },
                |i| BridgeError::backend("test", None, format!("panicked at {i}")),
                |i, _| seen.push(i),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("bad 7"), "{workers}: {err}");
            assert_eq!(seen, (0..7).collect::<Vec<_>>(), "{workers}");
            if workers == 1 {
                // on the calling thread: a panic unwinds
                continue;
            }
            let err = in_order(
                3,
                workers,
                "test",
                |i| if i == 1 { panic!("boom") } else { Ok(i) },
                |i| BridgeError::backend("test", None, format!("panicked at {i}")),
                |_, _| {},
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("panicked at 1"), "{err}");
        }
    }
}
