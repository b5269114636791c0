//! Solving one subnet: the sparse optimal assignment, the explicit greedy cap and trackpy's
//! adaptive search.
//!
//! A subnet has `k` sources (tracks that may continue) and `n` destinations (the new frame's
//! points), and candidate edges `source → destination` with their distance `d` (≤ the search
//! range). Linking along an edge costs `d²`; leaving a source unlinked costs the null cost
//! (`search_range²`); a destination left unlinked starts a new track at no cost. The optimum is
//! a minimum-cost assignment of the `k` rows to the `n` destination columns plus one private
//! "null" column per row, solved by [`solve_sparse`]: successive shortest augmenting paths
//! (Jonker–Volgenant / Crouse's formulation, as SciPy's `linear_sum_assignment`) with Dijkstra
//! on the sparse edge lists, so a subnet costs about `k · (edges reached) · log` however large
//! it is, instead of trackpy's exponential search.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// "No index".
const NONE: u32 = u32::MAX;

/// Edges of a subnet by local source: `off[s]..off[s + 1]` index `dst` and `dist`, each
/// source's edges in ascending `(dist, dst)` order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Edges {
    pub(crate) off: Vec<u32>,
    pub(crate) dst: Vec<u32>,
    pub(crate) dist: Vec<f64>,
}

impl Edges {
    fn of(&self, s: usize) -> std::ops::Range<usize> {
        self.off[s] as usize..self.off[s + 1] as usize
    }
    fn sources(&self) -> usize {
        self.off.len() - 1
    }
}

/// A heap entry: reduced path cost, then free columns first, then column index (a min-heap by
/// reversing the order).
#[derive(PartialEq)]
struct Entry(f64, bool, u32);

impl Eq for Entry {}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .0
            .total_cmp(&self.0)
            .then(other.1.cmp(&self.1))
            .then(other.2.cmp(&self.2))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Minimum-cost assignment of `k` rows (sources) to `n` columns (destinations) or to a private
/// null column per row costing `null`. `rows(s)` lists row `s`'s `(column, cost)` edges (costs
/// finite and ≥ 0, columns `< n`). Returns the column of each row, [`None`] for its null column.
///
/// Successive shortest augmenting paths with dual potentials (every reduced cost stays ≥ 0), one
/// Dijkstra per row over the sparse edges; a search stops at the first free column it settles.
/// Every row can always reach its own null column, so the problem is always feasible.
pub(crate) fn solve_sparse<F, I>(k: usize, n: usize, null: f64, rows: F) -> Vec<Option<u32>>
where
    F: Fn(usize) -> I,
    I: Iterator<Item = (u32, f64)>,
{
    let m = n + k;
    let mut u = vec![0.0f64; k];
    let mut v = vec![0.0f64; m];
    let mut row4col = vec![NONE; m];
    let mut col4row = vec![NONE; k];
    // per-search state, reset through the touched lists
    let mut spc = vec![f64::INFINITY; m];
    let mut path = vec![NONE; m];
    let mut done = vec![false; m];
    let mut touched: Vec<u32> = Vec::new();
    let mut scanned: Vec<u32> = Vec::new();
    let mut rows_seen: Vec<u32> = Vec::new();
    let mut heap: BinaryHeap<Entry> = BinaryHeap::new();
    for cur in 0..k {
        let mut i = cur;
        let mut min_val = 0.0f64;
        let sink = loop {
            rows_seen.push(i as u32);
            let edges = rows(i).chain(std::iter::once(((n + i) as u32, null)));
            for (j, c) in edges {
                let ju = j as usize;
                if done[ju] {
                    continue;
                }
                let r = min_val + c - u[i] - v[ju];
                if r < spc[ju] {
                    if spc[ju] == f64::INFINITY {
                        touched.push(j);
                    }
                    spc[ju] = r;
                    path[ju] = i as u32;
                    heap.push(Entry(r, row4col[ju] != NONE, j));
                }
            }
            // settle the nearest column (stale heap entries skipped)
            let j = loop {
                match heap.pop() {
                    Some(Entry(d, _, j)) if !done[j as usize] && d == spc[j as usize] => {
                        break j as usize;
                    }
                    Some(_) => {}
                    // unreachable: row `cur`'s null column is free until it is settled
                    None => unreachable!("augmenting path search ran out of columns"),
                }
            };
            min_val = spc[j];
            done[j] = true;
            scanned.push(j as u32);
            if row4col[j] == NONE {
                break j;
            }
            i = row4col[j] as usize;
        };
        // dual update (Crouse 2016, as in SciPy)
        u[cur] += min_val;
        for &r in &rows_seen[1..] {
            let r = r as usize;
            u[r] += min_val - spc[col4row[r] as usize];
        }
        for &j in &scanned {
            v[j as usize] -= min_val - spc[j as usize];
        }
        // augment along the path back to `cur`
        let mut j = sink;
        loop {
            let r = path[j] as usize;
            row4col[j] = r as u32;
            let prev = std::mem::replace(&mut col4row[r], j as u32);
            if r == cur {
                break;
            }
            j = prev as usize;
        }
        for &j in &touched {
            spc[j as usize] = f64::INFINITY;
            path[j as usize] = NONE;
            done[j as usize] = false;
        }
        touched.clear();
        scanned.clear();
        rows_seen.clear();
        heap.clear();
    }
    col4row
        .iter()
        .map(|&c| (c < n as u32).then_some(c))
        .collect()
}

