//! `arraybridge track`: link detections into trajectories (trackpy `link` semantics).
//!
//! Reads a CSV with a header (at least `frame` and the position columns, `y,x` by default;
//! see [`arraybridge::io::csv`] for what is accepted: byte-order mark, quotes, CRLF, blank
//! lines), writes every input column unchanged plus a final `particle` column. Rows keep the
//! input order; with `--min-length`, rows of shorter tracks are dropped. Frame numbers must be
//! integers with |frame| ≤ 2^53; positions must be finite numbers. Missing frame numbers cost
//! nothing, whatever `--memory` is.
//!
//! The table streams: rows are read one at a time ([`RowReader`]), each frame is linked as
//! soon as its last row is read (the streaming [`Linker`] or [`GreedyLinker`]), and its rows
//! are written at once. With `--min-length` a row waits until its track is long enough (or
//! can no longer be continued), and the rows after it wait behind it so the input order is
//! kept. Memory is therefore one frame's rows (plus, with `--min-length`, the rows of tracks
//! not yet decided) and the tracks `--memory` can still continue, whatever the number of
//! frames; the rows held are checked against the host memory budget (`rows_held_max` in
//! `--json`). This needs the rows sorted by frame (a frame number going backwards is an error
//! naming its line); `--unsorted` reads the whole table first instead (within the budget),
//! which accepts any order. Both give the same bytes on sorted input. On an error no partial
//! output file is left (the table is written under a temporary name and renamed at the end,
//! `io::staged`).
//!
//! Every subnet is solved optimally however large (trackpy stops at 30 sources with
//! `SubnetOversizeException`); `--max-subnet N` opts into a greedy assignment above N sources,
//! and the summary says how many subnets it took. trackpy's adaptive search
//! (`--adaptive-stop`, `--adaptive-step`) and velocity predictor (`--predict velocity`,
//! `--predict-span`) are available for the optimal strategy; see
//! [`algorithms::track`] for their exact meaning. `--strategy drop` is trackpy's
//! `link_strategy='drop'` (with `--adaptive-stop` and `--predict` too): the particles of
//! every subnet other than one source with one candidate go unlinked, and a subnet of more
//! than 30 sources stops the run with trackpy's `SubnetOversizeException` in the message.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::Instant;

use algorithms::track::{
    Adaptive, GreedyLinker, GreedyParams, LinkParams, LinkStats, LinkStrategy, Linker, Predictor,
    VelocityPredict, filter_stubs, link, link_greedy, long_enough,
};
use arraybridge::io::csv::{RowReader, TableWriter, create_writer, read_table};
use bridge_core::host::Budget;
use bridge_core::{BridgeError, Result};
use csv::StringRecord;

use super::common::{Global, check_output_file};

/// Linking strategy on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    /// Optimal subnet assignment (trackpy-conformant, default).
    Optimal,
    /// The seed's greedy tracker (nearest particle per track, gaps up to --memory frames).
    Greedy,
    /// trackpy's link_strategy='drop': the particles of every subnet other than one source
    /// with one candidate go unlinked; a subnet of more than 30 sources is an error
    /// (trackpy's SubnetOversizeException).
    Drop,
}

/// Where tracks are searched for in the next frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PredictArg {
    /// At their last position (trackpy's default).
    None,
    /// Carried by the velocity of the nearest recently tracked particle (trackpy's
    /// NearestVelocityPredict; --memory then counts frames present, as in trackpy).
    Velocity,
}

/// A positive finite number.
fn parse_positive(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("expected a positive number, got {s:?}")),
    }
}

/// A number strictly between 0 and 1.
fn parse_fraction(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x > 0.0 && x < 1.0 => Ok(x),
        _ => Err(format!(
            "expected a number between 0 and 1 (exclusive), got {s:?}"
        )),
    }
}

