//! [`Linker`]: trackpy's linking one frame at a time, keeping only the tracks that `memory`
//! can still continue.

use rayon::prelude::*;

use bridge_core::{BridgeError, Result};

use super::assign::{Edges, Outcome, Rules, solve_subnet};
use super::predict::{Field, Velocity};
use super::{
    DROP_MAX_SUBNET, LinkParams, LinkStats, LinkStrategy, Predictor, check_pushed_frame, distance,
    subnet_oversize,
};
use crate::grid::Grid;

/// "No index".
const NONE: u32 = u32::MAX;

/// Destinations per parallel work item of the candidate search.
const CHUNK: usize = 2048;

/// Links frames pushed in increasing frame order into tracks, with the semantics of [`link`]
/// (trackpy's `link`), and returns each frame's track ids as it goes. Positions have `D`
/// coordinates (2 by default: `[y, x]`; `[z, y, x]` for a `Linker<3>`, as [`link_nd`]).
///
/// Memory is proportional to the tracks that can still be continued (those seen within the
/// last `memory + 1` frames), never to the number of frames pushed: a track that `memory` can
/// no longer continue is forgotten. Track ids are numbered from 0 in order of appearance (in a
/// frame, in row order).
///
/// ```
/// use algorithms::track::{LinkParams, Linker};
/// let mut linker = Linker::new(LinkParams::new(2.0, 0))?;
/// assert_eq!(linker.push_frame(0, &[[10.0, 10.0], [50.0, 50.0]])?, [0, 1]);
/// assert_eq!(linker.push_frame(1, &[[50.5, 50.0], [10.5, 10.0], [90.0, 0.0]])?, [1, 0, 2]);
/// assert_eq!(linker.stats().tracks, 3);
/// // frames must increase
/// assert!(linker.push_frame(1, &[]).is_err());
/// # Ok::<(), bridge_core::BridgeError>(())
/// ```
///
/// In 3-D:
///
/// ```
/// use algorithms::track::{LinkParams, Linker};
/// let mut linker = Linker::<3>::new_nd(LinkParams::new(2.0, 0))?;
/// assert_eq!(linker.push_frame(0, &[[1.0, 10.0, 10.0], [9.0, 10.0, 10.0]])?, [0, 1]);
/// assert_eq!(linker.push_frame(1, &[[8.5, 10.0, 10.0], [1.0, 10.5, 10.0]])?, [1, 0]);
/// # Ok::<(), bridge_core::BridgeError>(())
/// ```
///
/// [`link`]: super::link
/// [`link_nd`]: super::link_nd
#[derive(Debug, Clone)]
pub struct Linker<const D: usize = 2> {
    params: LinkParams,
    rules: Rules,
    /// Tracks that may still be continued, ascending id: id, last position, last frame number,
    /// level (frames pushed so far) of the last appearance.
    ids: Vec<i64>,
    pos: Vec<[f64; D]>,
    last_frame: Vec<i64>,
    last_level: Vec<u64>,
    next_id: i64,
    frame: Option<i64>,
    level: u64,
    stats: LinkStats,
    velocity: Option<Velocity<D>>,
}

/// Candidates of each destination: `off[d]..off[d + 1]` index `src` and `dist`, in ascending
/// `(distance, source)` order, at most `max_neighbors`, each within reach.
struct Cands {
    off: Vec<u32>,
    src: Vec<u32>,
    dist: Vec<f64>,
}

impl Linker {
    /// A 2-D linker with these parameters (checked:
    /// [`BridgeError::InvalidArgument`](bridge_core::BridgeError::InvalidArgument)); other
    /// dimensions: [`Linker::new_nd`].
    pub fn new(params: LinkParams) -> Result<Self> {
        Self::new_nd(params)
    }
}

