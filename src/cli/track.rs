//! `arraybridge track`: link detections into trajectories (trackpy `link` semantics).
//!
//! Reads a CSV with a header (at least `frame` and the position columns, `y,x` by default;
//! see [`arraybridge::io::csv`] for what is accepted: byte-order mark, quotes, CRLF, blank
//! lines), writes every input column unchanged plus a final `particle` column. Rows keep the
//! input order; with `--min-length`, rows of shorter tracks are dropped. Frame numbers must be
//! integers with |frame| ≤ 2^53; positions must be finite numbers. Missing frame numbers cost
//! nothing, whatever `--memory` is.
//!
//! Every subnet is solved optimally however large (trackpy stops at 30 sources with
//! `SubnetOversizeException`); `--max-subnet N` opts into a greedy assignment above N sources,
//! and the summary says how many subnets it took. trackpy's adaptive search
//! (`--adaptive-stop`, `--adaptive-step`) and velocity predictor (`--predict velocity`,
//! `--predict-span`) are available for the optimal strategy; see
//! [`algorithms::track`] for their exact meaning.

use std::path::PathBuf;
use std::time::Instant;

use algorithms::track::{
    Adaptive, GreedyParams, LinkParams, LinkStats, Predictor, Strategy, VelocityPredict,
    filter_stubs, link, link_greedy,
};
use arraybridge::io::csv::{create_writer, read_table};
use bridge_core::{BridgeError, Result};

use super::common::{Global, check_output_file};

/// Linking strategy on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    /// Optimal subnet assignment (trackpy-conformant, default).
    Optimal,
    /// The seed's greedy tracker (nearest particle per track, gaps up to --memory frames).
    Greedy,
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
        let p = LinkParams {
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

/// The summary of an optimal linking: subnets, and what the cap and the adaptive search did.
fn describe(s: &LinkStats, p: &LinkParams) -> String {
    let mut d = format!(
        "{} subnets, largest {} sources, all solved optimally",
        s.subnets, s.largest_subnet
    );
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

/// Run `arraybridge track`.
pub fn run(args: Args, g: Global) -> Result<()> {
    let start = Instant::now();
    if args.strategy == StrategyArg::Greedy
        && let Some(flag) = args.optimal_only()
    {
        return Err(BridgeError::invalid_argument(
            flag,
            "only applies to --strategy optimal",
        ));
    }
    if args.strategy == StrategyArg::Optimal {
        args.link_params()?;
    }
    check_output_file(&args.output, &[&args.input], "--output")?;
    let csv = read_table(&args.input)?;
    let file = csv.path.clone();
    let pc: Vec<&str> = args.pos_columns.split(',').map(str::trim).collect();
    if pc.len() != 2 {
        return Err(BridgeError::invalid_argument(
            "--pos-columns",
            "expected two column names, e.g. y,x",
        ));
    }
    if csv.has_column("particle") {
        return Err(BridgeError::InvalidInput(format!(
            "{file}: already has a `particle` column (remove it, or rename it, before linking)"
        )));
    }
    for c in &pc {
        if !csv.has_column(c) {
            return Err(BridgeError::InvalidInput(format!(
                "{file}: no position column {c:?} (columns: {}); name them with \
                 --pos-columns Y,X",
                csv.header
                    .iter()
                    .map(|h| h.trim())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    let (cf, cy, cx) = (csv.column("frame")?, csv.column(pc[0])?, csv.column(pc[1])?);
    let mut frames = Vec::with_capacity(csv.rows.len());
    let mut pos = Vec::with_capacity(csv.rows.len());
    for r in 0..csv.rows.len() {
        frames.push(csv.frame(r, cf)?);
        pos.push([csv.finite_f64(r, cy)?, csv.finite_f64(r, cx)?]);
    }
    let strategy = match args.strategy {
        StrategyArg::Optimal => Strategy::Optimal,
        StrategyArg::Greedy => Strategy::Greedy,
    };
    let (ids, detail, stats) = match strategy {
        Strategy::Optimal => {
            let p = args.link_params()?;
            let (mut ids, s) = link(&frames, &pos, &p)?;
            if args.min_length > 1 {
                filter_stubs(&mut ids, args.min_length);
            }
            let stats = serde_json::json!({
                "subnets": s.subnets, "largest_subnet": s.largest_subnet,
                "greedy_capped_subnets": s.fallback_subnets,
                "adaptive_subnets": s.adaptive_subnets,
                "adaptive_unresolved": s.adaptive_unresolved,
            });
            (ids, describe(&s, &p), stats)
        }
        Strategy::Greedy => {
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
    let tracks: std::collections::HashSet<i64> = ids.iter().copied().filter(|&i| i >= 0).collect();
    let secs = start.elapsed().as_secs_f64();
    if g.json {
        g.print_json(&serde_json::json!({
            "command": "track",
            "input": args.input.display().to_string(),
            "output": args.output.display().to_string(),
            "rows_in": ids.len(), "rows_out": kept, "tracks": tracks.len(),
            "detail": detail, "link": stats, "seconds": secs,
        }))?;
    } else {
        g.note(format!(
            "track: {} rows in, {kept} rows out, {} tracks, {detail}, {secs:.3} s",
            ids.len(),
            tracks.len(),
        ));
    }
    Ok(())
}
