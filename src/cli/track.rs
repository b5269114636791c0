//! `arraybridge track`: link detections into trajectories (trackpy `link` semantics).
//!
//! Reads a CSV with a header (at least `frame` and the position columns, `y,x` by default),
//! writes every input column unchanged plus a final `particle` column. Rows keep the input
//! order; with `--min-length`, rows of shorter tracks are dropped.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use algorithms::track::{GreedyParams, LinkParams, Strategy, filter_stubs, link, link_greedy};
use bridge_core::{BridgeError, Result};

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
    /// Output CSV: the input columns plus `particle`.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Maximum displacement between frames, in pixels.
    #[arg(long)]
    pub search_range: f64,
    /// Frames a particle may vanish and still be linked (default 0).
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
    /// No summary line.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

struct Csv {
    header: Vec<String>,
    lines: Vec<String>,
    fields: Vec<Vec<String>>,
}

fn read_csv(path: &PathBuf) -> Result<Csv> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| BridgeError::io(name.clone(), e))?;
    let mut it = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, head) = it
        .next()
        .ok_or_else(|| BridgeError::InvalidInput(format!("{name}: empty CSV (no header)")))?;
    let header: Vec<String> = head
        .trim_end_matches('\r')
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let mut lines = Vec::new();
    let mut fields = Vec::new();
    for (ln, l) in it {
        let l = l.trim_end_matches('\r');
        let f: Vec<String> = l.split(',').map(|s| s.trim().to_string()).collect();
        if f.len() != header.len() {
            return Err(BridgeError::InvalidInput(format!(
                "{name}:{}: {} fields, the header has {}",
                ln + 1,
                f.len(),
                header.len()
            )));
        }
        lines.push(l.to_string());
        fields.push(f);
    }
    Ok(Csv {
        header,
        lines,
        fields,
    })
}

fn column(csv: &Csv, name: &str, file: &str) -> Result<usize> {
    csv.header.iter().position(|h| h == name).ok_or_else(|| {
        BridgeError::InvalidInput(format!(
            "{file}: no column {name:?} (columns: {})",
            csv.header.join(",")
        ))
    })
}

/// Run `arraybridge track`.
pub fn run(args: Args) -> Result<()> {
    let start = Instant::now();
    let file = args.input.display().to_string();
    let csv = read_csv(&args.input)?;
    let pc: Vec<&str> = args.pos_columns.split(',').map(str::trim).collect();
    if pc.len() != 2 {
        return Err(BridgeError::invalid_argument(
            "pos-columns",
            "expected two column names, e.g. y,x",
        ));
    }
    if csv.header.iter().any(|h| h == "particle") {
        return Err(BridgeError::InvalidInput(format!(
            "{file}: already has a `particle` column"
        )));
    }
    let (cf, cy, cx) = (
        column(&csv, "frame", &file)?,
        column(&csv, pc[0], &file)?,
        column(&csv, pc[1], &file)?,
    );
    let num = |row: usize, c: usize| -> Result<f64> {
        csv.fields[row][c].parse::<f64>().map_err(|_| {
            BridgeError::InvalidInput(format!(
                "{file}: row {}: {:?} is not a number",
                row + 1,
                csv.fields[row][c]
            ))
        })
    };
    let mut frames = Vec::with_capacity(csv.fields.len());
    let mut pos = Vec::with_capacity(csv.fields.len());
    for r in 0..csv.fields.len() {
        let f = num(r, cf)?;
        if f.fract() != 0.0 || !f.is_finite() {
            return Err(BridgeError::InvalidInput(format!(
                "{file}: row {}: frame {f} is not an integer",
                r + 1
            )));
        }
        frames.push(f as i64);
        pos.push([num(r, cy)?, num(r, cx)?]);
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
    let name = args.output.display().to_string();
    let f = std::fs::File::create(&args.output).map_err(|e| BridgeError::io(name.clone(), e))?;
    let mut w = std::io::BufWriter::new(f);
    let io = |e| BridgeError::io(name.clone(), e);
    writeln!(w, "{},particle", csv.header.join(",")).map_err(io)?;
    let mut kept = 0usize;
    for (line, id) in csv.lines.iter().zip(&ids) {
        if *id >= 0 {
            writeln!(w, "{line},{id}").map_err(io)?;
            kept += 1;
        }
    }
    w.flush().map_err(io)?;
    if !args.quiet {
        let tracks: std::collections::HashSet<i64> =
            ids.iter().copied().filter(|&i| i >= 0).collect();
        eprintln!(
            "track: {} rows in, {kept} rows out, {} tracks, {detail}, {:.3} s",
            ids.len(),
            tracks.len(),
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