impl<const D: usize> Linker<D> {
    /// A linker of `D`-dimensional positions (`Linker::<3>::new_nd(params)`) with these
    /// parameters (checked:
    /// [`BridgeError::InvalidArgument`](bridge_core::BridgeError::InvalidArgument), also for
    /// a velocity predictor's initial guess, whose samples are 2-D, when `D` is not 2).
    pub fn new_nd(params: LinkParams) -> Result<Self> {
        params.validate()?;
        if D == 0 {
            return Err(BridgeError::invalid_argument(
                "positions",
                "linking needs at least one coordinate per position (D = 0)",
            ));
        }
        let rules = Rules {
            range: params.search_range,
            cap: params.max_subnet_sources,
            adaptive: params.adaptive.map(|a| (a.stop, a.step, a.max_subnet)),
            drop: (params.link_strategy == LinkStrategy::Drop).then(|| {
                // trackpy's drop linker gets the adaptive size when the search is adaptive
                params.adaptive.map_or(DROP_MAX_SUBNET, |a| a.max_subnet)
            }),
        };
        let velocity = match &params.predictor {
            Predictor::None => None,
            Predictor::NearestVelocity(v) => {
                let initial = match &v.initial_guess {
                    None => None,
                    Some(g) => Some(Field::new(in_d(&g.positions)?, in_d(&g.velocities)?)),
                };
                Some(Velocity::new(v.span, initial))
            }
        };
        Ok(Linker {
            params,
            rules,
            ids: Vec::new(),
            pos: Vec::new(),
            last_frame: Vec::new(),
            last_level: Vec::new(),
            next_id: 0,
            frame: None,
            level: 0,
            stats: LinkStats::default(),
            velocity,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    /// What the linker did so far (`tracks`: tracks started so far).
    pub fn stats(&self) -> LinkStats {
        LinkStats {
            tracks: self.next_id as usize,
            ..self.stats.clone()
        }
    }

    /// Tracks held: those that may still be continued.
    pub fn active_tracks(&self) -> usize {
        self.ids.len()
    }

    /// Whether track `id` is still held, i.e. may be continued by a later frame; once false it
    /// stays false, so the track's points are final (what a streaming caller needs to decide,
    /// e.g., whether a track is long enough to keep).
    pub fn is_active(&self, id: i64) -> bool {
        self.ids.binary_search(&id).is_ok()
    }

    /// The last frame number pushed.
    pub fn last_frame(&self) -> Option<i64> {
        self.frame
    }

    /// Link the points of frame `frame` (`[y, x]` each in 2-D, `[z, y, x]` in 3-D) to the
    /// tracks so far and return the track id of each point, in order. See
    /// [`Linker::push_frame_into`].
    pub fn push_frame(&mut self, frame: i64, pos: &[[f64; D]]) -> Result<Vec<i64>> {
        let mut ids = Vec::with_capacity(pos.len());
        self.push_frame_into(frame, pos, &mut ids)?;
        Ok(ids)
    }

    /// [`Linker::push_frame`] writing the ids into `ids` (cleared first), to reuse its buffer.
    ///
    /// Errors (the linker is unchanged):
    /// [`BridgeError::InvalidArgument`](bridge_core::BridgeError::InvalidArgument) when `frame`
    /// is not greater than the previous frame pushed,
    /// [`BridgeError::InvalidInput`](bridge_core::BridgeError::InvalidInput) for a non-finite
    /// position, and with [`LinkStrategy::Drop`] for a subnet too large to drop (trackpy's
    /// `SubnetOversizeException`: [`is_subnet_oversize`](super::is_subnet_oversize)).
    pub fn push_frame_into(
        &mut self,
        frame: i64,
        pos: &[[f64; D]],
        ids: &mut Vec<i64>,
    ) -> Result<()> {
        check_pushed_frame(self.frame, frame, pos)?;
        // only the drop strategy fails after this point: it restores the state on an error
        let undo = self.rules.drop.is_some().then(|| Undo::of(self));
        self.frame = Some(frame);
        self.level += 1;
        self.stats.levels += 1;
        self.expire(frame);
        let src_pos: Vec<[f64; D]> = match &self.velocity {
            None => self.pos.clone(),
            Some(v) => self
                .pos
                .iter()
                .zip(&self.last_frame)
                .map(|(p, &l)| v.predict(p, l, frame))
                .collect(),
        };
        let cands = self.candidates(&src_pos, pos);
        let (mut dest_src, birth_key) = match self.solve(&cands, src_pos.len(), pos.len(), frame) {
            Ok(d) => d,
            Err(e) => {
                if let Some(u) = undo {
                    u.restore(self);
                }
                return Err(e);
            }
        };
        // trackpy numbers new tracks as it visits its subnets: in ascending order of their
        // last destination (a subnet keeps the key of the destination that joined it last),
        // a destination without candidates on its own; within a subnet, in destination order
        // here (trackpy's order there is a Python set's, by object address). New tracks take
        // their places in that order, so the tracks stay in ascending order of their ids.
        let mut births: Vec<u32> = (0..pos.len() as u32)
            .filter(|&d| dest_src[d as usize] == NONE)
            .collect();
        births.sort_by_key(|&d| birth_key[d as usize]);
        for d in births {
            let d = d as usize;
            dest_src[d] = self.ids.len() as u32;
            self.ids.push(self.next_id);
            self.next_id += 1;
            self.pos.push(pos[d]);
            self.last_frame.push(frame);
            self.last_level.push(self.level);
        }
        ids.clear();
        for (d, p) in pos.iter().enumerate() {
            let s = dest_src[d] as usize;
            self.pos[s] = *p;
            self.last_frame[s] = frame;
            self.last_level[s] = self.level;
            ids.push(self.ids[s]);
        }
        if let Some(v) = &mut self.velocity {
            v.observe(
                frame,
                ids.iter().copied().zip(pos.iter().copied()).collect(),
            );
        }
        Ok(())
    }

    /// Forget the tracks absent for more than `memory` frames: frame numbers, or frames pushed
    /// with the velocity predictor (trackpy's predictors link the frames present only).
    fn expire(&mut self, frame: i64) {
        let max_step = self.params.memory as u64 + 1;
        let level = self.level;
        let by_level = self.velocity.is_some();
        let keep = |i: usize| {
            if by_level {
                level - self.last_level[i] <= max_step
            } else {
                frame.abs_diff(self.last_frame[i]) <= max_step
            }
        };
        let kept: Vec<bool> = (0..self.ids.len()).map(keep).collect();
        let mut w = 0;
        for (r, k) in kept.into_iter().enumerate() {
            if k {
                self.ids[w] = self.ids[r];
                self.pos[w] = self.pos[r];
                self.last_frame[w] = self.last_frame[r];
                self.last_level[w] = self.last_level[r];
                w += 1;
            }
        }
        self.ids.truncate(w);
        self.pos.truncate(w);
        self.last_frame.truncate(w);
        self.last_level.truncate(w);
    }

    /// The ≤ `max_neighbors` nearest sources within reach of every destination.
    fn candidates(&self, src: &[[f64; D]], dst: &[[f64; D]]) -> Cands {
        let reach = self.params.search_range + 1e-7;
        let max_nb = self.params.max_neighbors;
        // cells wider than the reach (margin for rounding): a source within reach of a
        // destination is always in one of the 3^D cells around it
        let grid = Grid::new(src, reach * 1.25);
        let one = |chunk: &[[f64; D]]| {
            let mut near = Vec::new();
            let mut c: Vec<(f64, u32)> = Vec::new();
            let (mut count, mut s_out, mut d_out) = (Vec::new(), Vec::new(), Vec::new());
            for p in chunk {
                grid.near(p, &mut near);
                c.clear();
                for &s in &near {
                    let d = distance(p, &src[s as usize]);
                    if d <= reach {
                        c.push((d, s));
                    }
                }
                c.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                c.truncate(max_nb);
                count.push(c.len() as u32);
                s_out.extend(c.iter().map(|x| x.1));
                d_out.extend(c.iter().map(|x| x.0));
            }
            (count, s_out, d_out)
        };
        let parts: Vec<(Vec<u32>, Vec<u32>, Vec<f64>)> = if dst.len() <= CHUNK || src.is_empty() {
            vec![one(dst)]
        } else {
            dst.par_chunks(CHUNK).map(one).collect()
        };
        let total: usize = parts.iter().map(|p| p.1.len()).sum();
        let mut out = Cands {
            off: Vec::with_capacity(dst.len() + 1),
            src: Vec::with_capacity(total),
            dist: Vec::with_capacity(total),
        };
        out.off.push(0);
        for (count, s, d) in parts {
            for c in count {
                let last = *out.off.last().unwrap_or(&0);
                out.off.push(last + c);
            }
            out.src.extend(s);
            out.dist.extend(d);
        }
        out
    }

    /// Subnets (connected parts of the candidate graph) solved in parallel: the source of
    /// every destination (`NONE`: a new track), and the key that orders the new tracks' numbers
    /// (trackpy's order of subnets: the last destination of a destination's subnet, itself
    /// where it has no candidates). Fails only with the drop strategy, on a subnet too large for
    /// it (at frame `frame`).
    fn solve(
        &mut self,
        c: &Cands,
        ns: usize,
        nd: usize,
        frame: i64,
    ) -> Result<(Vec<u32>, Vec<u32>)> {
        let mut dest_src = vec![NONE; nd];
        let mut birth_key: Vec<u32> = (0..nd as u32).collect();
        if c.src.is_empty() {
            return Ok((dest_src, birth_key));
        }
        let net = Subnets::of(c, ns, nd);
        let n_comps = net.n_src.len();
        for k in 0..n_comps {
            let dsts = net.destinations(k);
            if let Some(&last) = dsts.last() {
                for &d in dsts {
                    birth_key[d as usize] = last;
                }
            }
        }
        let null = self.params.search_range * self.params.search_range;
        let mut hard: Vec<usize> = Vec::new();
        for k in 0..n_comps {
            self.stats.subnets += 1;
            self.stats.largest_subnet = self.stats.largest_subnet.max(net.n_src[k] as usize);
            if net.n_src[k] == 1 && net.n_dst[k] == 1 {
                // one source, one destination: linked if no dearer than the null link
                let (s, d) = (net.sources(k)[0], net.destinations(k)[0] as usize);
                let dist = c.dist[c.off[d] as usize];
                if dist * dist <= null {
                    dest_src[d] = s;
                }
            } else {
                hard.push(k);
            }
        }
        let rules = self.rules;
        let solve_one = |&k: &usize| -> (Vec<Option<u32>>, Outcome) {
            let e = net.edges(c, ns, k);
            solve_subnet(&e, net.destinations(k).len(), &rules)
        };
        let solved: Vec<(Vec<Option<u32>>, Outcome)> = if hard.len() > 1 {
            hard.par_iter().map(solve_one).collect()
        } else {
            hard.iter().map(solve_one).collect()
        };
        if let Some((&k, (_, out))) = hard.iter().zip(&solved).find(|s| s.1.1.oversize.is_some()) {
            let max = self.rules.drop.unwrap_or(DROP_MAX_SUBNET);
            let sources = out.oversize.unwrap_or(net.n_src[k] as usize);
            return Err(subnet_oversize(frame, sources, max));
        }
        for (&k, (sol, out)) in hard.iter().zip(solved) {
            self.stats.fallback_subnets += usize::from(out.capped);
            self.stats.dropped_subnets += out.dropped;
            self.stats.adaptive_subnets += usize::from(out.adapted);
            self.stats.adaptive_unresolved += out.unresolved;
            for (ls, a) in sol.into_iter().enumerate() {
                if let Some(ld) = a {
                    let d = net.destinations(k)[ld as usize] as usize;
                    dest_src[d] = net.sources(k)[ls];
                }
            }
        }
        Ok((dest_src, birth_key))
    }
}

/// The state [`Linker::push_frame_into`] changes before it solves the subnets, kept to undo
/// a frame the drop strategy refuses.
struct Undo<const D: usize> {
    frame: Option<i64>,
    level: u64,
    stats: LinkStats,
    ids: Vec<i64>,
    pos: Vec<[f64; D]>,
    last_frame: Vec<i64>,
    last_level: Vec<u64>,
}

impl<const D: usize> Undo<D> {
    fn of(l: &Linker<D>) -> Self {
        Undo {
            frame: l.frame,
            level: l.level,
            stats: l.stats.clone(),
            ids: l.ids.clone(),
            pos: l.pos.clone(),
            last_frame: l.last_frame.clone(),
            last_level: l.last_level.clone(),
        }
    }

    fn restore(self, l: &mut Linker<D>) {
        l.frame = self.frame;
        l.level = self.level;
        l.stats = self.stats;
        l.ids = self.ids;
        l.pos = self.pos;
        l.last_frame = self.last_frame;
        l.last_level = self.last_level;
    }
}

/// 2-D samples of an initial guess as `D`-dimensional ones: an error unless `D` is 2.
fn in_d<const D: usize>(v: &[[f64; 2]]) -> Result<Vec<[f64; D]>> {
    v.iter()
        .map(|p| {
            <[f64; D]>::try_from(&p[..]).map_err(|_| {
                bridge_core::BridgeError::invalid_argument(
                    "initial_guess",
                    format!("holds 2-D ([y, x]) samples: it cannot guide {D}-D linking"),
                )
            })
        })
        .collect()
}

/// The root of `a` in the union-find forest `parent`, halving the path on the way.
fn find(parent: &mut [u32], mut a: u32) -> u32 {
    while parent[a as usize] != a {
        let g = parent[parent[a as usize] as usize];
        parent[a as usize] = g;
        a = g;
    }
    a
}

/// The subnets of a frame's candidate graph (sources `0..ns`, destinations `ns..ns + nd`):
/// its connected parts with at least one edge, numbered in order of first appearance (the
/// sources with candidates in ascending order, then the destinations), and the members of
/// each, ascending.
struct Subnets {
    /// Index of every node within its subnet's sources or destinations.
    local: Vec<u32>,
    /// Sources of every subnet.
    n_src: Vec<u32>,
    /// Destinations of every subnet.
    n_dst: Vec<u32>,
    /// `src_of[src_off[k]..src_off[k + 1]]`: the sources of subnet `k`.
    src_off: Vec<u32>,
    /// `dst_of[dst_off[k]..dst_off[k + 1]]`: the destinations of subnet `k` (`0..nd`).
    dst_off: Vec<u32>,
    src_of: Vec<u32>,
    dst_of: Vec<u32>,
}

impl Subnets {
    /// The subnets of the candidates `c` of `nd` destinations among `ns` sources (at least
    /// one candidate).
    fn of(c: &Cands, ns: usize, nd: usize) -> Subnets {
        // union-find over sources 0..ns and destinations ns..ns+nd, root = smallest index
        let mut parent: Vec<u32> = (0..(ns + nd) as u32).collect();
        let mut src_has = vec![false; ns];
        for d in 0..nd {
            for x in c.off[d] as usize..c.off[d + 1] as usize {
                let s = c.src[x];
                src_has[s as usize] = true;
                let (a, b) = (find(&mut parent, s), find(&mut parent, (ns + d) as u32));
                if a != b {
                    parent[a.max(b) as usize] = a.min(b);
                }
            }
        }
        // subnet of every node with candidates, numbered in order of first appearance
        let mut comp_of_root = vec![NONE; ns + nd];
        let mut local = vec![NONE; ns + nd];
        let mut n_src: Vec<u32> = Vec::new();
        let mut n_dst: Vec<u32> = Vec::new();
        let mut comp = vec![NONE; ns + nd];
        let nodes = (0..ns)
            .filter(|&s| src_has[s])
            .chain((0..nd).filter(|&d| c.off[d + 1] > c.off[d]).map(|d| ns + d));
        for v in nodes {
            let r = find(&mut parent, v as u32) as usize;
            if comp_of_root[r] == NONE {
                comp_of_root[r] = n_src.len() as u32;
                n_src.push(0);
                n_dst.push(0);
            }
            let k = comp_of_root[r] as usize;
            comp[v] = k as u32;
            if v < ns {
                local[v] = n_src[k];
                n_src[k] += 1;
            } else {
                local[v] = n_dst[k];
                n_dst[k] += 1;
            }
        }
        let mut net = Subnets {
            local,
            n_src,
            n_dst,
            src_off: Vec::new(),
            dst_off: Vec::new(),
            src_of: Vec::new(),
            dst_of: Vec::new(),
        };
        net.list_members(&comp, ns);
        net
    }

    /// The members of each subnet, ascending: sources, then destinations, from the subnet
    /// `comp` of every node (`NONE`: none).
    fn list_members(&mut self, comp: &[u32], ns: usize) {
        let n_comps = self.n_src.len();
        let (n_src, n_dst, local) = (&self.n_src, &self.n_dst, &self.local);
        // members of each subnet, ascending: sources, then destinations
        let mut src_off = vec![0u32; n_comps + 1];
        let mut dst_off = vec![0u32; n_comps + 1];
        for k in 0..n_comps {
            src_off[k + 1] = src_off[k] + n_src[k];
            dst_off[k + 1] = dst_off[k] + n_dst[k];
        }
        let mut src_of = vec![0u32; src_off[n_comps] as usize];
        let mut dst_of = vec![0u32; dst_off[n_comps] as usize];
        for v in 0..comp.len() {
            let k = comp[v];
            if k == NONE {
                continue;
            }
            let k = k as usize;
            if v < ns {
                src_of[(src_off[k] + local[v]) as usize] = v as u32;
            } else {
                dst_of[(dst_off[k] + local[v]) as usize] = (v - ns) as u32;
            }
        }
        (self.src_off, self.dst_off) = (src_off, dst_off);
        (self.src_of, self.dst_of) = (src_of, dst_of);
    }

    /// The sources of subnet `k`, ascending.
    fn sources(&self, k: usize) -> &[u32] {
        &self.src_of[self.src_off[k] as usize..self.src_off[k + 1] as usize]
    }

    /// The destinations of subnet `k`, ascending.
    fn destinations(&self, k: usize) -> &[u32] {
        &self.dst_of[self.dst_off[k] as usize..self.dst_off[k + 1] as usize]
    }

    /// The edges of subnet `k` by local source, each source's sorted by (distance,
    /// destination), destinations local.
    fn edges(&self, c: &Cands, ns: usize, k: usize) -> Edges {
        let (srcs, dsts, local) = (self.sources(k), self.destinations(k), &self.local);
        // edges by local source, each sorted by (distance, destination)
        let mut off = vec![0u32; srcs.len() + 1];
        for &d in dsts {
            for x in c.off[d as usize] as usize..c.off[d as usize + 1] as usize {
                off[local[c.src[x] as usize] as usize + 1] += 1;
            }
        }
        for i in 1..off.len() {
            off[i] += off[i - 1];
        }
        let mut fill = off.clone();
        let m = off[srcs.len()] as usize;
        let mut e = Edges {
            off,
            dst: vec![0; m],
            dist: vec![0.0; m],
        };
        for &d in dsts {
            for x in c.off[d as usize] as usize..c.off[d as usize + 1] as usize {
                let ls = local[c.src[x] as usize] as usize;
                let at = fill[ls] as usize;
                e.dst[at] = local[ns + d as usize];
                e.dist[at] = c.dist[x];
                fill[ls] += 1;
            }
        }
        for s in 0..srcs.len() {
            let (a, b) = (e.off[s] as usize, e.off[s + 1] as usize);
            let mut row: Vec<(f64, u32)> = (a..b).map(|x| (e.dist[x], e.dst[x])).collect();
            row.sort_unstable_by(|p, q| p.0.total_cmp(&q.0).then(p.1.cmp(&q.1)));
            for (i, (dist, dst)) in row.into_iter().enumerate() {
                e.dist[a + i] = dist;
                e.dst[a + i] = dst;
            }
        }
        e
    }
}
