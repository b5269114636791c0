//! Linking detections into trajectories (spec §3).
//!
//! * [`link`] (2-D), [`link_nd`] (any dimension: `[z, y, x]` in 3-D) and the streaming
//!   [`Linker`] (`Linker<D>`, 2-D by default): trackpy `link` semantics. Levels are frame numbers
//!   (a missing number is an empty level: it links nothing, it only ages the tracks in
//!   memory). Sources at a frame `t` are the tracks last seen at a frame `l` with
//!   `t − l ≤ memory + 1`, i.e. absent for at most `memory` frames (at their last position);
//!   destinations are the new rows. Only the frames present are visited and ageing comes from
//!   frame-number differences, so gaps cost nothing. Distances are Euclidean, squares summed
//!   over the axes in column order as SciPy's `cKDTree` (trackpy's) does, so ties resolve the
//!   same way in every dimension. Each destination keeps its
//!   ≤ `max_neighbors` (10) nearest sources within `search_range` (+1e-7). Connected
//!   components (subnets) of this bipartite graph are solved **optimally, however large**: a
//!   link costs d², leaving a source unlinked costs `search_range²`, and the minimum-cost
//!   assignment is found by sparse shortest augmenting paths (Jonker–Volgenant, as SciPy's
//!   `linear_sum_assignment`, on the candidate edges only), subnets in parallel. Where trackpy
//!   stops with `SubnetOversizeException` (more than 30 sources), this goes on. Unclaimed
//!   destinations start new tracks, numbered as trackpy numbers them: subnet by subnet, in
//!   ascending order of each subnet's last destination row (a destination without candidates
//!   on its own), and within a subnet in row order (trackpy's order there follows a Python
//!   `set`'s, by object address).
//!   - [`LinkParams::max_subnet_sources`] (no cap by default) is an explicit opt-in: larger
//!     subnets are then solved by a **bounded greedy** assignment (links taken in ascending
//!     distance, ties by (source, destination) index), counted in
//!     [`LinkStats::fallback_subnets`].
//!   - [`LinkParams::adaptive`]: trackpy's adaptive search (`adaptive_stop`, `adaptive_step`):
//!     a subnet with more than [`Adaptive::max_subnet`] (15) sources is split by reducing its
//!     search range by `step` until its parts are small enough; each part's null link then
//!     costs its own range². Where trackpy gives up (the range reached `stop`), the part is
//!     solved exactly at that range and counted in [`LinkStats::adaptive_unresolved`].
//!   - [`LinkParams::link_strategy`] = [`LinkStrategy::Drop`]: trackpy's `link_strategy='drop'`:
//!     the particles of every subnet other than one source with one destination go unlinked
//!     (its sources end, or wait in memory; its destinations start new tracks), and a subnet
//!     of more than [`DROP_MAX_SUBNET`] (30) sources is an error, as trackpy raises
//!     `SubnetOversizeException` there (with the adaptive search: a part still above
//!     [`Adaptive::max_subnet`] sources once its range reached `stop`); see
//!     [`is_subnet_oversize`].
//!   - [`LinkParams::predictor`]: trackpy's `NearestVelocityPredict` (sources are searched at
//!     their predicted positions). As with trackpy's predictors, which link the frames given,
//!     `memory` then counts frames present, not frame numbers.
//!   - [`Linker`] takes one frame at a time and holds only the tracks `memory` can still
//!     continue: a movie of 10⁵ frames needs memory for its particles, not its frames.
//! * [`link_greedy`] and the streaming [`GreedyLinker`]: the seed's greedy `ParticleTracker`
//!   (spec §3.5) for compatibility. Its `max_gap` means what `memory` means for [`link`]: a
//!   track absent for at most `max_gap` frames between two appearances is continued (0 =
//!   consecutive frames only).
//! * [`filter_stubs`]: keep only tracks with at least n points.
//!
//! Every result is identical to trackpy 0.7 on its own test cases and on the fixtures
//! (`crates/algorithms/tests/track_*.rs`, goldens made by `scripts/fixtures/track_trackpy.py`),
//! up to track numbering, and wherever several assignments have exactly the same cost (then
//! both are optimal, and each tool picks one deterministically).

mod assign;
mod greedy;
mod linker;
mod predict;

use std::collections::HashMap;

use bridge_core::{BridgeError, Result};

pub use greedy::{GreedyLinker, GreedyParams, link_greedy, long_enough};
pub use linker::Linker;

