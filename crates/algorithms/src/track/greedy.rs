//! The seed's greedy tracker (spec §3.5), kept for compatibility: see [`link_greedy`] and the
//! streaming [`GreedyLinker`].

use bridge_core::{BridgeError, Result};

use super::{check_inputs, check_pushed_frame, group_by_frame};
use crate::grid::Grid;

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

impl GreedyParams {
    /// Check every value: [`BridgeError::InvalidArgument`] naming the parameter.
    pub fn validate(&self) -> Result<()> {
        if self.max_gap > super::MAX_MEMORY {
            return Err(BridgeError::invalid_argument(
                "max_gap",
                format!(
                    "{} is unreasonably large (at most {})",
                    self.max_gap,
                    super::MAX_MEMORY
                ),
            ));
        }
        if !(self.max_distance.is_finite() && self.max_distance > 0.0) {
            return Err(BridgeError::invalid_argument(
                "max_distance",
                "must be a positive number",
            ));
        }
        Ok(())
    }
}

/// The seed's greedy tracker. At each frame present (ascending; missing frame numbers cost
/// nothing), every track still within `max_gap` picks its nearest particle of the frame (ties:
/// lowest row); the (distance, track, row) triples within `max_distance` are taken in ascending
/// order, each track and row at most once; unclaimed particles start new tracks. Returns an id
/// per row, −1 for rows of tracks shorter than `min_track_length`, where a track's length is
/// `last frame − first frame + 1` (interpolated gap points count).
///
/// The frames are pushed to a [`GreedyLinker`] in ascending order (rows of a frame in input
/// order), so both give the same ids.
pub fn link_greedy(frames: &[i64], pos: &[[f64; 2]], p: &GreedyParams) -> Result<Vec<i64>> {
    check_inputs(frames, pos)?;
    let mut linker = GreedyLinker::new(p.clone())?;
    let mut ids = vec![-1i64; pos.len()];
    let (mut frame_pos, mut frame_ids) = (Vec::new(), Vec::new());
    // first and last frame of every track (ids are 0, 1, … in order of appearance)
    let mut span: Vec<(i64, i64)> = Vec::new();
    for (frame, rows) in group_by_frame(frames) {
        frame_pos.clear();
        frame_pos.extend(rows.iter().map(|&r| pos[r]));
        linker.push_frame_into(frame, &frame_pos, &mut frame_ids)?;
        for (&r, &id) in rows.iter().zip(&frame_ids) {
            ids[r] = id;
            let id = id as usize;
            if id == span.len() {
                span.push((frame, frame));
            }
            span[id].1 = frame;
        }
    }
    // length = end − start + 1 (gaps are filled by interpolation)
    for id in &mut ids {
        if *id >= 0 {
            let (start, end) = span[*id as usize];
            if !long_enough(start, end, p.min_track_length) {
                *id = -1;
            }
        }
    }
    Ok(ids)
}

/// Whether a greedy track seen from frame `start` to frame `end` counts at least `min_len`
/// points (`end − start + 1`, interpolated gap points included).
pub fn long_enough(start: i64, end: i64, min_len: usize) -> bool {
    end.abs_diff(start).saturating_add(1) >= min_len as u64
}

/// The seed's greedy tracker ([`link_greedy`]) one frame at a time, frames in increasing
/// order. Memory is proportional to the tracks still within `max_gap`, never to the frames
/// pushed. Track ids are numbered from 0 in order of appearance (in a frame, in row order).
/// `min_track_length` is not applied here (a track's length is known only once it ends; see
/// [`long_enough`] and [`GreedyLinker::is_active`]).
///
/// ```
/// use algorithms::track::{GreedyLinker, GreedyParams};
/// let p = GreedyParams { max_distance: 2.0, max_gap: 0, min_track_length: 0 };
/// let mut linker = GreedyLinker::new(p)?;
/// assert_eq!(linker.push_frame(0, &[[10.0, 10.0], [50.0, 50.0]])?, [0, 1]);
/// assert_eq!(linker.push_frame(1, &[[50.5, 50.0], [10.5, 10.0], [90.0, 0.0]])?, [1, 0, 2]);
/// assert!(linker.push_frame(1, &[]).is_err());
/// # Ok::<(), bridge_core::BridgeError>(())
/// ```
#[derive(Debug, Clone)]
pub struct GreedyLinker {
    params: GreedyParams,
    /// Tracks within `max_gap`, ascending id: id, last position, last frame.
    active: Vec<(i64, [f64; 2], i64)>,
    next_id: i64,
    frame: Option<i64>,
}

