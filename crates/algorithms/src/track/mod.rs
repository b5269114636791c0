//! Linking detections into trajectories (spec §3).
//!
//! * [`link`]: trackpy `link` semantics. Levels are frame numbers (a missing number is an
//!   empty level: it links nothing, it only ages the tracks in memory). Sources at a frame `t`
//!   are the tracks last seen at a frame `l` with `t − l ≤ memory + 1`, i.e. absent for at most
//!   `memory` frames (at their last position); destinations are the new rows. Only the frames
//!   present are visited and ageing comes from frame-number differences, so gaps cost
//!   nothing. Each destination keeps its ≤ `max_neighbors` (10) nearest sources within
//!   `search_range` (+1e-7). Connected components (subnets) of this bipartite
//!   graph are solved **optimally** as a rectangular assignment (Hungarian / shortest augmenting
//!   path): a link costs d², leaving a source unlinked costs `search_range²`. Subnets with more
//!   than `max_subnet_sources` sources (default 600) are solved by a **bounded greedy fallback**
//!   (links taken in ascending distance, ties by (source, destination) index); how often this
//!   happened is reported in [`LinkStats`]. Unclaimed destinations start new tracks, numbered in
//!   destination row order.
//! * [`link_greedy`]: the seed's greedy `ParticleTracker` (spec §3.5) for compatibility. Its
//!   `max_gap` means what `memory` means for [`link`]: a track absent for at most `max_gap`
//!   frames between two appearances is continued (0 = consecutive frames only).
//! * [`filter_stubs`]: keep only tracks with at least n points.

use std::collections::{HashMap, HashSet};

use bridge_core::{BridgeError, Result};

/// Linking strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// trackpy-conformant optimal subnet linking.
    #[default]
    Optimal,
    /// The seed's greedy tracker (nearest particle per track, greedy one-to-one).
    Greedy,
}

/// Parameters of [`link`].
#[derive(Debug, Clone, PartialEq)]
pub struct LinkParams {
    /// Maximum displacement between linked points (same units as the positions).
    pub search_range: f64,
    /// Frames a particle may be absent between two appearances and still be linked (0 = only
    /// consecutive frames are linked; trackpy's `memory`).
    pub memory: usize,
    /// Candidates kept per destination (trackpy: 10).
    pub max_neighbors: usize,
    /// Subnets with more sources than this use the bounded greedy fallback.
    pub max_subnet_sources: usize,
}

impl LinkParams {
    /// trackpy defaults for a search range and memory.
    pub fn new(search_range: f64, memory: usize) -> Self {
        LinkParams {
            search_range,
            memory,
            max_neighbors: 10,
            max_subnet_sources: 600,
        }
    }

