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

fn greedy(frames: &[i64], pos: &[[f64; 2]], max_distance: f64, max_gap: usize) -> Vec<i64> {
    link_greedy(
        frames,
        pos,
        &GreedyParams {
            max_distance,
            max_gap,
            min_track_length: 0,
        },
    )
    .unwrap()
}

#[test]
fn greedy_memory_means_frames_absent() {
    // max_gap 0: consecutive frames are linked, a one-frame hole is not
    let frames = [0, 1, 3];
    let pos = [[5.0, 5.0], [5.5, 5.0], [6.0, 5.0]];
    let ids = greedy(&frames, &pos, 2.0, 0);
    assert_eq!(ids[0], ids[1]);
    assert_ne!(ids[1], ids[2]);
    // max_gap 1: absent at frame 2 only, still linked; like link's memory
    let ids = greedy(&frames, &pos, 2.0, 1);
    assert_eq!(ids[0], ids[2]);
    let (ids, _) = link(&frames, &pos, &LinkParams::new(2.0, 1)).unwrap();
    assert_eq!(ids[0], ids[2]);
    let (ids, _) = link(&frames, &pos, &LinkParams::new(2.0, 0)).unwrap();
    assert_ne!(ids[1], ids[2]);
}

/// A 4×4 grid of particles 20 px apart drifting 0.3 px per frame over 12 frames; particle k is
/// absent from some frames (holes of 1, 2 and 3 frames), so memory decides where tracks split.
fn separated_particles() -> (Vec<i64>, Vec<[f64; 2]>) {
    let mut frames = Vec::new();
    let mut pos = Vec::new();
    for t in 0..12i64 {
        for k in 0..16usize {
            let absent = match k % 4 {
                1 => t == 4,
                2 => (5..7).contains(&t),
                3 => (3..6).contains(&t) || t == 9,
                _ => false,
            };
            if absent {
                continue;
            }
            frames.push(t);
            let (i, j) = ((k / 4) as f64, (k % 4) as f64);
            let d = 0.3 * t as f64;
            pos.push([20.0 + 20.0 * i + d, 20.0 + 20.0 * j + 0.5 * d]);
        }
    }
    (frames, pos)
}

#[test]
fn greedy_and_optimal_agree_on_separated_particles() {
    let (frames, pos) = separated_particles();
    for (memory, tracks) in [(0usize, 16 + 4 + 4 + 8), (2, 16 + 4)] {
        let g = greedy(&frames, &pos, 5.0, memory);
        let (o, _) = link(&frames, &pos, &LinkParams::new(5.0, memory)).unwrap();
        assert_eq!(partition(&g), partition(&o), "memory {memory}");
        assert_eq!(partition(&o).len(), tracks, "memory {memory}");
    }
}