impl GreedyLinker {
    /// A linker with these parameters (checked: [`BridgeError::InvalidArgument`]).
    pub fn new(params: GreedyParams) -> Result<Self> {
        params.validate()?;
        Ok(GreedyLinker {
            params,
            active: Vec::new(),
            next_id: 0,
            frame: None,
        })
    }

    /// Tracks started so far.
    pub fn tracks(&self) -> usize {
        self.next_id as usize
    }

    /// Tracks held: those within `max_gap` of the last frame pushed.
    pub fn active_tracks(&self) -> usize {
        self.active.len()
    }

    /// Whether track `id` is still held, i.e. may be continued by a later frame; once false it
    /// stays false (its points are final).
    pub fn is_active(&self, id: i64) -> bool {
        self.active.binary_search_by_key(&id, |t| t.0).is_ok()
    }

    /// Link the points of frame `frame` (`[y, x]` each) and return the track id of each.
    pub fn push_frame(&mut self, frame: i64, pos: &[[f64; 2]]) -> Result<Vec<i64>> {
        let mut ids = Vec::with_capacity(pos.len());
        self.push_frame_into(frame, pos, &mut ids)?;
        Ok(ids)
    }

    /// [`GreedyLinker::push_frame`] writing the ids into `ids` (cleared first).
    ///
    /// Errors (the linker is unchanged): [`BridgeError::InvalidArgument`] when `frame` is not
    /// greater than the previous frame pushed, [`BridgeError::InvalidInput`] for a non-finite
    /// position.
    pub fn push_frame_into(
        &mut self,
        frame: i64,
        pos: &[[f64; 2]],
        ids: &mut Vec<i64>,
    ) -> Result<()> {
        check_pushed_frame(self.frame, frame, pos)?;
        self.frame = Some(frame);
        let max_step = self.params.max_gap as u64 + 1;
        self.active.retain(|t| frame.abs_diff(t.2) <= max_step);
        // cells wider than max_distance (margin for rounding): a row within max_distance of a
        // point is always in one of the 3×3 cells around it
        let grid = Grid::new(pos, self.params.max_distance * 1.25);
        let mut near = Vec::new();
        // (distance, index in `active`, row): `active` is in ascending id order
        let mut triples = Vec::new();
        for (a, t) in self.active.iter().enumerate() {
            let last = t.1;
            // nearest row (first in row order among equals), kept if within max_distance
            grid.near(&last, &mut near);
            let best = near
                .iter()
                .map(|&k| {
                    let k = k as usize;
                    let dy = pos[k][0] - last[0];
                    let dx = pos[k][1] - last[1];
                    ((dy * dy + dx * dx).sqrt(), k)
                })
                .filter(|&(d, _)| d <= self.params.max_distance)
                .min_by(|a, b| {
                    a.0.partial_cmp(&b.0)
                        .unwrap_or(std::cmp::Ordering::Equal)
                        .then(a.1.cmp(&b.1))
                });
            if let Some((d, r)) = best {
                triples.push((d, a, r));
            }
        }
        triples.sort_by(|a, b| {
            a.0.partial_cmp(&b.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then((a.1, a.2).cmp(&(b.1, b.2)))
        });
        ids.clear();
        ids.resize(pos.len(), -1);
        let mut used_track = vec![false; self.active.len()];
        for (_, a, r) in triples {
            if used_track[a] || ids[r] >= 0 {
                continue;
            }
            used_track[a] = true;
            let t = &mut self.active[a];
            t.1 = pos[r];
            t.2 = frame;
            ids[r] = t.0;
        }
        for (r, id) in ids.iter_mut().enumerate() {
            if *id < 0 {
                *id = self.next_id;
                self.active.push((self.next_id, pos[r], frame));
                self.next_id += 1;
            }
        }
        Ok(())
    }
}