/// Arguments of `arraybridge track`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Detections CSV (from `arraybridge detect`, or any CSV with frame,y,x columns).
    pub input: PathBuf,
    /// Output CSV: the input columns plus `particle` (checked before the input is read; never
    /// the input).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Maximum displacement between frames, in pixels.
    #[arg(long)]
    pub search_range: f64,
    /// Frames a particle may be absent between two appearances and still be linked (0: only
    /// consecutive frames link).
    #[arg(long, default_value_t = 0)]
    pub memory: usize,
    /// Linking strategy.
    #[arg(long, value_enum, default_value_t = StrategyArg::Optimal)]
    pub strategy: StrategyArg,
    /// Drop tracks with fewer points (greedy mode counts interpolated gap points).
    #[arg(long, default_value_t = 0)]
    pub min_length: usize,
    /// Position columns, comma-separated (e.g. `y_refined,x_refined`).
    #[arg(long, default_value = "y,x")]
    pub pos_columns: String,
    /// Subnets with more sources are solved by a bounded greedy assignment instead of
    /// optimally (reported). Default: none, every subnet is solved optimally.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_subnet: Option<u64>,
    /// trackpy's adaptive search: subnets with more than --adaptive-max-subnet sources are
    /// split by reducing their search range (× --adaptive-step) down to this value.
    #[arg(long, value_parser = parse_positive)]
    pub adaptive_stop: Option<f64>,
    /// Factor applied to the search range at each adaptive reduction.
    #[arg(long, value_parser = parse_fraction, requires = "adaptive_stop")]
    pub adaptive_step: Option<f64>,
    /// Subnets with more sources are split by the adaptive search (trackpy: 15).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000), requires = "adaptive_stop")]
    pub adaptive_max_subnet: Option<u64>,
    /// Predict where tracks will be in the next frame.
    #[arg(long, value_enum)]
    pub predict: Option<PredictArg>,
    /// The velocity field comes from the span + 1 most recent frames (trackpy: 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=algorithms::track::MAX_SPAN as u64), requires = "predict")]
    pub predict_span: Option<u64>,
    /// Accept rows in any frame order: the whole table is read into memory (within the memory
    /// budget) before linking. Without it the rows must be sorted by frame and are linked as
    /// they are read.
    #[arg(long)]
    pub unsorted: bool,
}

