//! One input detected chunk by chunk (`detect_one`): the movie is read as a stream of chunks
//! (`MovieStream`; the library's `runtime::ReadAhead` reads the next chunk while this one is
//! detected, so memory is bounded by two chunks whatever the movie's length), each chunk
//! detected on one device or several and its rows written as they come.

use std::path::Path;
use std::time::Instant;

use algorithms::detect::{
    DetectBackend, Feature, LocateParams, Movie, MultiPolicy, Prescale, backend_for,
};
use arraybridge::io::stream::MovieStream;
use arraybridge::runtime::{Piece, ReadAhead, pieces};
use bridge_core::{BridgeError, Result};
use indicatif::ProgressBar;

use super::super::device::{
    Choice, DETECT, detect_estimate, detect_workload, nominal_cpu, resolve,
};
use super::multi::{Multi, Runner};
use super::output::Output;
use super::{Job, Method, Where};

/// One input detected: what the summaries print.
pub(super) struct Done {
    pub(super) frames: usize,
    pub(super) height: usize,
    pub(super) width: usize,
    pub(super) dtype: &'static str,
    pub(super) detections: usize,
    pub(super) seconds: f64,
    pub(super) runner: Runner,
}

/// Detect one movie of 2-D frames into `output` on `place`.
pub(super) fn detect_frames(
    job: &Job<'_>,
    input: &Path,
    output: &Path,
    place: Where,
) -> Result<Done> {
    let args = job.args;
    args.min_sigma.scalar("--min-sigma")?;
    args.max_sigma.scalar("--max-sigma")?;
    if args.method == Method::Locate && job.locate.is_none() {
        // sizes per axis (the only way `locate` has no 2-D parameters): refused in words
        super::locate_params(args)?;
    }
    let g = job.g;
    let det = job.det;
    let start = Instant::now();
    let mut stream = MovieStream::open(input, job.chunk_frames)?.with_max_bytes(job.chunk_bytes);
    let total = stream.total_frames();
    let first = stream.next_chunk()?.ok_or_else(|| {
        BridgeError::InvalidInput(format!("{}: the movie has no frame", input.display()).into())
    })?;
    let (_, h, w) = first.dim();
    let dtype = first.dtype_name();
    let integer = matches!(first, Movie::U8(_) | Movie::U16(_));
    // the memory a batch needs depends on the back end (the CPU never holds the scale space):
    // detection checks it with the back ends it runs on, before the first batch; locate's
    // frames in flight are checked here, before any is located
    if job.locate.is_some() {
        let in_flight = job.batch_size.min(total.unwrap_or(usize::MAX));
        algorithms::detect::locate::check_memory(h, w, in_flight, "--batch-size")?;
    }
    let mut runner = runner_for(job, &first, place)?;
    let policy = MultiPolicy {
        requeue_on_failure: args.requeue,
    };
    let progress = g.progress(total.unwrap_or(0) as u64, "frames");
    let mut out = match args.method {
        Method::Log => Output::log(output, args.refine)?,
        Method::Locate => Output::locate(output)?,
    };
    // The next chunk is read while this one is detected (one chunk ahead: memory stays bounded).
    // Each chunk's errors name the movie's frames (`pieces`).
    let ahead = ReadAhead::new(stream, 1)?;
    let (mut n, mut t) = (0usize, 0usize);
    for piece in pieces(std::iter::once(Ok(first)).chain(ahead), Movie::len).of(total) {
        let piece = piece?;
        if total.is_none() {
            progress.set_length(piece.frames.end as u64);
        }
        let run = &mut runner;
        n += piece.errors(detect_chunk(job, run, policy, &progress, &mut out, &piece))?;
        t = piece.frames.end;
        progress.set_position(t as u64);
    }
    out.finish()?;
    progress.finish_and_clear();
    if n == 0
        && args.method == Method::Log
        && det.params.threshold.is_some()
        && args.prescale == Prescale::Legacy
        && integer
    {
        g.note(format!(
            "note: no detection in {}. With --prescale legacy, integer pixels are divided by the dtype maximum, so \
             the absolute --threshold {} is rarely reached; try --threshold none --threshold-rel 0.2, or \
             --prescale none with a threshold in counts",
            input.display(),
            det.params.threshold.unwrap_or_default()
        ));
    }
    Ok(Done {
        frames: t,
        height: h,
        width: w,
        dtype,
        detections: n,
        seconds: start.elapsed().as_secs_f64(),
        runner,
    })
}

