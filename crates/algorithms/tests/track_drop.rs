//! [`LinkStrategy::Drop`]: trackpy's `link_strategy='drop'` (trackpy's `subnet_linker_drop`
//! behind its `Linker`, with and without `adaptive_link_wrap`). The comparison with trackpy
//! itself on random walks is `crates/bridge-python/tests/test_trackpy_drop.py`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};

use algorithms::synth::SplitMix;
use algorithms::track::{
    Adaptive, LinkParams, LinkStrategy, Linker, is_subnet_oversize, link, link_nd,
};
use bridge_core::BridgeError;

fn drop(search_range: f64, memory: usize) -> LinkParams {
    LinkParams {
        link_strategy: LinkStrategy::Drop,
        ..LinkParams::new(search_range, memory)
    }
}

fn partition(ids: &[i64]) -> BTreeSet<Vec<usize>> {
    let mut m: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, &id) in ids.iter().enumerate() {
        m.entry(id).or_default().push(i);
    }
    m.into_values().collect()
}

/// trackpy's `TestDropLink.test_drop_link`: a stepper, and a new particle in frame 1 within
/// the larger search range: the subnet (one source, two destinations) is dropped.
#[test]
fn a_subnet_breaks_the_track() {
    let frames = [0, 1, 1];
    let pos = [[1.0, 0.0], [1.0, 1.0], [1.0, 3.0]];
    assert_eq!(link(&frames, &pos, &drop(1.5, 0)).unwrap().0, [0, 0, 1]);
    let (ids, stats) = link(&frames, &pos, &drop(5.0, 0)).unwrap();
    assert_eq!(ids, [0, 1, 2]);
    assert_eq!(stats.dropped_subnets, 1);
    // solved, the stepper goes on
    assert_eq!(
        link(&frames, &pos, &LinkParams::new(5.0, 0)).unwrap().0,
        [0, 0, 1]
    );
}

/// A dropped source waits in memory like any unlinked one, and a one-to-one subnet beside a
/// dropped one is linked.
#[test]
fn dropped_sources_wait_in_memory() {
    // A at (0, 0), B far away; frame 1: A's subnet has two destinations (dropped), B one;
    // frame 3: a point only A can reach (A1 and A2 are 1.2 away), two frames later
    let frames = [0, 0, 1, 1, 1, 3];
    let pos = [
        [0.0, 0.0],
        [0.0, 10.0],
        [0.0, 0.8],
        [0.0, -0.8],
        [0.0, 10.2],
        [0.9, 0.0],
    ];
    let (ids, stats) = link(&frames, &pos, &drop(1.0, 2)).unwrap();
    assert_eq!(ids, [0, 1, 2, 3, 1, 0]);
    assert_eq!(stats.dropped_subnets, 1);
    // with too little memory, A is forgotten
    assert_eq!(
        link(&frames, &pos, &drop(1.0, 1)).unwrap().0,
        [0, 1, 2, 3, 1, 4]
    );
}

/// A square grid of `n × n` points `spacing` apart, shifted by `(dy, dx)`.
fn grid(n: usize, spacing: f64, dy: f64, dx: f64) -> Vec<[f64; 2]> {
    (0..n * n)
        .map(|i| [(i / n) as f64 * spacing + dy, (i % n) as f64 * spacing + dx])
        .collect()
}