/// Linking strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// trackpy-conformant optimal subnet linking.
    #[default]
    Optimal,
    /// The seed's greedy tracker (nearest particle per track, greedy one-to-one).
    Greedy,
}

/// How the subnets of [`link`] are resolved (trackpy's `link_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkStrategy {
    /// Every subnet is solved optimally (trackpy's `recursive`, `nonrecursive`, `numba` and
    /// `hybrid` strategies, which find the same links where trackpy can solve the subnet).
    #[default]
    Solve,
    /// trackpy's `drop`: a subnet of one source and one destination is linked; in every other
    /// subnet the sources go unlinked (a track ends, or waits in `memory`) and the destinations
    /// start new tracks. A subnet of more than [`DROP_MAX_SUBNET`] sources (with the adaptive
    /// search: a part of more than [`Adaptive::max_subnet`] sources once its range reached
    /// `stop`) is an error, where trackpy raises `SubnetOversizeException`
    /// ([`is_subnet_oversize`]). [`LinkParams::max_subnet_sources`] must stay unset.
    Drop,
}

/// The largest `memory` ([`LinkParams::memory`], [`GreedyParams::max_gap`]) taken: 2⁴⁰
/// frames.
pub const MAX_MEMORY: usize = 1 << 40;

/// trackpy's `Linker.MAX_SUB_NET_SIZE`: [`LinkStrategy::Drop`] gives up on a subnet with more
/// sources (without the adaptive search).
pub const DROP_MAX_SUBNET: usize = 30;

/// The start of the message of [`LinkStrategy::Drop`]'s error on a too large subnet.
const OVERSIZE: &str = "SubnetOversizeException: ";

/// The error of [`LinkStrategy::Drop`] on a subnet of `sources` sources (more than `max`) at
/// frame `frame`.
pub(crate) fn subnet_oversize(frame: i64, sources: usize, max: usize) -> BridgeError {
    BridgeError::InvalidInput(
        format!(
            "{OVERSIZE}frame {frame}: a subnetwork contains {sources} points (sources), more \
             than {max}: link_strategy 'drop' gives up here, as trackpy does; use a smaller \
             search_range (or the adaptive search)"
        )
        .into(),
    )
}

/// Whether `e` is [`LinkStrategy::Drop`]'s error on a too large subnet (trackpy's
/// `SubnetOversizeException`), an [`BridgeError::InvalidInput`].
pub fn is_subnet_oversize(e: &BridgeError) -> bool {
    matches!(e, BridgeError::InvalidInput(m) if m.message.starts_with(OVERSIZE))
}

/// trackpy's adaptive search: see the [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adaptive {
    /// trackpy's `adaptive_stop`: the search range is not reduced below this.
    pub stop: f64,
    /// trackpy's `adaptive_step` (0.95 by default): the factor applied to the search range at
    /// each reduction, in (0, 1).
    pub step: f64,
    /// Subnets with more sources are split (trackpy's `Linker.MAX_SUB_NET_SIZE_ADAPTIVE`, 15).
    pub max_subnet: usize,
}

impl Adaptive {
    /// trackpy's `adaptive_stop` and `adaptive_step`, with its subnet size (15).
    pub fn new(stop: f64, step: f64) -> Self {
        Adaptive {
            stop,
            step,
            max_subnet: 15,
        }
    }
}

/// Velocity samples that stand for the velocity field before the second frame is linked
/// (trackpy's `initial_guess_positions` and `initial_guess_vels`, `[y, x]` each: 2-D linking
/// only).
#[derive(Debug, Clone, PartialEq)]
pub struct InitialVelocities {
    /// Where the samples are.
    pub positions: Vec<[f64; 2]>,
    /// Their velocities, in position units per frame.
    pub velocities: Vec<[f64; 2]>,
}

/// trackpy's `NearestVelocityPredict` parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct VelocityPredict {
    /// The velocity field is made from the `span + 1` most recent frames (trackpy's `span`,
    /// 1 by default).
    pub span: usize,
    /// The field used for the first link, instead of zero velocities.
    pub initial_guess: Option<InitialVelocities>,
}

impl Default for VelocityPredict {
    fn default() -> Self {
        VelocityPredict {
            span: 1,
            initial_guess: None,
        }
    }
}

/// Where a track is searched for in the next frame.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Predictor {
    /// At its last position (trackpy's default).
    #[default]
    None,
    /// Carried by the velocity of the nearest recently tracked particle (trackpy's
    /// `NearestVelocityPredict`; the [module documentation](self) says how `memory` counts).
    NearestVelocity(VelocityPredict),
}