/// The bounded greedy solution of a subnet: edges taken in ascending `(d², source,
/// destination)` order, each source and destination once, only those costing at most `null`.
pub(crate) fn solve_greedy(e: &Edges, n: usize, null: f64) -> Vec<Option<u32>> {
    let k = e.sources();
    let mut all: Vec<(f64, u32, u32)> = (0..k)
        .flat_map(|s| e.of(s).map(move |x| (s, x)))
        .map(|(s, x)| (e.dist[x] * e.dist[x], s as u32, e.dst[x]))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let mut out = vec![None; k];
    let mut taken = vec![false; n];
    for (c, s, d) in all {
        if out[s as usize].is_none() && !taken[d as usize] && c <= null {
            out[s as usize] = Some(d);
            taken[d as usize] = true;
        }
    }
    out
}

/// How to solve subnets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// The search range: its square is the null cost.
    pub(crate) range: f64,
    /// Subnets with more sources use [`solve_greedy`] (`usize::MAX`: never).
    pub(crate) cap: usize,
    /// trackpy's adaptive search: `(stop, step, max sources)`.
    pub(crate) adaptive: Option<(f64, f64, usize)>,
    /// trackpy's `drop` strategy, with the most sources of a subnet it drops without the
    /// adaptive search (more: [`Outcome::oversize`]); `None`: subnets are solved.
    pub(crate) drop: Option<usize>,
}

/// What solving one subnet did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Outcome {
    /// Solved by the greedy cap.
    pub(crate) capped: bool,
    /// Its search range was reduced (adaptive search).
    pub(crate) adapted: bool,
    /// Still above the adaptive size when the range reached `adaptive_stop` (trackpy raises
    /// `SubnetOversizeException` there): solved exactly at that range.
    pub(crate) unresolved: usize,
    /// Subnets or parts whose particles the `drop` strategy left unlinked.
    pub(crate) dropped: usize,
    /// The sources of a subnet or part too large for the `drop` strategy (trackpy raises
    /// `SubnetOversizeException`); the solution is then meaningless.
    pub(crate) oversize: Option<usize>,
}

/// Solve one subnet of `e.sources()` sources and `n` destinations: the destination of each
/// source ([`None`]: unlinked).
pub(crate) fn solve_subnet(e: &Edges, n: usize, rules: &Rules) -> (Vec<Option<u32>>, Outcome) {
    let k = e.sources();
    let null = rules.range * rules.range;
    let mut out = Outcome::default();
    if let Some((stop, step, max)) = rules.adaptive
        && k > max
    {
        out.adapted = true;
        return (adaptive(e, n, rules, stop, step, max, &mut out), out);
    }
    if let Some(max) = rules.drop {
        return (drop_one(e, n, null, max, &mut out), out);
    }
    if k > rules.cap {
        out.capped = true;
        return (solve_greedy(e, n, null), out);
    }
    (solve_one(e, n, null), out)
}

