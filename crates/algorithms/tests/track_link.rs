//! `link` against trackpy 0.7's `link` on the fixture movie (partitions up to relabelling).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeSet, HashMap};

use algorithms::track::{GreedyParams, LinkParams, filter_stubs, link, link_greedy};
use common::load_csv;

fn partition(ids: &[i64]) -> BTreeSet<Vec<usize>> {
    let mut m: HashMap<i64, Vec<usize>> = HashMap::new();
    for (i, &id) in ids.iter().enumerate() {
        m.entry(id).or_default().push(i);
    }
    m.into_values().collect()
}

fn check(file: &str, memory: usize, tracks: usize) {
    let t = load_csv(file);
    let frames: Vec<i64> = t.f64col("frame").iter().map(|&f| f as i64).collect();
    let (y, x) = (t.f64col("y"), t.f64col("x"));
    let pos: Vec<[f64; 2]> = y.iter().zip(&x).map(|(a, b)| [*a, *b]).collect();
    let golden: Vec<i64> = t.f64col("particle").iter().map(|&p| p as i64).collect();
    let (ids, stats) = link(&frames, &pos, &LinkParams::new(5.0, memory)).unwrap();
    let a = partition(&ids);
    let b = partition(&golden);
    let differing = a.symmetric_difference(&b).count();
    eprintln!(
        "{file}: {} tracks (golden {}), {differing} differing track sets, stats {stats:?}",
        a.len(),
        b.len()
    );
    assert_eq!(b.len(), tracks);
    assert_eq!(a, b, "{file}");
}

#[test]
fn link_memory0_matches_trackpy() {
    check("movie/movie__link_sr5_mem0.csv", 0, 48);
}

#[test]
fn link_memory2_matches_trackpy() {
    check("movie/movie__link_sr5_mem2.csv", 2, 44);
}

#[test]
fn link_gap_levels_and_fallback() {
    // a particle missing at frame 1 (and frame numbers with a hole) is bridged by memory=1 only
    let frames = [0, 2, 0];
    let pos = [[10.0, 10.0], [10.5, 10.0], [50.0, 50.0]];
    let (ids, _) = link(&frames, &pos, &LinkParams::new(2.0, 1)).unwrap();
    assert_eq!(ids[0], ids[1]);
    let (ids, _) = link(&frames, &pos, &LinkParams::new(2.0, 0)).unwrap();
    assert_ne!(ids[0], ids[1]);
    // a dense grid forces one big subnet; a tiny exact limit forces the fallback, reported
    let mut frames = Vec::new();
    let mut pos = Vec::new();
    for f in 0..2 {
        for i in 0..10 {
            for j in 0..10 {
                frames.push(f);
                pos.push([i as f64 + 0.1 * f as f64, j as f64]);
            }
        }
    }
    let mut p = LinkParams::new(1.5, 0);
    let (exact, s1) = link(&frames, &pos, &p).unwrap();
    assert_eq!(s1.fallback_subnets, 0);
    p.max_subnet_sources = 5;
    let (fb, s2) = link(&frames, &pos, &p).unwrap();
    assert!(s2.fallback_subnets > 0);
    assert_eq!(partition(&exact), partition(&fb));
    for k in 0..100 {
        assert_eq!(exact[k], exact[k + 100]);
    }
}

#[test]
fn greedy_and_stubs() {
    let frames = [0, 1, 3, 0];
    let pos = [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [40.0, 40.0]];
    let ids = link_greedy(
        &frames,
        &pos,
        &GreedyParams {
            max_distance: 5.0,
            max_gap: 2,
            min_track_length: 3,
        },
    )
    .unwrap();
    assert_eq!(ids[0], ids[1]);
    assert_eq!(ids[1], ids[2]);
    assert_eq!(ids[3], -1);
    let mut ids = vec![0, 0, 1, 2, 2, 2];
    filter_stubs(&mut ids, 2);
    assert_eq!(ids, vec![0, 0, -1, 2, 2, 2]);
}

#[test]
fn huge_frame_gaps_are_skipped() {
    let frames = [0, 1_000_000_000_000, 1_000_000_000_001];
    let pos = [[1.0, 1.0], [1.0, 1.0], [1.5, 1.0]];
    let (ids, stats) = link(&frames, &pos, &LinkParams::new(2.0, 3)).unwrap();
    assert_ne!(ids[0], ids[1]);
    assert_eq!(ids[1], ids[2]);
    assert!(stats.levels < 20);
}