/// Parameters of [`link`] and [`Linker`].
#[derive(Debug, Clone, PartialEq)]
pub struct LinkParams {
    /// Maximum displacement between linked points (same units as the positions).
    pub search_range: f64,
    /// Frames a particle may be absent between two appearances and still be linked (0 = only
    /// consecutive frames are linked; trackpy's `memory`).
    pub memory: usize,
    /// Candidates kept per destination (trackpy: 10).
    pub max_neighbors: usize,
    /// Subnets with more sources than this are solved by the bounded greedy assignment
    /// instead of exactly, and counted in [`LinkStats::fallback_subnets`]. `usize::MAX` (the
    /// default): every subnet is solved exactly.
    pub max_subnet_sources: usize,
    /// trackpy's adaptive search (`None`: off, the default).
    pub adaptive: Option<Adaptive>,
    /// Where tracks are searched for (trackpy's `predictor`).
    pub predictor: Predictor,
    /// How subnets are resolved (trackpy's `link_strategy`): solved (the default) or dropped.
    pub link_strategy: LinkStrategy,
    /// Cancellation and progress, shared with the caller (not a setting: any two compare
    /// equal): [`link_nd`] checks it before each frame (then returns
    /// [`BridgeError::Cancelled`]) and counts the frames linked.
    pub control: bridge_core::control::Control,
}

/// At most this many search-range reductions in the adaptive search.
pub const MAX_ADAPTIVE_STEPS: f64 = 10_000.0;

/// Largest velocity predictor `span`.
pub const MAX_SPAN: usize = 1000;

/// The largest `search_range` accepted: its square (the cost of an unlinked track) and the
/// sums of such costs in the assignment's potentials stay finite.
pub const MAX_SEARCH_RANGE: f64 = 1e100;

impl LinkParams {
    /// trackpy defaults for a search range and memory (no subnet cap, no adaptive search, no
    /// predictor).
    pub fn new(search_range: f64, memory: usize) -> Self {
        LinkParams {
            search_range,
            memory,
            max_neighbors: 10,
            max_subnet_sources: usize::MAX,
            adaptive: None,
            predictor: Predictor::None,
            link_strategy: LinkStrategy::Solve,
            control: bridge_core::control::Control::default(),
        }
    }

