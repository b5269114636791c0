//! 3-D linking against trackpy 0.7: `link_nd::<3>` and the streaming `Linker<3>` on random 3-D
//! walkers (`z, y, x`) that appear, disappear and blink, with dense clusters (subnets), memory
//! and the adaptive search. Goldens in `fixtures/track/link3d_*.csv`, made by
//! `scripts/fixtures/track_3d.py`: one particle-id column per trackpy call, its ids
//! renumbered by first appearance (trackpy's own numbering of a frame's new tracks varies from
//! run to run): compared as partitions, then id for id once the linker's ids are renumbered
//! the same way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};

use algorithms::track::{
    Adaptive, InitialVelocities, LinkParams, LinkStats, Linker, Predictor, VelocityPredict, link,
    link_nd,
};

/// `fixtures/track/<name>`: frames, `[z, y, x]` positions and the golden ids of each column.
struct Golden {
    frames: Vec<i64>,
    pos: Vec<[f64; 3]>,
    ids: Vec<(String, Vec<i64>)>,
}

fn golden(name: &str) -> Golden {
    let path = test_support::fixtures::path("track").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header[..4], ["frame", "z", "y", "x"], "{name}");
    let mut g = Golden {
        frames: Vec::new(),
        pos: Vec::new(),
        ids: header[4..]
            .iter()
            .map(|h| (h.to_string(), Vec::new()))
            .collect(),
    };
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        g.frames.push(f[0].parse().unwrap());
        g.pos.push([
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        ]);
        for (k, col) in g.ids.iter_mut().enumerate() {
            col.1.push(f[4 + k].parse().unwrap());
        }
    }
    g
}

fn partition(ids: &[i64]) -> BTreeSet<Vec<usize>> {
    let mut m: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, &id) in ids.iter().enumerate() {
        m.entry(id).or_default().push(i);
    }
    m.into_values().collect()
}

/// The parameters of a golden column: `sr<range>_mem<memory>`, `sr<range>_adaptive` (memory 1,
/// stop 1, step 0.9), `sr<range>_adaptive_mem<memory>` (stop 0.5, step 0.9 for memory 0, 0.8
/// otherwise), as `scripts/fixtures/track_3d.py` calls trackpy.
fn params(column: &str) -> LinkParams {
    let parts: Vec<&str> = column.split('_').collect();
    let sr: f64 = parts[0].strip_prefix("sr").unwrap().parse().unwrap();
    let memory = |s: &str| -> usize { s.strip_prefix("mem").unwrap().parse().unwrap() };
    match parts[1..] {
        ["adaptive"] => LinkParams {
            adaptive: Some(Adaptive::new(1.0, 0.9)),
            ..LinkParams::new(sr, 1)
        },
        ["adaptive", m] => {
            let m = memory(m);
            let step = if m == 0 { 0.9 } else { 0.8 };
            LinkParams {
                adaptive: Some(Adaptive::new(0.5, step)),
                ..LinkParams::new(sr, m)
            }
        }
        [m] => LinkParams::new(sr, memory(m)),
        _ => panic!("column {column}"),
    }
}

/// `ids` renumbered 0, 1, … in order of first appearance in row order.
fn by_first_appearance(ids: &[i64]) -> Vec<i64> {
    let mut map = HashMap::new();
    ids.iter()
        .map(|&i| {
            let next = map.len() as i64;
            *map.entry(i).or_insert(next)
        })
        .collect()
}

/// Link every golden column of `name` (batch and streaming) and compare the tracks.
fn check(name: &str) -> Vec<LinkStats> {
    let g = golden(name);
    let mut all = Vec::new();
    for (column, want) in &g.ids {
        let p = params(column);
        let (ids, stats) = link_nd(&g.frames, &g.pos, &p).unwrap();
        let (a, b) = (partition(&ids), partition(want));
        eprintln!(
            "{name} {column}: {} tracks (trackpy {}), {} differing, {stats:?}",
            a.len(),
            b.len(),
            a.symmetric_difference(&b).count()
        );
        assert_eq!(a, b, "{name} {column}: tracks");
        // the goldens are numbered by first appearance in row order (the linker numbers a
        // frame's new tracks in trackpy's subnet order): equal once renumbered so
        assert_eq!(&by_first_appearance(&ids), want, "{name} {column}: ids");
        // the streaming linker, frame by frame (rows of a frame are contiguous, ascending)
        let mut linker = Linker::<3>::new_nd(p).unwrap();
        let mut streamed = Vec::new();
        let mut i = 0;
        while i < g.frames.len() {
            let j = i + g.frames[i..]
                .iter()
                .take_while(|&&f| f == g.frames[i])
                .count();
            streamed.extend(linker.push_frame(g.frames[i], &g.pos[i..j]).unwrap());
            i = j;
        }
        assert_eq!(streamed, ids, "{name} {column}: streamed");
        all.push(stats);
    }
    all
}

