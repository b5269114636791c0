//! trackpy's `NearestVelocityPredict`: each track is expected where its last position plus the
//! velocity of the nearest recently tracked particle carries it.
//!
//! After each frame is linked, the velocity field is remade from the `span + 1` most recent
//! frames: for every particle of the newest frame that is also in the oldest of them,
//! `(position now − position then) / (frame now − frame then)`, sampled at its position now
//! (the first frame is taken twice: zero velocities; no particle in common: zero everywhere).
//! A track last seen at frame `l` at position `p` is predicted at frame `t` at
//! `p + v(p) · (t − l)`, `v(p)` being the velocity of the sample nearest to `p` (SciPy's
//! `NearestNDInterpolator`; among samples at the same distance the first in frame order, where
//! SciPy's k-d tree may pick another). An initial guess (sample positions and velocities)
//! replaces the field of the first frame, as trackpy's `initial_guess_positions/vels`.

use std::collections::VecDeque;

/// A nearest-neighbour velocity field: samples in a 2-d tree.
#[derive(Debug, Clone, Default)]
pub(crate) struct Field {
    pos: Vec<[f64; 2]>,
    vel: Vec<[f64; 2]>,
    /// Sample indices, arranged as an implicit k-d tree (median of each range at its middle).
    tree: Vec<u32>,
}

impl Field {
    /// A field from samples (non-finite positions are left out: nothing is nearest to them).
    pub(crate) fn new(pos: Vec<[f64; 2]>, vel: Vec<[f64; 2]>) -> Self {
        let mut tree: Vec<u32> = (0..pos.len() as u32)
            .filter(|&i| pos[i as usize].iter().all(|c| c.is_finite()))
            .collect();
        build(&pos, &mut tree, 0);
        Field { pos, vel, tree }
    }

    /// The velocity of the sample nearest to `p` (zero without samples).
    pub(crate) fn at(&self, p: &[f64; 2]) -> [f64; 2] {
        let mut best = (f64::INFINITY, u32::MAX);
        if p.iter().all(|c| c.is_finite()) {
            self.nearest(&self.tree, 0, p, &mut best);
        }
        if best.1 == u32::MAX {
            [0.0, 0.0]
        } else {
            self.vel[best.1 as usize]
        }
    }

    fn nearest(&self, t: &[u32], axis: usize, p: &[f64; 2], best: &mut (f64, u32)) {
        if t.is_empty() {
            return;
        }
        let mid = t.len() / 2;
        let i = t[mid];
        let q = self.pos[i as usize];
        let (dy, dx) = (p[0] - q[0], p[1] - q[1]);
        let d2 = dy * dy + dx * dx;
        if d2 < best.0 || (d2 == best.0 && i < best.1) {
            *best = (d2, i);
        }
        let diff = p[axis] - q[axis];
        let (near, far) = if diff < 0.0 {
            (&t[..mid], &t[mid + 1..])
        } else {
            (&t[mid + 1..], &t[..mid])
        };
        self.nearest(near, 1 - axis, p, best);
        // `<=`: a sample across the plane at the same distance may have a lower index
        if diff * diff <= best.0 {
            self.nearest(far, 1 - axis, p, best);
        }
    }
}

/// Arrange `t` as an implicit k-d tree: the median on `axis` in the middle, smaller coordinates
/// before it, larger after, each half on the other axis.
fn build(pos: &[[f64; 2]], t: &mut [u32], axis: usize) {
    if t.len() <= 1 {
        return;
    }
    let mid = t.len() / 2;
    t.select_nth_unstable_by(mid, |&a, &b| {
        pos[a as usize][axis].total_cmp(&pos[b as usize][axis])
    });
    let (lo, hi) = t.split_at_mut(mid);
    build(pos, lo, 1 - axis);
    build(pos, &mut hi[1..], 1 - axis);
}

/// A linked frame: its number, and the track id and position of each row.
type Observed = (i64, Vec<(i64, [f64; 2])>);

/// The state of the predictor between frames.
#[derive(Debug, Clone)]
pub(crate) struct Velocity {
    span: usize,
    /// The last `span + 1` linked frames: frame number and `(track id, position)` in row order.
    recent: VecDeque<Observed>,
    field: Field,
    /// The initial guess is the field until the second frame has been linked.
    use_initial: bool,
}

impl Velocity {
    pub(crate) fn new(span: usize, initial: Option<Field>) -> Self {
        Velocity {
            span,
            recent: VecDeque::with_capacity(span + 1),
            use_initial: initial.is_some(),
            field: initial.unwrap_or_default(),
        }
    }

    /// Where a track last seen at frame `last` at `p` is expected at frame `t`.
    pub(crate) fn predict(&self, p: &[f64; 2], last: i64, t: i64) -> [f64; 2] {
        let v = self.field.at(p);
        let dt = (i128::from(t) - i128::from(last)) as f64;
        [p[0] + v[0] * dt, p[1] + v[1] * dt]
    }

    /// Record a linked frame and remake the field (trackpy's `observe`).
    pub(crate) fn observe(&mut self, t: i64, rows: Vec<(i64, [f64; 2])>) {
        if self.recent.is_empty() {
            // the first frame is taken twice: zero velocities, dt = 1
            self.recent.push_back((t, rows.clone()));
        }
        if self.recent.len() == self.span + 1 {
            self.recent.pop_front();
        }
        self.recent.push_back((t, rows));
        if self.use_initial {
            self.use_initial = false;
            return;
        }
        let (Some((t0, old)), Some((t1, new))) = (self.recent.front(), self.recent.back()) else {
            return;
        };
        // the same frame twice only at the first frame (frame numbers increase)
        let dt = if t1 == t0 {
            1.0
        } else {
            (i128::from(*t1) - i128::from(*t0)) as f64
        };
        let mut then: Vec<(i64, [f64; 2])> = old.clone();
        then.sort_by_key(|r| r.0);
        let mut pos = Vec::new();
        let mut vel = Vec::new();
        for (id, p) in new {
            if let Ok(k) = then.binary_search_by_key(id, |r| r.0) {
                let q = then[k].1;
                pos.push(*p);
                vel.push([(p[0] - q[0]) / dt, (p[1] - q[1]) / dt]);
            }
        }
        self.field = Field::new(pos, vel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::SplitMix;

    #[test]
    fn nearest_matches_brute_force_with_ties_to_the_first() {
        let mut rng = SplitMix::new(5);
        let pos: Vec<[f64; 2]> = (0..300)
            .map(|_| [rng.range(0.0, 50.0).round(), rng.range(0.0, 50.0).round()])
            .collect();
        let vel: Vec<[f64; 2]> = (0..300).map(|i| [f64::from(i), 0.0]).collect();
        let f = Field::new(pos.clone(), vel);
        for _ in 0..500 {
            let p = [rng.range(-5.0, 55.0).round(), rng.range(-5.0, 55.0).round()];
            let d2 = |q: &[f64; 2]| (p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2);
            let best = (0..pos.len())
                .min_by(|&a, &b| d2(&pos[a]).total_cmp(&d2(&pos[b])).then(a.cmp(&b)))
                .unwrap();
            assert_eq!(f.at(&p)[0], best as f64, "{p:?}");
        }
        assert_eq!(Field::default().at(&[1.0, 2.0]), [0.0, 0.0]);
    }
}