    fn validate(&self) -> Result<()> {
        if !(self.search_range.is_finite() && self.search_range > 0.0) {
            return Err(BridgeError::invalid_argument(
                "search_range",
                format!("must be a positive number, got {}", self.search_range),
            ));
        }
        if self.memory > (1 << 40) {
            return Err(BridgeError::invalid_argument(
                "memory",
                "is unreasonably large",
            ));
        }
        if self.max_neighbors == 0 {
            return Err(BridgeError::invalid_argument(
                "max_neighbors",
                "must be at least 1",
            ));
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
    /// Subnets solved by the bounded greedy fallback instead of exactly.
    pub fallback_subnets: usize,
    /// Number of tracks.
    pub tracks: usize,
}

fn check_inputs(frames: &[i64], pos: &[[f64; 2]]) -> Result<()> {
    if frames.len() != pos.len() {
        return Err(BridgeError::shape_mismatch(
            frames.len(),
            pos.len(),
            "link: frames vs positions",
        ));
    }
    if let Some(i) = pos
        .iter()
        .position(|p| !(p[0].is_finite() && p[1].is_finite()))
    {
        return Err(BridgeError::InvalidInput(format!(
            "point {i} (0-based) has a non-finite position {:?}",
            pos[i]
        )));
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

struct Grid {
    cell: f64,
    map: HashMap<(i64, i64), Vec<usize>>,
}

impl Grid {
    fn new(pts: &[[f64; 2]], cell: f64) -> Self {
        let mut map: HashMap<(i64, i64), Vec<usize>> = HashMap::new();
        for (i, p) in pts.iter().enumerate() {
            map.entry(Self::key(p, cell)).or_default().push(i);
        }
        Grid { cell, map }
    }
    fn key(p: &[f64; 2], cell: f64) -> (i64, i64) {
        ((p[0] / cell).floor() as i64, (p[1] / cell).floor() as i64)
    }
    fn near(&self, p: &[f64; 2], out: &mut Vec<usize>) {
        out.clear();
        let (ky, kx) = Self::key(p, self.cell);
        for dy in -1..=1 {
            for dx in -1..=1 {
                // keys saturate for huge coordinates; a neighbour past i64's range is empty
                let (Some(y), Some(x)) = (ky.checked_add(dy), kx.checked_add(dx)) else {
                    continue;
                };
                if let Some(v) = self.map.get(&(y, x)) {
                    out.extend_from_slice(v);
                }
            }
        }
    }
}

/// Solve a rectangular assignment `n ≤ m` minimising the sum of `cost[i][j]` (Hungarian method
/// with potentials, O(n²m)); returns the column of every row.
fn hungarian(cost: &[Vec<f64>], m: usize) -> Vec<usize> {
    let n = cost.len();
    let inf = f64::INFINITY;
    let mut u = vec![0.0f64; n + 1];
    let mut v = vec![0.0f64; m + 1];
    let mut p = vec![0usize; m + 1];
    let mut way = vec![0usize; m + 1];
    for i in 1..=n {
        p[0] = i;
        let mut j0 = 0usize;
        let mut minv = vec![inf; m + 1];
        let mut used = vec![false; m + 1];
        loop {
            used[j0] = true;
            let i0 = p[j0];
            let mut delta = inf;
            let mut j1 = 0usize;
            for j in 1..=m {
                if !used[j] {
                    let cur = cost[i0 - 1][j - 1] - u[i0] - v[j];
                    if cur < minv[j] {
                        minv[j] = cur;
                        way[j] = j0;
                    }
                    if minv[j] < delta {
                        delta = minv[j];
                        j1 = j;
                    }
                }
            }
            if j1 == 0 || !delta.is_finite() {
                break;
            }
            for j in 0..=m {
                if used[j] {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            if p[j0] == 0 {
                break;
            }
        }
        loop {
            let j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
            if j0 == 0 {
                break;
            }
        }
    }
    let mut ans = vec![usize::MAX; n];
    for j in 1..=m {
        if p[j] != 0 {
            ans[p[j] - 1] = j - 1;
        }
    }
    ans
}

/// Solve one subnet: `cands[s]` = (local destination, d²) for local source s. Returns the local
/// destination of each source (`None` = null link) and whether the fallback was used.
fn solve_subnet(
    cands: &[Vec<(usize, f64)>],
    n_dest: usize,
    null_cost: f64,
    max_exact: usize,
) -> (Vec<Option<usize>>, bool) {
    let k = cands.len();
    if k == 1 {
        // single source: best candidate (nearest) if cheaper than the null link
        let best = cands[0].iter().filter(|c| c.1 <= null_cost).min_by(|a, b| {
            a.1.partial_cmp(&b.1)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.0.cmp(&b.0))
        });
        return (vec![best.map(|c| c.0)], false);
    }
    if k > max_exact {
        let mut edges: Vec<(f64, usize, usize)> = cands
            .iter()
            .enumerate()
            .flat_map(|(s, cs)| cs.iter().map(move |&(d, c)| (c, s, d)))
            .collect();
        edges.sort_by(|a, b| {
            a.0.partial_cmp(&b.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then((a.1, a.2).cmp(&(b.1, b.2)))
        });
        let mut out = vec![None; k];
        let mut taken = vec![false; n_dest];
        for (c, s, d) in edges {
            if out[s].is_none() && !taken[d] && c <= null_cost {
                out[s] = Some(d);
                taken[d] = true;
            }
        }
        return (out, true);
    }
    // columns: destinations, then one private dummy per source
    let m = n_dest + k;
    let big = 1.0e18;
    let mut cost = vec![vec![big; m]; k];
    for (s, cs) in cands.iter().enumerate() {
        for &(d, c) in cs {
            cost[s][d] = c;
        }
        cost[s][n_dest + s] = null_cost;
    }
    let ans = hungarian(&cost, m);
    (
        ans.iter()
            .map(|&j| if j < n_dest { Some(j) } else { None })
            .collect(),
        false,
    )
}

/// trackpy-conformant linking. `frames[i]`, `pos[i] = [y, x]` per row (any row order); returns
/// a particle id per row and statistics.
pub fn link(frames: &[i64], pos: &[[f64; 2]], p: &LinkParams) -> Result<(Vec<i64>, LinkStats)> {
    p.validate()?;
    check_inputs(frames, pos)?;
    let mut ids = vec![-1i64; pos.len()];
    let mut stats = LinkStats::default();
    // track state: last position, last frame
    let mut track_pos: Vec<[f64; 2]> = Vec::new();
    let mut track_last: Vec<i64> = Vec::new();
    let mut active: Vec<usize> = Vec::new(); // track ids eligible as sources, ascending
    let sr = p.search_range;
    let null_cost = sr * sr;
    let reach = sr + 1e-7;
    // a track last seen at frame `l` is a source at frame `t` iff t − l ≤ memory + 1
    let max_step = p.memory as u64 + 1;
    let mut near = Vec::new();
    // Only the frames present are visited: a missing frame number is an empty level, which
    // links nothing and only ages the tracks in memory, and ageing is applied below from the
    // frame-number difference. Gaps therefore cost nothing, whatever their length.
    for (t, rows) in group_by_frame(frames) {
        let rows: &[usize] = &rows;
        stats.levels += 1;
        // sources: tracks last seen within memory + 1 levels
        active.retain(|&tr| t.abs_diff(track_last[tr]) <= max_step);
        let src_pos: Vec<[f64; 2]> = active.iter().map(|&tr| track_pos[tr]).collect();
        // cells wider than the reach (margin for rounding): a source within reach of a
        // destination is always in one of the 3×3 cells around it
        let grid = Grid::new(&src_pos, reach * 1.25);
        // candidates per destination: ≤ max_neighbors nearest sources within reach
        let mut src_cands: Vec<Vec<(usize, f64)>> = vec![Vec::new(); active.len()];
        let mut dest_has = vec![false; rows.len()];
        for (di, &row) in rows.iter().enumerate() {
            grid.near(&pos[row], &mut near);
            let mut c: Vec<(f64, usize)> = near
                .iter()
                .map(|&s| {
                    let dy = pos[row][0] - src_pos[s][0];
                    let dx = pos[row][1] - src_pos[s][1];
                    ((dy * dy + dx * dx).sqrt(), s)
                })
                .filter(|&(d, _)| d <= reach)
                .collect();
            c.sort_by(|a, b| {
                a.0.partial_cmp(&b.0)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(a.1.cmp(&b.1))
            });
            c.truncate(p.max_neighbors);
            dest_has[di] = !c.is_empty();
            for (d, s) in c {
                src_cands[s].push((di, d * d));
            }
        }
        // subnets: union-find over sources (0..S) and destinations (S..S+D)
        let ns = active.len();
        let mut parent: Vec<usize> = (0..ns + rows.len()).collect();
        fn find(parent: &mut [usize], mut a: usize) -> usize {
            while parent[a] != a {
                parent[a] = parent[parent[a]];
                a = parent[a];
            }
            a
        }
        for (s, cs) in src_cands.iter().enumerate() {
            for &(d, _) in cs {
                let (a, b) = (find(&mut parent, s), find(&mut parent, ns + d));
                if a != b {
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
        let mut comps: HashMap<usize, (Vec<usize>, Vec<usize>)> = HashMap::new();
        for (s, cs) in src_cands.iter().enumerate() {
            if !cs.is_empty() {
                let r = find(&mut parent, s);
                comps.entry(r).or_default().0.push(s);
            }
        }
        for (d, &has) in dest_has.iter().enumerate() {
            if has {
                let r = find(&mut parent, ns + d);
                comps.entry(r).or_default().1.push(d);
            }
        }
        let mut roots: Vec<usize> = comps.keys().copied().collect();
        roots.sort_unstable();
        let mut dest_track: Vec<Option<usize>> = vec![None; rows.len()];
        for root in roots {
            let (srcs, dsts) = &comps[&root];
            stats.subnets += 1;
            stats.largest_subnet = stats.largest_subnet.max(srcs.len());
            let local_d: HashMap<usize, usize> =
                dsts.iter().enumerate().map(|(i, &d)| (d, i)).collect();
            let cands: Vec<Vec<(usize, f64)>> = srcs
                .iter()
                .map(|&s| {
                    src_cands[s]
                        .iter()
                        .map(|&(d, c)| (local_d[&d], c))
                        .collect()
                })
                .collect();
            let (assign, fb) = solve_subnet(&cands, dsts.len(), null_cost, p.max_subnet_sources);
            stats.fallback_subnets += usize::from(fb);
            for (ls, a) in assign.iter().enumerate() {
                if let Some(ld) = a {
                    dest_track[dsts[*ld]] = Some(active[srcs[ls]]);
                }
            }
        }
        for (di, &row) in rows.iter().enumerate() {
            let tr = match dest_track[di] {
                Some(tr) => tr,
                None => {
                    track_pos.push(pos[row]);
                    track_last.push(t);
                    active.push(track_pos.len() - 1);
                    track_pos.len() - 1
                }
            };
            track_pos[tr] = pos[row];
            track_last[tr] = t;
            ids[row] = tr as i64;
        }
        active.sort_unstable();
    }
    stats.tracks = track_pos.len();
    Ok((ids, stats))
}

/// Parameters of the seed's greedy tracker (spec §3.5).
#[derive(Debug, Clone, PartialEq)]
pub struct GreedyParams {
    /// Maximum distance between a track's last point and a new particle.
    pub max_distance: f64,
    /// Frames a track may miss and still be continued: a track last seen at frame `e` may be
    /// continued at frame `f` iff `f − e − 1 ≤ max_gap` (0 = consecutive frames only), the same
    /// meaning as [`LinkParams::memory`]. Gaps are filled by interpolation.
    pub max_gap: usize,
    /// Tracks with fewer points (interpolated points included) are dropped (id −1).
    pub min_track_length: usize,
}

/// The seed's greedy tracker. At each frame present (ascending; missing frame numbers cost
/// nothing), every track still within `max_gap` picks its nearest particle of the frame (ties:
/// lowest row); the (distance, track, row) triples within `max_distance` are taken in ascending
/// order, each track and row at most once; unclaimed particles start new tracks. Returns an id
/// per row, −1 for rows of tracks shorter than `min_track_length`, where a track's length is
/// `last frame − first frame + 1` (interpolated gap points count).
pub fn link_greedy(frames: &[i64], pos: &[[f64; 2]], p: &GreedyParams) -> Result<Vec<i64>> {
    check_inputs(frames, pos)?;
    if p.max_gap > (1 << 40) {
        return Err(BridgeError::invalid_argument(
            "max_gap",
            "is unreasonably large",
        ));
    }
    if !(p.max_distance.is_finite() && p.max_distance > 0.0) {
        return Err(BridgeError::invalid_argument(
            "max_distance",
            "must be a positive number",
        ));
    }
    let max_step = p.max_gap as u64 + 1;
    let mut ids = vec![-1i64; pos.len()];
    // track: last pos, end frame, start frame
    let mut tracks: Vec<([f64; 2], i64, i64)> = Vec::new();
    let mut active: Vec<usize> = Vec::new(); // tracks within max_gap, ascending
    let mut near = Vec::new();
    // cells wider than max_distance (margin for rounding): a row within max_distance of a
    // point is always in one of the 3×3 cells around it
    let cell = p.max_distance * 1.25;
    for (frame, rows) in group_by_frame(frames) {
        active.retain(|&tr| frame.abs_diff(tracks[tr].1) <= max_step);
        let row_pos: Vec<[f64; 2]> = rows.iter().map(|&r| pos[r]).collect();
        let grid = Grid::new(&row_pos, cell);
        let mut triples = Vec::new();
        for &tr in &active {
            let last = tracks[tr].0;
            // nearest row (first in row order among equals), kept if within max_distance
            grid.near(&last, &mut near);
            let best = near
                .iter()
                .map(|&k| {
                    let dy = row_pos[k][0] - last[0];
                    let dx = row_pos[k][1] - last[1];
                    ((dy * dy + dx * dx).sqrt(), rows[k])
                })
                .filter(|&(d, _)| d <= p.max_distance)
                .min_by(|a, b| {
                    a.0.partial_cmp(&b.0)
                        .unwrap_or(std::cmp::Ordering::Equal)
                        .then(a.1.cmp(&b.1))
                });
            if let Some((d, r)) = best {
                triples.push((d, tr, r));
            }
        }
        triples.sort_by(|a, b| {
            a.0.partial_cmp(&b.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then((a.1, a.2).cmp(&(b.1, b.2)))
        });
        let mut used_track: HashSet<usize> = HashSet::new();
        let mut used_row: HashSet<usize> = HashSet::new();
        for (_, tr, r) in triples {
            if used_track.contains(&tr) || used_row.contains(&r) {
                continue;
            }
            used_track.insert(tr);
            used_row.insert(r);
            tracks[tr].0 = pos[r];
            tracks[tr].1 = frame;
            ids[r] = tr as i64;
        }
        for &r in &rows {
            if !used_row.contains(&r) {
                tracks.push((pos[r], frame, frame));
                ids[r] = (tracks.len() - 1) as i64;
                active.push(tracks.len() - 1);
            }
        }
    }
    // length = end − start + 1 (gaps are filled by interpolation)
    for id in &mut ids {
        if *id >= 0 {
            let (_, end, start) = tracks[*id as usize];
            if end.abs_diff(start).saturating_add(1) < p.min_track_length as u64 {
                *id = -1;
            }
        }
    }
    Ok(ids)
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