impl Args {
    /// The linking parameters of the optimal strategy.
    fn link_params(&self) -> Result<LinkParams> {
        let adaptive = self.adaptive_stop.map(|stop| {
            let mut a = Adaptive::new(stop, self.adaptive_step.unwrap_or(0.95));
            if let Some(m) = self.adaptive_max_subnet {
                a.max_subnet = usize::try_from(m).unwrap_or(usize::MAX);
            }
            a
        });
        let predictor = match self.predict {
            None | Some(PredictArg::None) => {
                if self.predict_span.is_some() {
                    return Err(BridgeError::invalid_argument(
                        "--predict-span",
                        "only applies with --predict velocity",
                    ));
                }
                Predictor::None
            }
            Some(PredictArg::Velocity) => Predictor::NearestVelocity(VelocityPredict {
                span: self.predict_span.map_or(1, |s| s as usize),
                initial_guess: None,
            }),
        };
        let link_strategy = if self.strategy == StrategyArg::Drop {
            LinkStrategy::Drop
        } else {
            LinkStrategy::Solve
        };
        let p = LinkParams {
            link_strategy,
            max_subnet_sources: self
                .max_subnet
                .map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX)),
            adaptive,
            predictor,
            ..LinkParams::new(self.search_range, self.memory)
        };
        p.validate()?;
        Ok(p)
    }

    /// The options that only the optimal strategy has, when given.
    fn optimal_only(&self) -> Option<&'static str> {
        [
            (self.max_subnet.is_some(), "--max-subnet"),
            (self.adaptive_stop.is_some(), "--adaptive-stop"),
            (self.predict.is_some(), "--predict"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

/// The summary of an optimal (or drop) linking: subnets, and what the cap, the drop strategy
/// and the adaptive search did.
fn describe(s: &LinkStats, p: &LinkParams) -> String {
    let mut d = format!(
        "{} subnets, largest {} sources, all solved optimally",
        s.subnets, s.largest_subnet
    );
    if p.link_strategy == LinkStrategy::Drop {
        d = format!(
            "{} subnets, largest {} sources, the particles of {} dropped (--strategy drop)",
            s.subnets, s.largest_subnet, s.dropped_subnets
        );
    }
    if s.fallback_subnets > 0 {
        d = format!(
            "{} subnets, largest {} sources, {} subnet(s) above {} sources solved by the greedy \
             cap (--max-subnet)",
            s.subnets, s.largest_subnet, s.fallback_subnets, p.max_subnet_sources
        );
    }
    if let Some(a) = &p.adaptive {
        d += &format!(
            ", adaptive search reduced the range of {} subnet(s)",
            s.adaptive_subnets
        );
        if s.adaptive_unresolved > 0 {
            d += &format!(
                " ({} part(s) still above {} sources at --adaptive-stop {}, where trackpy \
                 raises SubnetOversizeException, solved optimally)",
                s.adaptive_unresolved, a.max_subnet, a.stop
            );
        }
    }
    if let Predictor::NearestVelocity(v) = &p.predictor {
        d += &format!(", velocity prediction (span {})", v.span);
    }
    d
}

/// The linker of the chosen strategy, fed one frame at a time.
enum Engine {
    Optimal(Box<Linker>),
    Greedy(GreedyLinker),
}

impl Engine {
    fn push(&mut self, frame: i64, pos: &[[f64; 2]], ids: &mut Vec<i64>) -> Result<()> {
        match self {
            Engine::Optimal(l) => l.push_frame_into(frame, pos, ids),
            Engine::Greedy(l) => l.push_frame_into(frame, pos, ids),
        }
    }

    fn is_active(&self, id: i64) -> bool {
        match self {
            Engine::Optimal(l) => l.is_active(id),
            Engine::Greedy(l) => l.is_active(id),
        }
    }

    /// Tracks started so far (ids are 0, 1, …).
    fn tracks(&self) -> usize {
        match self {
            Engine::Optimal(l) => l.stats().tracks,
            Engine::Greedy(l) => l.tracks(),
        }
    }
}

/// Approximate heap bytes of a row held in memory (its text, field bounds, the record).
fn row_bytes(r: &StringRecord) -> u64 {
    (r.as_byte_record().as_slice().len() + 16 * r.len() + 96) as u64
}

/// A track whose rows wait for `--min-length`.
struct Pending {
    /// Its first frame.
    first: i64,
    /// Rows so far.
    rows: u64,
    /// Long enough: its rows are written.
    kept: bool,
    /// May still be continued (else its length is final).
    active: bool,
    /// Its rows in the queue.
    queued: u64,
}

/// The linked rows, written in input order as soon as they are final: at once without
/// `--min-length`; with it, once the row's track is long enough (kept) or can no longer be
/// continued (dropped if short). Rows wait only behind an undecided track.
struct Sink {
    w: TableWriter,
    min_length: usize,
    greedy: bool,
    queue: VecDeque<(StringRecord, i64)>,
    queue_bytes: u64,
    pending: HashMap<i64, Pending>,
    rows_out: usize,
    kept_tracks: usize,
    /// The most rows held at once (the frame being read and the queue).
    held_max: usize,
}

impl Sink {
    fn filtering(&self) -> bool {
        self.min_length > 1
    }

    fn write(&mut self, row: &StringRecord, id: i64) -> Result<()> {
        let id = id.to_string();
        self.w.write_record(row.iter().chain([id.as_str()]))?;
        self.rows_out += 1;
        Ok(())
    }

    /// Rows of frame `frame` and their ids, just linked.
    fn frame(
        &mut self,
        frame: i64,
        rows: &mut [StringRecord],
        ids: &[i64],
        engine: &Engine,
    ) -> Result<()> {
        self.held_max = self.held_max.max(rows.len() + self.queue.len());
        if !self.filtering() {
            for (row, &id) in rows.iter().zip(ids) {
                self.write(row, id)?;
            }
            return Ok(());
        }
        for (row, &id) in rows.iter_mut().zip(ids) {
            let p = self.pending.entry(id).or_insert(Pending {
                first: frame,
                rows: 0,
                kept: false,
                active: true,
                queued: 0,
            });
            p.rows += 1;
            let long = if self.greedy {
                long_enough(p.first, frame, self.min_length)
            } else {
                p.rows >= self.min_length as u64
            };
            if long && !p.kept {
                p.kept = true;
                self.kept_tracks += 1;
            }
            if self.queue.is_empty() && p.kept {
                self.write(row, id)?;
            } else {
                p.queued += 1;
                self.queue_bytes += row_bytes(row);
                self.queue.push_back((std::mem::take(row), id));
            }
        }
        self.pending.retain(|&id, p| {
            p.active = engine.is_active(id);
            p.active || p.queued > 0
        });
        self.flush()
    }

    /// Write (or drop) the rows at the head of the queue whose track is decided.
    fn flush(&mut self) -> Result<()> {
        while let Some((_, id)) = self.queue.front() {
            let id = *id;
            let Some(p) = self.pending.get_mut(&id) else {
                break; // unreachable: a queued row's track is pending
            };
            if !p.kept && p.active {
                break;
            }
            let (kept, done) = (p.kept, !p.active);
            p.queued -= 1;
            if done && p.queued == 0 {
                self.pending.remove(&id);
            }
            if let Some((row, id)) = self.queue.pop_front() {
                self.queue_bytes -= row_bytes(&row);
                if kept {
                    self.write(&row, id)?;
                }
            }
        }
        Ok(())
    }

    /// The input ended: every track's length is final.
    fn finish(mut self, engine: &Engine) -> Result<(usize, usize, usize)> {
        for p in self.pending.values_mut() {
            p.active = false;
        }
        self.flush()?;
        let tracks = if self.filtering() {
            self.kept_tracks
        } else {
            engine.tracks()
        };
        self.w.finish()?;
        Ok((self.rows_out, tracks, self.held_max))
    }
}

/// Run `arraybridge track`: the checks before the input is read, then the table linked as it
/// is read (or, with `--unsorted`, read whole first), then the summary.
pub fn run(args: Args, g: Global) -> Result<()> {
    let start = Instant::now();
    check(&args)?;
    if args.unsorted {
        return run_in_memory(&args, g, start);
    }
    let mut rd = RowReader::open(&args.input)?;
    let cols = columns(&args, rd.path(), rd.header(), |c| rd.column(c))?;
    let (mut engine, params) = engine(&args)?;
    let w = create_writer(&args.output)?;
    let result = stream(&args, &mut rd, cols, &mut engine, w);
    // on an error the writer is dropped unfinished: no partial table appears
    // (`io::staged`), and a file already at the output path is left as it was
    let (rows_in, rows_out, tracks, held_max) = result?;
    let (detail, stats) = match (&engine, &params) {
        (Engine::Optimal(l), Some(p)) => {
            let s = l.stats();
            (describe(&s, p), stats_json(&s))
        }
        _ => ("greedy".to_string(), serde_json::Value::Null),
    };
    report(
        &args,
        g,
        start,
        (rows_in, rows_out, tracks),
        &detail,
        stats,
        Some(held_max),
    )
}

/// The checks before the input is read: no option of the optimal strategy with `--strategy
/// greedy`, valid linking parameters with the optimal one, then the output path.
fn check(args: &Args) -> Result<()> {
    if args.memory > algorithms::track::MAX_MEMORY {
        return Err(BridgeError::invalid_argument(
            "--memory",
            format!(
                "{} frames is unreasonably large (at most {})",
                args.memory,
                algorithms::track::MAX_MEMORY
            ),
        ));
    }
    if args.strategy == StrategyArg::Greedy
        && let Some(flag) = args.optimal_only()
    {
        return Err(BridgeError::invalid_argument(
            flag,
            "only applies to --strategy optimal (or drop)",
        ));
    }
    if args.strategy == StrategyArg::Drop && args.max_subnet.is_some() {
        return Err(BridgeError::invalid_argument(
            "--max-subnet",
            "caps the subnets solved optimally; --strategy drop solves none",
        ));
    }
    if args.strategy != StrategyArg::Greedy {
        args.link_params()?;
    }
    check_output_file(&args.output, &[&args.input], "--output")
}

/// The streaming linker of `--strategy`, and the optimal strategy's parameters.
fn engine(args: &Args) -> Result<(Engine, Option<LinkParams>)> {
    let greedy = args.strategy == StrategyArg::Greedy;
    Ok(if greedy {
        let p = GreedyParams {
            max_distance: args.search_range,
            max_gap: args.memory,
            min_track_length: args.min_length,
        };
        (Engine::Greedy(GreedyLinker::new(p)?), None)
    } else {
        let p = args.link_params()?;
        (Engine::Optimal(Box::new(Linker::new(p.clone())?)), Some(p))
    })
}

/// The sorted table linked as it is read: the header plus `particle` into `w`, then each
/// frame's rows, once its last row is read, linked by `engine` and handed to a [`Sink`]; the
/// rows held are checked against the memory budget. Returns the rows in, the rows out, the
/// tracks and the most rows held at once.
fn stream(
    args: &Args,
    rd: &mut RowReader,
    cols: (usize, usize, usize),
    engine: &mut Engine,
    mut w: TableWriter,
) -> Result<(usize, usize, usize, usize)> {
    let greedy = args.strategy == StrategyArg::Greedy;
    w.write_record(rd.header().iter().map(String::as_str).chain(["particle"]))?;
    let mut sink = Sink {
        w,
        min_length: args.min_length,
        greedy,
        queue: VecDeque::new(),
        queue_bytes: 0,
        pending: HashMap::new(),
        rows_out: 0,
        kept_tracks: 0,
        held_max: 0,
    };
    let budget = Budget::current();
    // rows of the frame being read: `rows[..n]` (the slots past `n` are reused)
    let mut rows: Vec<StringRecord> = Vec::new();
    let mut n = 0usize;
    let mut frame_bytes = 0u64;
    let mut pos: Vec<[f64; 2]> = Vec::new();
    let mut ids = Vec::new();
    let mut current: Option<i64> = None;
    let mut rows_in = 0usize;
    loop {
        if n == rows.len() {
            rows.push(StringRecord::new());
        }
        let frame = read_row(rd, &mut rows[n], cols, current)?;
        if let Some(prev) = current
            && frame.is_none_or(|(f, _)| f != prev)
        {
            engine.push(prev, &pos, &mut ids)?;
            sink.frame(prev, &mut rows[..n], &ids, engine)?;
            rows.swap(0, n);
            n = 0;
            frame_bytes = 0;
            pos.clear();
        }
        let Some((f, p)) = frame else {
            break;
        };
        current = Some(f);
        pos.push(p);
        frame_bytes += row_bytes(&rows[n]);
        n += 1;
        rows_in += 1;
        check_held(&budget, rd, &sink, &rows[0], (f, n, frame_bytes))?;
    }
    let (rows_out, tracks, held_max) = sink.finish(engine)?;
    Ok((rows_in, rows_out, tracks, held_max))
}

/// Read the next row into `row`: its frame and position (columns `cf`, `cy`, `cx`), or `None`
/// at the end of the table. A frame below `current`, the frame being read, is an error that
/// names the row's line.
fn read_row(
    rd: &mut RowReader,
    row: &mut StringRecord,
    (cf, cy, cx): (usize, usize, usize),
    current: Option<i64>,
) -> Result<Option<(i64, [f64; 2])>> {
    let more = rd.read_row(row)?;
    let frame = if more {
        let r = &*row;
        let f = rd.frame(r, cf)?;
        let p = [rd.finite_f64(r, cy)?, rd.finite_f64(r, cx)?];
        if let Some(prev) = current
            && f < prev
        {
            return Err(BridgeError::InvalidInput(
                format!(
                    "{}:{}: column frame: frame {f} after frame {prev}: rows must be sorted \
                 by frame (frames ascending, the rows of a frame together) to be linked \
                 as they are read; sort the table, or pass --unsorted to read it whole",
                    rd.path(),
                    RowReader::line(r)
                )
                .into(),
            ));
        }
        Some((f, p))
    } else {
        None
    };
    Ok(frame)
}

/// The rows held until linked, against the memory budget (at twice their bytes): the `n` rows
/// (`frame_bytes`) of frame `f` read so far, from the line of `first` on, and the rows that
/// wait in `sink` for `--min-length`.
fn check_held(
    budget: &Budget,
    rd: &RowReader,
    sink: &Sink,
    first: &StringRecord,
    (f, n, frame_bytes): (i64, usize, u64),
) -> Result<()> {
    let held = frame_bytes + sink.queue_bytes;
    if held.saturating_mul(2) > budget.limit.0 {
        let queued = if sink.queue.is_empty() {
            String::new()
        } else {
            format!(
                " and {} earlier rows waiting for --min-length",
                sink.queue.len()
            )
        };
        let first = RowReader::line(first);
        budget.check(
            held.saturating_mul(2),
            &format!(
                "{}: frame {f}, {n} rows from line {first} on{queued}, held until \
                 linked",
                rd.path()
            ),
            "memory grows with the rows of one frame (and, with --min-length, the rows \
             of tracks not yet long enough), not with the number of frames",
        )?;
    }
    Ok(())
}

/// The JSON statistics of an optimal linking.
fn stats_json(s: &LinkStats) -> serde_json::Value {
    serde_json::json!({
        "subnets": s.subnets, "largest_subnet": s.largest_subnet,
        "greedy_capped_subnets": s.fallback_subnets,
        "adaptive_subnets": s.adaptive_subnets,
        "adaptive_unresolved": s.adaptive_unresolved,
        "dropped_subnets": s.dropped_subnets,
    })
}

/// The frame and position columns, checked (no `particle` column yet, two position columns
/// that exist).
fn columns(
    args: &Args,
    file: &str,
    header: &[String],
    column: impl Fn(&str) -> Result<usize>,
) -> Result<(usize, usize, usize)> {
    let has = |c: &str| header.iter().any(|h| h.trim() == c);
    let pc: Vec<&str> = args.pos_columns.split(',').map(str::trim).collect();
    if pc.len() != 2 {
        return Err(BridgeError::invalid_argument(
            "--pos-columns",
            "expected two column names, e.g. y,x",
        ));
    }
    if pc[0] == pc[1] {
        return Err(BridgeError::invalid_argument(
            "--pos-columns",
            format!(
                "names the column {:?} twice; linking needs two different position columns, \
                 e.g. y,x",
                pc[0]
            ),
        ));
    }
    if has("particle") {
        return Err(BridgeError::InvalidInput(
            format!(
                "{file}: already has a `particle` column (remove it, or rename it, before linking)"
            )
            .into(),
        ));
    }
    for c in &pc {
        if !has(c) {
            return Err(BridgeError::InvalidInput(
                format!(
                    "{file}: no position column {c:?} (columns: {}); name them with \
                 --pos-columns Y,X",
                    header
                        .iter()
                        .map(|h| h.trim())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
                .into(),
            ));
        }
    }
    Ok((column("frame")?, column(pc[0])?, column(pc[1])?))
}

/// The summary line, or the JSON document.
fn report(
    args: &Args,
    g: Global,
    start: Instant,
    (rows_in, rows_out, tracks): (usize, usize, usize),
    detail: &str,
    stats: serde_json::Value,
    held_max: Option<usize>,
) -> Result<()> {
    let secs = start.elapsed().as_secs_f64();
    if g.json {
        let mut doc = serde_json::json!({
            "command": "track",
            "input": args.input.display().to_string(),
            "output": args.output.display().to_string(),
            "rows_in": rows_in, "rows_out": rows_out, "tracks": tracks,
            "detail": detail, "link": stats, "seconds": secs,
        });
        if let Some(h) = held_max {
            doc["rows_held_max"] = h.into();
        }
        g.print_json(&doc)?;
    } else {
        g.note(format!(
            "track: {rows_in} rows in, {rows_out} rows out, {tracks} tracks, {detail}, {secs:.3} s",
        ));
    }
    Ok(())
}

/// `--unsorted`: the whole table read into memory (within the budget), frames in any order.
fn run_in_memory(args: &Args, g: Global, start: Instant) -> Result<()> {
    let csv = read_table(&args.input)?;
    let (cf, cy, cx) = columns(args, &csv.path, &csv.header, |c| csv.column(c))?;
    let mut frames = Vec::with_capacity(csv.rows.len());
    let mut pos = Vec::with_capacity(csv.rows.len());
    for r in 0..csv.rows.len() {
        frames.push(csv.frame(r, cf)?);
        pos.push([csv.finite_f64(r, cy)?, csv.finite_f64(r, cx)?]);
    }
    let (ids, detail, stats) = match args.strategy {
        StrategyArg::Optimal | StrategyArg::Drop => {
            let p = args.link_params()?;
            let (mut ids, s) = link(&frames, &pos, &p)?;
            if args.min_length > 1 {
                filter_stubs(&mut ids, args.min_length);
            }
            (ids, describe(&s, &p), stats_json(&s))
        }
        StrategyArg::Greedy => {
            let p = GreedyParams {
                max_distance: args.search_range,
                max_gap: args.memory,
                min_track_length: args.min_length,
            };
            let ids = link_greedy(&frames, &pos, &p)?;
            (ids, "greedy".to_string(), serde_json::Value::Null)
        }
    };
    let mut w = create_writer(&args.output)?;
    w.write_record(csv.header.iter().map(String::as_str).chain(["particle"]))?;
    let mut kept = 0usize;
    for (row, id) in csv.rows.iter().zip(&ids) {
        if *id >= 0 {
            let id = id.to_string();
            w.write_record(row.iter().chain([id.as_str()]))?;
            kept += 1;
        }
    }
    w.finish()?;
    let tracks: HashSet<i64> = ids.iter().copied().filter(|&i| i >= 0).collect();
    report(
        args,
        g,
        start,
        (ids.len(), kept, tracks.len()),
        &detail,
        stats,
        None,
    )
}