#[test]
fn walkers_match_trackpy_in_3d() {
    let stats = check("link3d_walkers.csv");
    // subnets with several sources, and the adaptive search at work
    assert!(stats.iter().any(|s| s.largest_subnet >= 5), "{stats:?}");
    assert!(stats[3].adaptive_subnets > 0, "{stats:?}");
}

#[test]
fn dense_gas_matches_trackpy_adaptive_search_in_3d() {
    let stats = check("link3d_dense.csv");
    for s in &stats {
        assert!(
            s.adaptive_subnets > 0 && s.adaptive_unresolved == 0,
            "{s:?}"
        );
    }
}

#[test]
fn the_third_axis_counts() {
    // the same (y, x) and frames: one z far apart makes a new track
    let frames = [0, 0, 1, 1];
    let pos3 = [
        [0.0, 1.0, 1.0],
        [0.0, 9.0, 9.0],
        [5.0, 1.2, 1.0],
        [0.0, 9.0, 9.3],
    ];
    let (ids, _) = link_nd(&frames, &pos3, &LinkParams::new(2.0, 0)).unwrap();
    assert_eq!(ids, [0, 1, 2, 1]);
    // with z = 0 everywhere, 3-D and 2-D agree
    let flat: Vec<[f64; 3]> = pos3.iter().map(|p| [0.0, p[1], p[2]]).collect();
    let yx: Vec<[f64; 2]> = pos3.iter().map(|p| [p[1], p[2]]).collect();
    let (a, _) = link_nd(&frames, &flat, &LinkParams::new(2.0, 0)).unwrap();
    let (b, _) = link(&frames, &yx, &LinkParams::new(2.0, 0)).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, [0, 1, 0, 1]);
    // a non-finite coordinate on any axis is refused
    let bad = [[0.0, 0.0, 0.0], [f64::NAN, 1.0, 1.0]];
    assert!(link_nd(&[0, 1], &bad, &LinkParams::new(2.0, 0)).is_err());
}

#[test]
fn velocity_predictor_in_3d() {
    // two particles drifting 1.5 along z per frame, 2 apart in y: with a search range of 1 only
    // the predictor follows them (the first link is within range)
    let mut frames = Vec::new();
    let mut pos = Vec::new();
    for t in 0..6 {
        let z = if t == 0 {
            0.0
        } else {
            0.5 + 1.5 * f64::from(t - 1)
        };
        for y in [0.0, 2.0] {
            frames.push(i64::from(t));
            pos.push([z, y, 3.0]);
        }
    }
    let velocity = LinkParams {
        predictor: Predictor::NearestVelocity(VelocityPredict::default()),
        ..LinkParams::new(1.0, 0)
    };
    let (ids, _) = link_nd(&frames, &pos, &velocity).unwrap();
    assert_eq!(ids, [0, 1].repeat(6));
    let (plain, _) = link_nd(&frames, &pos, &LinkParams::new(1.0, 0)).unwrap();
    assert_eq!(partition(&plain).len(), 10);
    // an initial guess holds 2-D samples: refused in 3-D, taken in 2-D
    let guess = LinkParams {
        predictor: Predictor::NearestVelocity(VelocityPredict {
            span: 1,
            initial_guess: Some(InitialVelocities {
                positions: vec![[0.0, 0.0]],
                velocities: vec![[1.0, 0.0]],
            }),
        }),
        ..LinkParams::new(1.0, 0)
    };
    assert!(Linker::<3>::new_nd(guess.clone()).is_err());
    assert!(link_nd(&frames, &pos, &guess).is_err());
    assert!(Linker::new(guess).is_ok());
}