    /// Check every value: [`BridgeError::InvalidArgument`] naming the parameter.
    pub fn validate(&self) -> Result<()> {
        if !(self.search_range.is_finite() && self.search_range > 0.0) {
            return Err(BridgeError::invalid_argument(
                "search_range",
                format!("must be a positive number, got {}", self.search_range),
            ));
        }
        if self.search_range > MAX_SEARCH_RANGE {
            // its square is the cost of leaving a track unlinked, summed with others in the
            // assignment's potentials: it must stay far from f64's overflow
            return Err(BridgeError::invalid_argument(
                "search_range",
                format!(
                    "{:e} is unreasonably large (at most {MAX_SEARCH_RANGE:e})",
                    self.search_range
                ),
            ));
        }
        if self.memory > MAX_MEMORY {
            return Err(BridgeError::invalid_argument(
                "memory",
                format!(
                    "{} is unreasonably large (at most {MAX_MEMORY})",
                    self.memory
                ),
            ));
        }
        if self.max_neighbors == 0 {
            return Err(BridgeError::invalid_argument(
                "max_neighbors",
                "must be at least 1",
            ));
        }
        if self.max_subnet_sources == 0 {
            return Err(BridgeError::invalid_argument(
                "max_subnet_sources",
                "must be at least 1",
            ));
        }
        if self.link_strategy == LinkStrategy::Drop && self.max_subnet_sources != usize::MAX {
            return Err(BridgeError::invalid_argument(
                "max_subnet_sources",
                "caps the subnets that are solved; link strategy 'drop' solves none",
            ));
        }
        if let Some(a) = &self.adaptive {
            if !(a.stop.is_finite() && a.stop > 0.0) {
                return Err(BridgeError::invalid_argument(
                    "adaptive_stop",
                    format!("must be a positive number, got {}", a.stop),
                ));
            }
            if !(a.step.is_finite() && a.step > 0.0 && a.step < 1.0) {
                return Err(BridgeError::invalid_argument(
                    "adaptive_step",
                    format!("must be between 0 and 1 (exclusive), got {}", a.step),
                ));
            }
            if a.max_subnet == 0 {
                return Err(BridgeError::invalid_argument(
                    "adaptive max_subnet",
                    "must be at least 1",
                ));
            }
            let steps = (a.stop / self.search_range).ln() / a.step.ln();
            if steps.is_nan() || steps > MAX_ADAPTIVE_STEPS {
                return Err(BridgeError::invalid_argument(
                    "adaptive_step",
                    format!(
                        "reducing search_range {} by {} down to adaptive_stop {} takes more \
                         than {MAX_ADAPTIVE_STEPS} steps; use a smaller step or a larger stop",
                        self.search_range, a.step, a.stop
                    ),
                ));
            }
        }
        if let Predictor::NearestVelocity(v) = &self.predictor {
            if !(1..=MAX_SPAN).contains(&v.span) {
                return Err(BridgeError::invalid_argument(
                    "span",
                    format!("must be between 1 and {MAX_SPAN}, got {}", v.span),
                ));
            }
            if let Some(g) = &v.initial_guess {
                if g.positions.len() != g.velocities.len() || g.positions.is_empty() {
                    return Err(BridgeError::invalid_argument(
                        "initial_guess",
                        format!(
                            "needs as many velocities as positions, at least one ({} and {})",
                            g.positions.len(),
                            g.velocities.len()
                        ),
                    ));
                }
                let all = g.positions.iter().chain(&g.velocities);
                if all.flatten().any(|c| !c.is_finite()) {
                    return Err(BridgeError::invalid_argument(
                        "initial_guess",
                        "positions and velocities must be finite",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What the linker did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Levels processed: the distinct frame numbers present (missing frame numbers are never
    /// visited, whatever the memory).
    pub levels: usize,
    /// Non-trivial subnets solved (≥ 1 source and ≥ 1 destination).
    pub subnets: usize,
    /// Sources in the largest subnet.
    pub largest_subnet: usize,
    /// Subnets solved by the bounded greedy assignment ([`LinkParams::max_subnet_sources`])
    /// instead of exactly.
    pub fallback_subnets: usize,
    /// Number of tracks.
    pub tracks: usize,
    /// Subnets whose search range the adaptive search reduced.
    pub adaptive_subnets: usize,
    /// Parts of subnets still larger than [`Adaptive::max_subnet`] when the adaptive search
    /// reached `adaptive_stop` (trackpy raises `SubnetOversizeException`): solved exactly.
    pub adaptive_unresolved: usize,
    /// Subnets (or parts of subnets split by the adaptive search) whose particles
    /// [`LinkStrategy::Drop`] left unlinked.
    pub dropped_subnets: usize,
}

/// The Euclidean distance between `p` and `q` as trackpy computes it (SciPy's `cKDTree`): the
/// squared differences summed axis by axis in column order, then the square root. (`-0.0 + x`
/// is `x` exactly, so the sum starts from the first square: `dy² + dx²` in 2-D.)
#[inline(always)]
pub(crate) fn distance<const D: usize>(p: &[f64; D], q: &[f64; D]) -> f64 {
    let mut s = -0.0f64;
    for a in 0..D {
        let d = p[a] - q[a];
        s += d * d;
    }
    s.sqrt()
}

/// Whether every coordinate of `p` is finite.
fn finite<const D: usize>(p: &[f64; D]) -> bool {
    p.iter().all(|c| c.is_finite())
}

/// A frame pushed to a streaming linker (after `prev`, the last one): its number must grow and
/// its positions be finite.
fn check_pushed_frame<const D: usize>(
    prev: Option<i64>,
    frame: i64,
    pos: &[[f64; D]],
) -> Result<()> {
    if let Some(prev) = prev
        && frame <= prev
    {
        return Err(BridgeError::invalid_argument(
            "frame",
            format!("frames must be pushed in increasing order: {frame} after {prev}"),
        ));
    }
    if let Some(i) = pos.iter().position(|p| !finite(p)) {
        return Err(BridgeError::InvalidInput(
            format!(
                "frame {frame}: point {i} (0-based) has a non-finite position {:?}",
                pos[i]
            )
            .into(),
        ));
    }
    Ok(())
}

fn check_inputs<const D: usize>(frames: &[i64], pos: &[[f64; D]]) -> Result<()> {
    if frames.len() != pos.len() {
        return Err(BridgeError::shape_mismatch(
            frames.len(),
            pos.len(),
            "link: frames vs positions",
        ));
    }
    if let Some(i) = pos.iter().position(|p| !finite(p)) {
        return Err(BridgeError::InvalidInput(
            format!("point {i} (0-based) has a non-finite position {:?}", pos[i]).into(),
        ));
    }
    Ok(())
}

/// Row indices per frame, frames ascending, rows in input order.
fn group_by_frame(frames: &[i64]) -> Vec<(i64, Vec<usize>)> {
    let mut map: std::collections::BTreeMap<i64, Vec<usize>> = std::collections::BTreeMap::new();
    for (i, &f) in frames.iter().enumerate() {
        map.entry(f).or_default().push(i);
    }
    map.into_iter().collect()
}

/// trackpy-conformant linking. `frames[i]`, `pos[i] = [y, x]` per row (any row order); returns
/// a particle id per row and statistics. The frames present are pushed to a [`Linker`] in
/// ascending order. [`link_nd`] links in any dimension.
pub fn link(frames: &[i64], pos: &[[f64; 2]], p: &LinkParams) -> Result<(Vec<i64>, LinkStats)> {
    link_nd(frames, pos, p)
}

/// [`link`] in `D` dimensions: `pos[i]` holds a row's coordinates in trackpy's `pos_columns`
/// order (`[z, y, x]` in 3-D, `[y, x]` in 2-D, `[x]` in 1-D). Distances are Euclidean, summed
/// over the axes in that order as trackpy does, so equal distances tie the same way.
///
/// ```
/// use algorithms::track::{LinkParams, link_nd};
/// let frames = [0, 0, 1, 1];
/// let pos = [[0.0, 0.0, 0.0], [5.0, 5.0, 5.0], [5.0, 5.5, 5.0], [0.5, 0.0, 0.0]];
/// let (ids, _) = link_nd(&frames, &pos, &LinkParams::new(1.0, 0))?;
/// assert_eq!(ids, [0, 1, 1, 0]);
/// # Ok::<(), bridge_core::BridgeError>(())
/// ```
///
/// A [`VelocityPredict::initial_guess`] holds 2-D samples: with another `D` it is an
/// [`BridgeError::InvalidArgument`].
pub fn link_nd<const D: usize>(
    frames: &[i64],
    pos: &[[f64; D]],
    p: &LinkParams,
) -> Result<(Vec<i64>, LinkStats)> {
    p.validate()?;
    check_inputs(frames, pos)?;
    let mut linker = Linker::<D>::new_nd(p.clone())?;
    let mut ids = vec![-1i64; pos.len()];
    let mut frame_pos = Vec::new();
    let mut frame_ids = Vec::new();
    let groups = group_by_frame(frames);
    p.control.set_total(groups.len() as u64);
    for (t, rows) in groups {
        p.control.check("link")?;
        frame_pos.clear();
        frame_pos.extend(rows.iter().map(|&r| pos[r]));
        linker.push_frame_into(t, &frame_pos, &mut frame_ids)?;
        for (&r, &id) in rows.iter().zip(&frame_ids) {
            ids[r] = id;
        }
        p.control.advance(1);
    }
    Ok((ids, linker.stats()))
}

/// Set the id of rows whose track has fewer than `min_len` rows to −1 (trackpy `filter_stubs`).
pub fn filter_stubs(ids: &mut [i64], min_len: usize) {
    let mut count: HashMap<i64, usize> = HashMap::new();
    for &i in ids.iter() {
        if i >= 0 {
            *count.entry(i).or_default() += 1;
        }
    }
    for i in ids.iter_mut() {
        if *i >= 0 && count[i] < min_len {
            *i = -1;
        }
    }
}

/// Link [`crate::detect::Particle`]s in place (sets `id`), using the refined position when a
/// particle has one and the integer LoG position otherwise.
pub fn link_particles(
    particles: &mut [crate::detect::Particle],
    p: &LinkParams,
) -> Result<LinkStats> {
    let frames: Vec<i64> = particles.iter().map(|q| i64::from(q.frame)).collect();
    let pos: Vec<[f64; 2]> = particles
        .iter()
        .map(|q| q.refined.map_or([q.y, q.x], |r| [r.y, r.x]))
        .collect();
    let (ids, stats) = link(&frames, &pos, p)?;
    for (q, id) in particles.iter_mut().zip(ids) {
        q.id = Some(id);
    }
    Ok(stats)
}
