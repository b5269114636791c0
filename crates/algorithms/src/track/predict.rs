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

/// A nearest-neighbour velocity field: samples in a k-d tree (`D` dimensions).
#[derive(Debug, Clone)]
pub(crate) struct Field<const D: usize> {
    pos: Vec<[f64; D]>,
    vel: Vec<[f64; D]>,
    /// Sample indices, arranged as an implicit k-d tree (median of each range at its middle).
    tree: Vec<u32>,
}

impl<const D: usize> Default for Field<D> {
    fn default() -> Self {
        Field {
            pos: Vec::new(),
            vel: Vec::new(),
            tree: Vec::new(),
        }
    }
}

impl<const D: usize> Field<D> {
    /// A field from samples (non-finite positions are left out: nothing is nearest to them).
    pub(crate) fn new(pos: Vec<[f64; D]>, vel: Vec<[f64; D]>) -> Self {
        let mut tree: Vec<u32> = (0..pos.len() as u32)
            .filter(|&i| pos[i as usize].iter().all(|c| c.is_finite()))
            .collect();
        build(&pos, &mut tree, 0);
        Field { pos, vel, tree }
    }

    /// The velocity of the sample nearest to `p` (zero without samples).
    pub(crate) fn at(&self, p: &[f64; D]) -> [f64; D] {
        let mut best = (f64::INFINITY, u32::MAX);
        if p.iter().all(|c| c.is_finite()) {
            self.nearest(&self.tree, 0, p, &mut best);
        }
        if best.1 == u32::MAX {
            [0.0; D]
        } else {
            self.vel[best.1 as usize]
        }
    }

    fn nearest(&self, t: &[u32], axis: usize, p: &[f64; D], best: &mut (f64, u32)) {
        if t.is_empty() {
            return;
        }
        let mid = t.len() / 2;
        let i = t[mid];
        let q = &self.pos[i as usize];
        let mut d2 = -0.0f64;
        for a in 0..D {
            d2 += (p[a] - q[a]) * (p[a] - q[a]);
        }
        if d2 < best.0 || (d2 == best.0 && i < best.1) {
            *best = (d2, i);
        }
        let diff = p[axis] - q[axis];
        let (near, far) = if diff < 0.0 {
            (&t[..mid], &t[mid + 1..])
        } else {
            (&t[mid + 1..], &t[..mid])
        };
        self.nearest(near, next_axis::<D>(axis), p, best);
        // `<=`: a sample across the plane at the same distance may have a lower index
        if diff * diff <= best.0 {
            self.nearest(far, next_axis::<D>(axis), p, best);
        }
    }
}

/// The axis after `axis` in a `D`-d tree (cycling).
fn next_axis<const D: usize>(axis: usize) -> usize {
    if axis + 1 == D { 0 } else { axis + 1 }
}

/// Arrange `t` as an implicit k-d tree: the median on `axis` in the middle, smaller coordinates
/// before it, larger after, each half on the next axis.
fn build<const D: usize>(pos: &[[f64; D]], t: &mut [u32], axis: usize) {
    if t.len() <= 1 {
        return;
    }
    let mid = t.len() / 2;
    t.select_nth_unstable_by(mid, |&a, &b| {
        pos[a as usize][axis].total_cmp(&pos[b as usize][axis])
    });
    let (lo, hi) = t.split_at_mut(mid);
    build(pos, lo, next_axis::<D>(axis));
    build(pos, &mut hi[1..], next_axis::<D>(axis));
}

/// A linked frame: its number, and the track id and position of each row.
type Observed<const D: usize> = (i64, Vec<(i64, [f64; D])>);

/// The state of the predictor between frames.
#[derive(Debug, Clone)]
pub(crate) struct Velocity<const D: usize> {
    span: usize,
    /// The last `span + 1` linked frames: frame number and `(track id, position)` in row order.
    recent: VecDeque<Observed<D>>,
    field: Field<D>,
    /// The initial guess is the field until the second frame has been linked.
    use_initial: bool,
}

impl<const D: usize> Velocity<D> {
    pub(crate) fn new(span: usize, initial: Option<Field<D>>) -> Self {
        Velocity {
            span,
            recent: VecDeque::with_capacity(span + 1),
            use_initial: initial.is_some(),
            field: initial.unwrap_or_default(),
        }
    }

    /// Where a track last seen at frame `last` at `p` is expected at frame `t`.
    pub(crate) fn predict(&self, p: &[f64; D], last: i64, t: i64) -> [f64; D] {
        let v = self.field.at(p);
        let dt = (i128::from(t) - i128::from(last)) as f64;
        std::array::from_fn(|a| p[a] + v[a] * dt)
    }

    /// Record a linked frame and remake the field (trackpy's `observe`).
    pub(crate) fn observe(&mut self, t: i64, rows: Vec<(i64, [f64; D])>) {
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
        let mut then: Vec<(i64, [f64; D])> = old.clone();
        then.sort_by_key(|r| r.0);
        let mut pos = Vec::new();
        let mut vel = Vec::new();
        for (id, p) in new {
            if let Ok(k) = then.binary_search_by_key(id, |r| r.0) {
                let q = then[k].1;
                pos.push(*p);
                vel.push(std::array::from_fn(|a| (p[a] - q[a]) / dt));
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
        // 3-D
        let pos: Vec<[f64; 3]> = (0..300)
            .map(|_| std::array::from_fn(|_| rng.range(0.0, 20.0).round()))
            .collect();
        let vel: Vec<[f64; 3]> = (0..300).map(|i| [f64::from(i), 0.0, 0.0]).collect();
        let f = Field::new(pos.clone(), vel);
        for _ in 0..500 {
            let p: [f64; 3] = std::array::from_fn(|_| rng.range(-5.0, 25.0).round());
            let d2 = |q: &[f64; 3]| (0..3).map(|a| (p[a] - q[a]).powi(2)).sum::<f64>();
            let best = (0..pos.len())
                .min_by(|&a, &b| d2(&pos[a]).total_cmp(&d2(&pos[b])).then(a.cmp(&b)))
                .unwrap();
            assert_eq!(f.at(&p)[0], best as f64, "{p:?}");
        }
    }
}
