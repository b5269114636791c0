//! The seed's greedy tracker (spec §3.5), kept for compatibility: see [`link_greedy`].

use std::collections::HashSet;

use bridge_core::{BridgeError, Result};

use super::grid::Grid;
use super::{check_inputs, group_by_frame};

/// Parameters of the seed's greedy tracker (spec §3.5).
#[derive(Debug, Clone, PartialEq)]
pub struct GreedyParams {
    /// Maximum distance between a track's last point and a new particle.
    pub max_distance: f64,
    /// Frames a track may miss and still be continued: a track last seen at frame `e` may be
    /// continued at frame `f` iff `f − e − 1 ≤ max_gap` (0 = consecutive frames only), the same
    /// meaning as [`LinkParams::memory`](super::LinkParams::memory). Gaps are filled by interpolation.
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
                    let k = k as usize;
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