/// More than 30 sources in one subnet: trackpy's `SubnetOversizeException`, as a typed
/// `InvalidInput`, and the streaming linker is left as it was.
#[test]
fn an_oversize_subnet_is_an_error_and_the_linker_is_unchanged() {
    let mut l = Linker::new(drop(1.5, 1)).unwrap();
    l.push_frame(0, &grid(6, 1.0, 0.0, 0.0)).unwrap();
    let (stats, active) = (l.stats(), l.active_tracks());
    let e = l.push_frame(1, &grid(6, 1.0, 0.05, 0.05)).unwrap_err();
    assert!(is_subnet_oversize(&e), "{e}");
    assert!(matches!(e, BridgeError::InvalidInput(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("SubnetOversizeException") && msg.contains("frame 1"),
        "{msg}"
    );
    assert!(
        msg.contains("36 points") && msg.contains("more than 30"),
        "{msg}"
    );
    assert_eq!(l.last_frame(), Some(0));
    assert_eq!((l.stats(), l.active_tracks()), (stats, active));
    // the same frame number can be pushed again, and no track id was spent
    assert_eq!(l.push_frame(1, &[[100.0, 100.0]]).unwrap(), [36]);
    // 30 sources are dropped, not refused
    let (ids, stats) = link(
        &[[0i64; 30], [1; 30]].concat(),
        &[
            grid(6, 1.0, 0.0, 0.0)[..30].to_vec(),
            grid(6, 1.0, 0.05, 0.05)[..30].to_vec(),
        ]
        .concat(),
        &drop(1.5, 0),
    )
    .unwrap();
    assert_eq!(stats.dropped_subnets, 1);
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 60);
    // the solving strategy links the big subnet
    let (ids, _) = link(
        &[[0i64; 36], [1; 36]].concat(),
        &[grid(6, 1.0, 0.0, 0.0), grid(6, 1.0, 0.05, 0.05)].concat(),
        &LinkParams::new(1.5, 0),
    )
    .unwrap();
    assert_eq!(ids[..36], ids[36..]);
}

/// With the adaptive search, a big subnet is split (trackpy's `adaptive_link_wrap` around
/// its drop linker): here every part is one source and one destination, all linked; a part
/// still above 15 sources at `adaptive_stop` is the error.
#[test]
fn the_adaptive_search_splits_before_dropping() {
    let frames = [[0i64; 36], [1; 36]].concat();
    let pos = [grid(6, 1.0, 0.0, 0.0), grid(6, 1.0, 0.05, 0.05)].concat();
    let adaptive = |stop: f64| LinkParams {
        adaptive: Some(Adaptive::new(stop, 0.5)),
        ..drop(1.5, 0)
    };
    let (ids, stats) = link(&frames, &pos, &adaptive(0.1)).unwrap();
    assert_eq!(ids[..36], ids[36..]);
    assert_eq!((stats.adaptive_subnets, stats.dropped_subnets), (1, 0));
    // the range is not reduced below 1.5: 36 sources > 15
    let e = link(&frames, &pos, &adaptive(1.5)).unwrap_err();
    assert!(
        is_subnet_oversize(&e) && e.to_string().contains("more than 15"),
        "{e}"
    );
    // 16 sources: above the adaptive size (15), below the plain one (30)
    let f16 = [[0i64; 16], [1; 16]].concat();
    let p16 = [grid(4, 1.0, 0.0, 0.0), grid(4, 1.0, 0.05, 0.05)].concat();
    assert!(link(&f16, &p16, &adaptive(1.5)).is_err());
    assert_eq!(
        link(&f16, &p16, &drop(1.5, 0)).unwrap().1.dropped_subnets,
        1
    );
}

/// Walkers farther apart than twice the search range never share a subnet: dropping changes
/// nothing there, in 2-D and 3-D, with memory and blinking.
#[test]
fn without_subnets_drop_equals_solve_on_random_walks() {
    let mut rng = SplitMix::new(2024);
    let n = 40;
    let start: Vec<[f64; 3]> = (0..n)
        .map(|i| [(i % 5) as f64 * 12.0, ((i / 5) % 8) as f64 * 12.0, 0.0])
        .collect();
    let (mut frames, mut pos2, mut pos3) = (Vec::new(), Vec::new(), Vec::new());
    let mut cur = start.clone();
    for t in 0..30i64 {
        for p in cur.iter_mut() {
            if rng.uniform() < 0.1 {
                continue; // blinks
            }
            for a in p.iter_mut().take(2) {
                *a += rng.range(-0.8, 0.8);
            }
            p[2] = rng.range(-0.5, 0.5);
            frames.push(t);
            pos2.push([p[0], p[1]]);
            pos3.push(*p);
        }
    }
    for memory in [0, 3] {
        let solved = link(&frames, &pos2, &LinkParams::new(2.0, memory))
            .unwrap()
            .0;
        let (dropped, stats) = link(&frames, &pos2, &drop(2.0, memory)).unwrap();
        assert_eq!(dropped, solved);
        assert_eq!(stats.dropped_subnets, 0);
        let solved = link_nd(&frames, &pos3, &LinkParams::new(2.0, memory))
            .unwrap()
            .0;
        assert_eq!(
            link_nd(&frames, &pos3, &drop(2.0, memory)).unwrap().0,
            solved
        );
    }
    // crowded: the same walkers squeezed together make subnets, which are dropped
    let squeezed: Vec<[f64; 2]> = pos2.iter().map(|p| [p[0] * 0.15, p[1] * 0.15]).collect();
    let (dropped, stats) = link(&frames, &squeezed, &drop(1.0, 0)).unwrap();
    let solved = link(&frames, &squeezed, &LinkParams::new(1.0, 0))
        .unwrap()
        .0;
    assert!(stats.dropped_subnets > 0);
    assert!(partition(&dropped).len() > partition(&solved).len());
}

#[test]
fn drop_refuses_the_greedy_cap() {
    let p = LinkParams {
        max_subnet_sources: 10,
        ..drop(1.0, 0)
    };
    let e = p.validate().unwrap_err();
    assert!(matches!(e, BridgeError::InvalidArgument { .. }), "{e}");
    assert!(Linker::new(p).is_err());
}