/// Where detection runs for `place`: one device (`auto` resolved with `first`, the first
/// chunk, and the choice printed) or several; notes that `--requeue` does nothing with one.
fn runner_for(job: &Job<'_>, first: &Movie, place: Where) -> Result<Runner> {
    let args = job.args;
    let g = job.g;
    let det = job.det;
    let runner = match place {
        #[cfg(feature = "mpi")]
        Where::Ranks(m) => Runner::Several(m),
        Where::Arg(Some(devices)) => Runner::Several(Multi::new(&devices)?),
        Where::Rank(d, how) => Runner::One(Choice {
            reason: how,
            ..Choice::explicit(d)
        }),
        Where::Arg(None) => Runner::One(resolve(args.device.clone(), DETECT, || {
            match args.method {
                Method::Log => detect_estimate(first, det),
                Method::Locate => {
                    let (cpu, note) = nominal_cpu();
                    Ok((detect_workload(first, det), cpu, note))
                }
            }
        })?),
    };
    if let Runner::One(c) = &runner
        && let Some(note) = c.auto_note("detect")
    {
        g.note(note);
    }
    if args.requeue && matches!(runner, Runner::One(_)) {
        g.note("--requeue has no effect with one device: it hands a failed device's work to the others of --device a,b or all");
    }
    Ok(runner)
}

/// One chunk of the movie detected on `runner` and its rows written to `out` (frames numbered
/// in the movie); returns how many.
fn detect_chunk(
    job: &Job<'_>,
    runner: &mut Runner,
    policy: MultiPolicy,
    progress: &ProgressBar,
    out: &mut Output,
    piece: &Piece<Movie>,
) -> Result<usize> {
    let (chunk, frame0) = (&piece.data, piece.frames.start);
    let det = job.det;
    let batch_size = job.batch_size;
    match job.locate {
        None => {
            let mut ps = match runner {
                Runner::One(choice) => choice.run("detect", |d| {
                    let backend = backend_for(&arraybridge::open_device(d)?)?;
                    det.detect_movie_with(chunk, backend.as_ref(), |done| {
                        progress.set_position((frame0 + done) as u64)
                    })
                }),
                Runner::Several(m) => m.detect(det, chunk, policy, |done| {
                    progress.set_position((frame0 + done) as u64)
                }),
            }?;
            let f0 = piece.first_frame_u32()?;
            for p in &mut ps {
                p.frame += f0;
            }
            out.particles(&ps)?;
            Ok(ps.len())
        }
        Some(p) => {
            let rows = match runner {
                Runner::One(choice) => choice.run("detect", |d| {
                    let backend = backend_for(&arraybridge::open_device(d)?)?;
                    run_locate(p, batch_size, chunk, frame0, backend.as_ref())
                })?,
                Runner::Several(m) => m.locate(p, batch_size, chunk, frame0, policy, |done| {
                    progress.set_position((frame0 + done) as u64)
                })?,
            };
            out.features(&rows)?;
            Ok(rows.len())
        }
    }
}

fn run_locate(
    p: &LocateParams,
    batch_size: usize,
    movie: &Movie,
    frame0: usize,
    backend: &dyn DetectBackend,
) -> Result<Vec<(usize, Feature)>> {
    let frames = movie.frames();
    let per_frame = algorithms::detect::locate_batches(&frames, p, batch_size, backend, |_| {})?;
    Ok(per_frame
        .into_iter()
        .enumerate()
        .flat_map(|(k, feats)| feats.into_iter().map(move |f| (frame0 + k, f)))
        .collect())
}
