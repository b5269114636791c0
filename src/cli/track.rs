//! `arraybridge track`: link detections into trajectories (trackpy `link` semantics).
//!
//! Reads a CSV with a header (at least `frame` and the position columns, `y,x` by default;
//! see [`arraybridge::io::csv`] for what is accepted: byte-order mark, quotes, CRLF, blank
//! lines), writes every input column unchanged plus a final `particle` column. Rows keep the
//! input order; with `--min-length`, rows of shorter tracks are dropped. Frame numbers must be
//! integers with |frame| ≤ 2^53; positions must be finite numbers. Missing frame numbers cost
//! nothing, whatever `--memory` is.

use std::path::PathBuf;
use std::time::Instant;

use algorithms::track::{GreedyParams, LinkParams, Strategy, filter_stubs, link, link_greedy};
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
    /// Subnets with more sources are solved by the bounded greedy fallback (reported).
    #[arg(long, default_value_t = 600)]
    pub max_subnet: usize,
}

/// Run `arraybridge track`.
pub fn run(args: Args, g: Global) -> Result<()> {
    let start = Instant::now();
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
    let (ids, detail) = match strategy {
        Strategy::Optimal => {
            let p = LinkParams {
                max_subnet_sources: args.max_subnet.max(1),
                ..LinkParams::new(args.search_range, args.memory)
            };
            let (mut ids, s) = link(&frames, &pos, &p)?;
            if args.min_length > 1 {
                filter_stubs(&mut ids, args.min_length);
            }
            let fb = if s.fallback_subnets > 0 {
                format!(
                    ", {} subnet(s) above {} sources solved by the greedy fallback",
                    s.fallback_subnets, p.max_subnet_sources
                )
            } else {
                String::new()
            };
            (
                ids,
                format!(
                    "{} subnets, largest {} sources{fb}",
                    s.subnets, s.largest_subnet
                ),
            )
        }
        Strategy::Greedy => {
            let p = GreedyParams {
                max_distance: args.search_range,
                max_gap: args.memory,
                min_track_length: args.min_length,
            };
            (link_greedy(&frames, &pos, &p)?, "greedy".to_string())
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
            "detail": detail, "seconds": secs,
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