#[test]
fn gap_of_a_billion_frames_costs_nothing() {
    let frames = [0, 1, 1_000_000_000_001, 1_000_000_000_002];
    let pos = [[1.0, 1.0], [1.2, 1.0], [1.4, 1.0], [1.6, 1.0]];
    let start = std::time::Instant::now();
    // absent for 10¹² - 1 frames: linked with memory ≥ that, split below it. A tracker that
    // stepped through the empty frames would never finish; the 60 s bound only catches that
    // (it is no speed target: a loaded CI machine is slow).
    let (ids, stats) = link(&frames, &pos, &LinkParams::new(2.0, 1_000_000_000_000)).unwrap();
    assert!(ids.iter().all(|&i| i == ids[0]), "{ids:?}");
    assert_eq!(stats.levels, 4);
    let (ids, _) = link(&frames, &pos, &LinkParams::new(2.0, 999_999_999_999)).unwrap();
    assert!(ids.iter().all(|&i| i == ids[0]), "{ids:?}");
    let (ids, _) = link(&frames, &pos, &LinkParams::new(2.0, 999_999_999_998)).unwrap();
    assert_eq!((ids[0] == ids[1], ids[1] == ids[2]), (true, false));
    let ids = greedy(&frames, &pos, 2.0, 999_999_999_999);
    assert!(ids.iter().all(|&i| i == ids[0]), "{ids:?}");
    let ids = greedy(&frames, &pos, 2.0, 999_999_999_998);
    assert_eq!((ids[0] == ids[1], ids[1] == ids[2]), (true, false));
    assert!(
        start.elapsed().as_secs_f64() < 60.0,
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn extreme_frame_numbers_do_not_overflow() {
    let frames = [i64::MIN, i64::MAX, i64::MAX, 0];
    let pos = [[1.0, 1.0], [1.0, 1.0], [1e300, -1e300], [1.0, 1.0]];
    let max = 1usize << 40;
    let (ids, stats) = link(&frames, &pos, &LinkParams::new(2.0, max)).unwrap();
    assert_eq!(stats.levels, 3);
    assert_eq!(stats.tracks, 4);
    assert_eq!(partition(&ids).len(), 4);
    let ids = link_greedy(
        &frames,
        &pos,
        &GreedyParams {
            max_distance: 2.0,
            max_gap: max,
            min_track_length: 2,
        },
    )
    .unwrap();
    assert_eq!(ids, vec![-1; 4]);
    // huge coordinates and a tiny search range: grid keys saturate, nothing overflows
    let frames = [0, 1, 1];
    let pos = [[1e300, 1e300], [1e300, 1e300], [-1e300, 1e300]];
    let (ids, _) = link(&frames, &pos, &LinkParams::new(1e-300, 0)).unwrap();
    assert_eq!(ids[0], ids[1]);
    let ids = greedy(&frames, &pos, 1e-300, 0);
    assert_eq!(ids[0], ids[1]);
}

/// Random walkers over 300 frames (numbers with holes), some absent now and then.
fn walkers(seed: u64) -> (Vec<i64>, Vec<[f64; 2]>) {
    let mut rng = algorithms::synth::SplitMix::new(seed);
    let mut pts: Vec<[f64; 2]> = (0..80)
        .map(|_| [rng.range(0.0, 200.0), rng.range(0.0, 200.0)])
        .collect();
    let (mut frames, mut pos) = (Vec::new(), Vec::new());
    for t in 0..300i64 {
        for p in &mut pts {
            p[0] += 0.7 * rng.normal();
            p[1] += 0.7 * rng.normal();
            if rng.uniform() < 0.85 {
                frames.push(t + t / 5);
                pos.push(*p);
            }
        }
    }
    (frames, pos)
}

/// The streaming linkers give `link`'s and `link_greedy`'s ids frame by frame, hold only the
/// tracks that may continue, and a track they no longer hold never comes back.
#[test]
fn streaming_linkers_match_the_whole_table_and_forget_finished_tracks() {
    use algorithms::track::{GreedyLinker, Linker, long_enough};
    for seed in [1, 2, 3] {
        let (frames, pos) = walkers(seed);
        for memory in [0, 2] {
            let (want, _) = link(&frames, &pos, &LinkParams::new(2.5, memory)).unwrap();
            let gp = GreedyParams {
                max_distance: 2.5,
                max_gap: memory,
                min_track_length: 0,
            };
            let want_greedy = link_greedy(&frames, &pos, &gp).unwrap();
            let mut opt = Linker::new(LinkParams::new(2.5, memory)).unwrap();
            let mut gr = GreedyLinker::new(gp.clone()).unwrap();
            let (mut got, mut got_greedy) = (Vec::new(), Vec::new());
            let mut finished: BTreeSet<(bool, i64)> = BTreeSet::new();
            let mut start = 0;
            let mut max_active = 0;
            while start < frames.len() {
                let end = start + frames[start..].partition_point(|&f| f == frames[start]);
                let ids = opt.push_frame(frames[start], &pos[start..end]).unwrap();
                let gids = gr.push_frame(frames[start], &pos[start..end]).unwrap();
                for (greedy, ids) in [(false, &ids), (true, &gids)] {
                    for id in ids {
                        assert!(!finished.contains(&(greedy, *id)), "track {id} came back");
                    }
                }
                got.extend(ids);
                got_greedy.extend(gids);
                for id in 0..opt.stats().tracks as i64 {
                    if !opt.is_active(id) {
                        finished.insert((false, id));
                    }
                }
                for id in 0..gr.tracks() as i64 {
                    if !gr.is_active(id) {
                        finished.insert((true, id));
                    }
                }
                max_active = max_active.max(opt.active_tracks().max(gr.active_tracks()));
                start = end;
            }
            assert_eq!(got, want, "seed {seed}, memory {memory}");
            assert_eq!(got_greedy, want_greedy, "seed {seed}, memory {memory}");
            // 80 walkers: the tracks held are a few frames' worth, not 300 frames'
            assert!(max_active <= 80 * (memory + 3), "{max_active}");
            assert!(!finished.is_empty());
        }
        // min_track_length: a greedy track's length is last − first frame + 1
        let gp = GreedyParams {
            max_distance: 2.5,
            max_gap: 1,
            min_track_length: 30,
        };
        let ids = link_greedy(&frames, &pos, &gp).unwrap();
        let all = link_greedy(
            &frames,
            &pos,
            &GreedyParams {
                min_track_length: 0,
                ..gp.clone()
            },
        )
        .unwrap();
        let mut span: HashMap<i64, (i64, i64)> = HashMap::new();
        for (&id, &f) in all.iter().zip(&frames) {
            let e = span.entry(id).or_insert((f, f));
            e.1 = f;
        }
        for (k, (&a, &b)) in all.iter().zip(&ids).enumerate() {
            let (s, e) = span[&a];
            assert_eq!(b, if long_enough(s, e, 30) { a } else { -1 }, "row {k}");
        }
        assert!(ids.iter().any(|&i| i >= 0) && ids.contains(&-1));
    }
}

/// New tracks are numbered as trackpy numbers them: subnet by subnet, in ascending order of
/// each subnet's last destination row. Row 1 (on its own) comes before row 0, which the source
/// left for the nearer row 2; the streaming linker numbers them the same way.
#[test]
fn new_tracks_are_numbered_in_trackpys_order_of_subnets() {
    use algorithms::track::Linker;
    let frames = [0, 1, 1, 1];
    let pos = [[0.0, 0.0], [0.0, 0.5], [50.0, 50.0], [0.0, 0.2]];
    let (ids, stats) = link(&frames, &pos, &LinkParams::new(2.0, 0)).unwrap();
    assert_eq!(ids, [0, 2, 1, 0]);
    assert_eq!(stats.tracks, 3);
    let mut linker = Linker::new(LinkParams::new(2.0, 0)).unwrap();
    assert_eq!(linker.push_frame(0, &pos[..1]).unwrap(), [0]);
    assert_eq!(linker.push_frame(1, &pos[1..]).unwrap(), [2, 1, 0]);
    assert!(linker.is_active(1) && linker.is_active(2));
}