/// The exact solution of a subnet with `n` destinations.
fn solve_one(e: &Edges, n: usize, null: f64) -> Vec<Option<u32>> {
    let k = e.sources();
    let keep = |s: usize| e.of(s).map(move |x| (e.dst[x], e.dist[x] * e.dist[x]));
    if k == 1 {
        // one source: its nearest candidate if it is no dearer than the null link (ties: the
        // lower destination index)
        let best = keep(0)
            .filter(|c| c.1 <= null)
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        return vec![best.map(|c| c.0)];
    }
    solve_sparse(k, n, null, keep)
}

/// trackpy's `subnet_linker_drop` on a subnet of `n` destinations: one source and one
/// destination are linked (as [`solve_one`] does); otherwise every source is left unlinked
/// (counted in [`Outcome::dropped`]), unless there are more than `max` sources
/// ([`Outcome::oversize`]).
fn drop_one(e: &Edges, n: usize, null: f64, max: usize, out: &mut Outcome) -> Vec<Option<u32>> {
    let k = e.sources();
    if k == 1 && n == 1 {
        return solve_one(e, n, null);
    }
    if k > max {
        out.oversize = Some(k);
    } else {
        out.dropped += 1;
    }
    vec![None; k]
}

/// trackpy's `adaptive_link_wrap`: a subnet with more than `max` sources is split by reducing
/// the search range (× `step`) and keeping only the candidates within it, recursively, each
/// part then solved with the null cost of its own range; a source left without candidates is
/// unlinked. A part still too large once its range is ≤ `stop` is solved exactly at that
/// range (where trackpy raises), and counted; with the `drop` strategy each part is dropped
/// ([`drop_one`]) and a part still too large at `stop` is [`Outcome::oversize`].
fn adaptive(
    e: &Edges,
    n: usize,
    rules: &Rules,
    stop: f64,
    step: f64,
    max: usize,
    out: &mut Outcome,
) -> Vec<Option<u32>> {
    let k = e.sources();
    let mut result = vec![None; k];
    // (sources of the part, its range, whether its edges are pruned to the range)
    let mut work: Vec<(Vec<u32>, f64, bool)> = vec![((0..k as u32).collect(), rules.range, false)];
    // scratch: union-find over sources (0..k) and destinations (k..k+n), local renumbering
    let mut parent: Vec<u32> = (0..(k + n) as u32).collect();
    let mut local_dst = vec![NONE; n];
    let mut part_of_root = vec![NONE; k + n];
    while let Some((srcs, range, pruned)) = work.pop() {
        let limit = pruned.then_some(range);
        let within = |x: usize| limit.is_none_or(|l| e.dist[x] <= l);
        if srcs.len() <= max || range <= stop {
            if srcs.len() > max {
                if rules.drop.is_some() {
                    out.oversize = Some(srcs.len());
                    return result;
                }
                out.unresolved += 1;
            }
            // sub-edges in local numbering; solve; map back
            let mut sub = Edges {
                off: vec![0],
                ..Edges::default()
            };
            let mut dsts: Vec<u32> = Vec::new();
            for &s in &srcs {
                for x in e.of(s as usize).filter(|&x| within(x)) {
                    let d = e.dst[x] as usize;
                    if local_dst[d] == NONE {
                        local_dst[d] = dsts.len() as u32;
                        dsts.push(d as u32);
                    }
                    sub.dst.push(local_dst[d]);
                    sub.dist.push(e.dist[x]);
                }
                sub.off.push(sub.dst.len() as u32);
            }
            let null = range * range;
            let sol = if rules.drop.is_some() {
                // at most `max` sources here: never oversize
                drop_one(&sub, dsts.len(), null, usize::MAX, out)
            } else if srcs.len() > rules.cap {
                out.capped = true;
                solve_greedy(&sub, dsts.len(), null)
            } else {
                solve_one(&sub, dsts.len(), null)
            };
            for (ls, a) in sol.into_iter().enumerate() {
                result[srcs[ls] as usize] = a.map(|ld| dsts[ld as usize]);
            }
            for &d in &dsts {
                local_dst[d as usize] = NONE;
            }
            continue;
        }
        // split: keep the candidates within the reduced range, then connected parts
        let new_range = range * step;
        let find = |parent: &mut Vec<u32>, mut a: u32| {
            while parent[a as usize] != a {
                let g = parent[parent[a as usize] as usize];
                parent[a as usize] = g;
                a = g;
            }
            a
        };
        let mut touched: Vec<u32> = Vec::new();
        for &s in &srcs {
            touched.push(s);
            for x in e.of(s as usize).filter(|&x| e.dist[x] <= new_range) {
                let d = k as u32 + e.dst[x];
                touched.push(d);
                let (a, b) = (find(&mut parent, s), find(&mut parent, d));
                if a != b {
                    parent[a.max(b) as usize] = a.min(b);
                }
            }
        }
        // group sources with at least one remaining candidate by root, in source order
        let mut parts: Vec<Vec<u32>> = Vec::new();
        for &s in &srcs {
            if !e.of(s as usize).any(|x| e.dist[x] <= new_range) {
                continue; // no candidate left: unlinked (trackpy's "lost")
            }
            let r = find(&mut parent, s) as usize;
            if part_of_root[r] == NONE {
                part_of_root[r] = parts.len() as u32;
                parts.push(Vec::new());
            }
            parts[part_of_root[r] as usize].push(s);
        }
        for &t in &touched {
            parent[t as usize] = t;
            part_of_root[t as usize] = NONE;
        }
        // processed in order (a stack: push in reverse)
        for p in parts.into_iter().rev() {
            work.push((p, new_range, true));
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::SplitMix;

    /// Dense Hungarian (the previous exact solver), as the oracle.
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

    fn total(e: &Edges, sol: &[Option<u32>], null: f64) -> f64 {
        sol.iter()
            .enumerate()
            .map(|(s, a)| match a {
                None => null,
                Some(d) => {
                    let x = e.of(s).find(|&x| e.dst[x] == *d).unwrap();
                    e.dist[x] * e.dist[x]
                }
            })
            .sum()
    }

    #[test]
    fn sparse_matches_dense_hungarian_on_random_subnets() {
        let mut rng = SplitMix::new(11);
        for case in 0..300 {
            let k = 1 + (rng.next_u64() % 40) as usize;
            let n = 1 + (rng.next_u64() % 40) as usize;
            let mut e = Edges {
                off: vec![0],
                ..Edges::default()
            };
            for _ in 0..k {
                let mut row: Vec<(f64, u32)> = Vec::new();
                for d in 0..n as u32 {
                    if rng.uniform() < 0.3 {
                        row.push((rng.uniform() * 2.0, d));
                    }
                }
                row.sort_by(|a, b| a.0.total_cmp(&b.0));
                for (d, j) in row {
                    e.dst.push(j);
                    e.dist.push(d);
                }
                e.off.push(e.dst.len() as u32);
            }
            let null = 1.5f64 * 1.5;
            let sparse = solve_sparse(k, n, null, |s| {
                e.of(s).map(|x| (e.dst[x], e.dist[x] * e.dist[x]))
            });
            let m = n + k;
            let mut cost = vec![vec![1e18; m]; k];
            for (s, row) in cost.iter_mut().enumerate() {
                for x in e.of(s) {
                    row[e.dst[x] as usize] = e.dist[x] * e.dist[x];
                }
                row[n + s] = null;
            }
            let dense: Vec<Option<u32>> = hungarian(&cost, m)
                .into_iter()
                .map(|j| (j < n).then_some(j as u32))
                .collect();
            // a destination at most once
            let mut seen = vec![false; n];
            for d in sparse.iter().flatten() {
                assert!(!seen[*d as usize], "case {case}");
                seen[*d as usize] = true;
            }
            let (a, b) = (total(&e, &sparse, null), total(&e, &dense, null));
            assert!(
                (a - b).abs() <= 1e-9 * b.max(1.0),
                "case {case}: {a} vs {b}"
            );
            // random real costs: the optimum is unique, so the assignments are equal
            assert_eq!(sparse, dense, "case {case}");
        }
    }

    #[test]
    fn greedy_takes_shortest_first() {
        // two sources, two destinations: greedy takes 0→0 (0.1) then 1 has nothing left
        let e = Edges {
            off: vec![0, 2, 3],
            dst: vec![0, 1, 0],
            dist: vec![0.1, 1.0, 0.2],
        };
        assert_eq!(solve_greedy(&e, 2, 4.0), vec![Some(0), None]);
        let rules = Rules {
            range: 2.0,
            cap: usize::MAX,
            adaptive: None,
            drop: None,
        };
        // exact: 0→1, 1→0 costs 1.04 < 0.01 + 4
        assert_eq!(solve_subnet(&e, 2, &rules).0, vec![Some(1), Some(0)]);
    }
}
