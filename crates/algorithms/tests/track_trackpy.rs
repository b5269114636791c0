//! The linker against trackpy 0.7 beyond plain `link`: the adaptive search, the velocity
//! predictor, subnets of any size (against SciPy's global optimum where trackpy raises
//! `SubnetOversizeException`), the streaming [`Linker`], and bad input. Goldens in
//! `fixtures/track/`, made by `scripts/fixtures/track_trackpy.py` (partitions compared up to
//! relabelling).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};

use algorithms::track::{
    Adaptive, InitialVelocities, LinkParams, LinkStats, Linker, Predictor, VelocityPredict, link,
};
use bridge_core::BridgeError;

/// `fixtures/track/<name>`: frames, `[y, x]` positions and the golden particle ids.
struct Golden {
    frames: Vec<i64>,
    pos: Vec<[f64; 2]>,
    ids: Vec<i64>,
}

fn golden(name: &str) -> Golden {
    let path = test_support::fixtures::path("track").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("frame,y,x,particle"), "{name}");
    let mut g = Golden {
        frames: Vec::new(),
        pos: Vec::new(),
        ids: Vec::new(),
    };
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        g.frames.push(f[0].parse().unwrap());
        g.pos.push([f[1].parse().unwrap(), f[2].parse().unwrap()]);
        g.ids.push(f[3].parse().unwrap());
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

/// Link the golden's points with `p` and compare with its ids.
fn check(name: &str, p: &LinkParams) -> LinkStats {
    let g = golden(name);
    let (ids, stats) = link(&g.frames, &g.pos, p).unwrap();
    let (a, b) = (partition(&ids), partition(&g.ids));
    eprintln!(
        "{name}: {} tracks (golden {}), {} differing, {stats:?}",
        a.len(),
        b.len(),
        a.symmetric_difference(&b).count()
    );
    assert_eq!(a, b, "{name}");
    stats
}

fn adaptive(sr: f64, stop: f64, step: f64, memory: usize) -> LinkParams {
    LinkParams {
        adaptive: Some(Adaptive::new(stop, step)),
        ..LinkParams::new(sr, memory)
    }
}

#[test]
fn adaptive_search_matches_trackpy() {
    // trackpy's test_adaptive_range: 441 contracting grid points, step 0.8 down to 0.64
    let s = check(
        "adaptive_contracting_grid.csv",
        &adaptive(2.0, 0.64, 0.8, 0),
    );
    assert!(
        s.adaptive_subnets > 0 && s.adaptive_unresolved == 0,
        "{s:?}"
    );
    // trackpy's test_adaptive_subnet: at most 1 source per subnet, ranges 8, 2, 0.5
    let p = LinkParams {
        adaptive: Some(Adaptive {
            stop: 0.25,
            step: 0.25,
            max_subnet: 1,
        }),
        ..LinkParams::new(8.0, 0)
    };
    let s = check("adaptive_subnet_max1.csv", &p);
    assert_eq!(s.adaptive_subnets, 1);
    // dense random walkers that blink, with and without memory
    for (file, memory) in [
        ("adaptive_brownian_mem0.csv", 0),
        ("adaptive_brownian_mem2.csv", 2),
    ] {
        let s = check(file, &adaptive(4.0, 1.0, 0.9, memory));
        assert!(s.adaptive_subnets > 0, "{s:?}");
    }
}

#[test]
fn adaptive_search_goes_on_where_trackpy_gives_up() {
    // trackpy's test_adaptive_fail: SubnetOversizeException with adaptive_stop 1.84; here the
    // parts still too large are solved exactly at the last range, and counted
    let g = golden("adaptive_contracting_grid.csv");
    let (ids, s) = link(&g.frames, &g.pos, &adaptive(2.0, 1.84, 0.95, 0)).unwrap();
    assert!(s.adaptive_unresolved > 0, "{s:?}");
    assert_eq!(ids.len(), g.ids.len());
    // a stop at or above the search range: no reduction at all, solved exactly at range 2
    let (ids_exact, _) = link(&g.frames, &g.pos, &LinkParams::new(2.0, 0)).unwrap();
    let (ids_stop, s) = link(&g.frames, &g.pos, &adaptive(2.0, 2.0, 0.5, 0)).unwrap();
    assert!(s.adaptive_unresolved > 0);
    assert_eq!(partition(&ids_exact), partition(&ids_stop));
}

/// Total cost of a memory-0 linking: d² per link, `sr²` per source left unlinked.
fn cost(frames: &[i64], pos: &[[f64; 2]], ids: &[i64], sr: f64) -> (f64, usize) {
    let mut by_frame: HashMap<i64, HashMap<i64, usize>> = HashMap::new();
    for (i, (&f, &id)) in frames.iter().zip(ids).enumerate() {
        by_frame.entry(f).or_default().insert(id, i);
    }
    let (mut total, mut links) = (0.0, 0);
    let mut ts: Vec<i64> = by_frame.keys().copied().collect();
    ts.sort_unstable();
    for w in ts.windows(2) {
        let next = &by_frame[&w[1]];
        for (id, &i) in &by_frame[&w[0]] {
            match next.get(id) {
                Some(&j) => {
                    let (dy, dx) = (pos[j][0] - pos[i][0], pos[j][1] - pos[i][1]);
                    total += dy * dy + dx * dx;
                    links += 1;
                }
                None => total += sr * sr,
            }
        }
    }
    (total, links)
}

#[test]
fn subnets_of_any_size_are_solved_optimally() {
    // trackpy raises SubnetOversizeException on both; the goldens are SciPy's global optimum
    // over trackpy's candidate graph
    for (file, sr, unique) in [
        ("optimal_contracting_grid.csv", 2.0, false),
        ("optimal_dense_brownian.csv", 5.0, true),
    ] {
        let g = golden(file);
        let (ids, s) = link(&g.frames, &g.pos, &LinkParams::new(sr, 0)).unwrap();
        assert!(s.largest_subnet > 30, "{file}: {s:?}");
        assert_eq!(s.fallback_subnets, 0);
        let (c, l) = cost(&g.frames, &g.pos, &ids, sr);
        let (cg, lg) = cost(&g.frames, &g.pos, &g.ids, sr);
        eprintln!("{file}: cost {c} ({l} links), SciPy {cg} ({lg} links), {s:?}");
        assert!((c - cg).abs() <= 1e-9 * cg, "{file}: {c} vs {cg}");
        if unique {
            // random positions: one optimum, the same tracks
            assert_eq!(partition(&ids), partition(&g.ids), "{file}");
        }
        // the explicit cap is reported and costs optimality here
        let capped = LinkParams {
            max_subnet_sources: 30,
            ..LinkParams::new(sr, 0)
        };
        let (ids_c, s) = link(&g.frames, &g.pos, &capped).unwrap();
        assert!(s.fallback_subnets > 0);
        // (sums in hash order: equal costs may differ in the last bits)
        assert!(cost(&g.frames, &g.pos, &ids_c, sr).0 >= c * (1.0 - 1e-12));
    }
}

fn velocity(span: usize, memory: usize, sr: f64) -> LinkParams {
    LinkParams {
        predictor: Predictor::NearestVelocity(VelocityPredict {
            span,
            initial_guess: None,
        }),
        ..LinkParams::new(sr, memory)
    }
}

#[test]
fn velocity_predictor_matches_trackpy() {
    // trackpy's test_predict.py (NearestVelocityPredict)
    for file in [
        "predict_simple.csv",
        "predict_big.csv",
        "predict_newparticles.csv",
        "predict_memory0.csv",
    ] {
        check(file, &velocity(1, 0, 45.0));
    }
    let s = check("predict_memory1.csv", &velocity(1, 1, 45.0));
    assert_eq!(s.tracks, 9);
    check("predict_pos_columns.csv", &velocity(1, 0, 100.0));
    let guess = LinkParams {
        predictor: Predictor::NearestVelocity(VelocityPredict {
            span: 1,
            initial_guess: Some(InitialVelocities {
                positions: vec![[0.0, 0.0]],
                velocities: vec![[-1.0, 1.0]],
            }),
        }),
        ..LinkParams::new(45.0, 0)
    };
    let s = check("predict_initial_guess.csv", &guess);
    assert_eq!(s.tracks, 9);
    // without prediction these tracks break
    let g = golden("predict_simple.csv");
    let (ids, _) = link(&g.frames, &g.pos, &LinkParams::new(45.0, 0)).unwrap();
    assert!(partition(&ids).len() > 9);
    // random walkers in a rotating flow, frames missing, blinking, memory 1
    check("predict_swirl_span1.csv", &velocity(1, 1, 6.0));
    check("predict_swirl_span2.csv", &velocity(2, 1, 6.0));
}

#[test]
fn linker_streams_frames_with_memory_bounded_by_particles() {
    // the streaming linker gives what `link` gives
    let g = golden("adaptive_brownian_mem2.csv");
    let p = LinkParams::new(4.0, 2);
    let (ids, stats) = link(&g.frames, &g.pos, &p).unwrap();
    let mut linker = Linker::new(p).unwrap();
    let mut streamed = vec![0; ids.len()];
    let mut t = g.frames[0];
    let mut rows = Vec::new();
    for i in 0..=g.frames.len() {
        if i == g.frames.len() || g.frames[i] != t {
            let pos: Vec<[f64; 2]> = rows.iter().map(|&r: &usize| g.pos[r]).collect();
            for (&r, id) in rows.iter().zip(linker.push_frame(t, &pos).unwrap()) {
                streamed[r] = id;
            }
            rows.clear();
            if i == g.frames.len() {
                break;
            }
            t = g.frames[i];
        }
        rows.push(i);
    }
    assert_eq!(streamed, ids);
    assert_eq!(linker.stats(), stats);
    // 20 000 frames of 20 particles, each blinking: the tracks held stay bounded by the
    // particles × (memory + 1), whatever the number of frames
    let mut linker = Linker::new(LinkParams::new(1.0, 3)).unwrap();
    let mut rng = algorithms::synth::SplitMix::new(9);
    let mut most = 0;
    for t in 0..20_000i64 {
        let mut pos: Vec<[f64; 2]> = Vec::new();
        for k in 0..20 {
            if rng.uniform() > 0.3 {
                pos.push([10.0 * f64::from(k) + 0.1 * rng.normal(), 5.0]);
            }
        }
        let ids = linker.push_frame(t, &pos).unwrap();
        assert_eq!(ids.len(), pos.len());
        most = most.max(linker.active_tracks());
    }
    assert!(most <= 20 * 4, "{most} tracks held");
    assert_eq!(linker.last_frame(), Some(19_999));
}

/// The largest search range accepted links a large subnet (40 points a frame, every pair in
/// range) without overflowing its costs: each point of the second frame continues a track.
#[test]
fn the_largest_search_range_links_a_large_subnet() {
    let mut rng = algorithms::synth::SplitMix::new(4);
    let mut frames = Vec::new();
    let mut pos = Vec::new();
    let first: Vec<[f64; 2]> = (0..40)
        .map(|_| [100.0 * rng.uniform(), 100.0 * rng.uniform()])
        .collect();
    for (t, shift) in [(0i64, 0.0), (1, 0.3)] {
        for p in &first {
            frames.push(t);
            pos.push([p[0] + shift, p[1] - shift]);
        }
    }
    for sr in [algorithms::track::MAX_SEARCH_RANGE, 1e6] {
        let (ids, _) = link(&frames, &pos, &LinkParams::new(sr, 0)).unwrap();
        let tracks: std::collections::BTreeSet<i64> = ids.iter().copied().collect();
        assert_eq!(tracks.len(), 40, "search_range {sr}");
        assert_eq!(ids[..40], ids[40..], "search_range {sr}");
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let bad = |p: LinkParams, what: &str| {
        let e = link(&[0], &[[1.0, 1.0]], &p).unwrap_err();
        assert!(
            matches!(e, BridgeError::InvalidArgument { .. }) && e.to_string().contains(what),
            "{e}"
        );
        assert!(Linker::new(p).is_err());
    };
    for sr in [0.0, -1.0, f64::NAN, f64::INFINITY, 1.35e154, 1e300] {
        bad(LinkParams::new(sr, 0), "search_range");
    }
    bad(LinkParams::new(1.0, usize::MAX), "memory");
    bad(
        LinkParams {
            max_subnet_sources: 0,
            ..LinkParams::new(1.0, 0)
        },
        "max_subnet_sources",
    );
    for (stop, step, what) in [
        (0.0, 0.9, "adaptive_stop"),
        (f64::NAN, 0.9, "adaptive_stop"),
        (0.5, 1.0, "adaptive_step"),
        (0.5, 0.0, "adaptive_step"),
        (0.5, f64::INFINITY, "adaptive_step"),
        // 1e100 → 1e-300 by 0.999999: about a billion reductions
        (1e-300, 0.999_999, "steps"),
    ] {
        let p = LinkParams {
            adaptive: Some(Adaptive::new(stop, step)),
            ..LinkParams::new(if what == "steps" { 1e100 } else { 1.0 }, 0)
        };
        bad(p, what);
    }
    for span in [0, 1_000_000] {
        bad(velocity(span, 0, 1.0), "span");
    }
    let guess = |positions: Vec<[f64; 2]>, velocities: Vec<[f64; 2]>| LinkParams {
        predictor: Predictor::NearestVelocity(VelocityPredict {
            span: 1,
            initial_guess: Some(InitialVelocities {
                positions,
                velocities,
            }),
        }),
        ..LinkParams::new(1.0, 0)
    };
    bad(guess(vec![[0.0, 0.0]], vec![]), "initial_guess");
    bad(guess(vec![], vec![]), "initial_guess");
    bad(
        guess(vec![[0.0, 0.0]], vec![[f64::NAN, 0.0]]),
        "initial_guess",
    );
    // non-finite positions, frames out of order: the linker is left as it was
    let mut linker = Linker::new(LinkParams::new(1.0, 0)).unwrap();
    assert_eq!(linker.push_frame(5, &[[0.0, 0.0]]).unwrap(), [0]);
    let e = linker.push_frame(6, &[[0.0, f64::NAN]]).unwrap_err();
    assert!(matches!(e, BridgeError::InvalidInput(_)), "{e}");
    let e = linker.push_frame(5, &[[0.0, 0.0]]).unwrap_err();
    assert!(matches!(e, BridgeError::InvalidArgument { .. }), "{e}");
    assert_eq!(linker.push_frame(6, &[[0.1, 0.0]]).unwrap(), [0]);
    let e = link(
        &[0, 1],
        &[[0.0, 0.0], [f64::INFINITY, 0.0]],
        &LinkParams::new(1.0, 0),
    )
    .unwrap_err();
    assert!(matches!(e, BridgeError::InvalidInput(_)), "{e}");
    // a velocity predictor on huge coordinates: predictions overflow to ±inf, never panic
    let (frames, pos) = (
        [0, 1, 2, 3],
        [[1e308, 0.0], [-1e308, 0.0], [1e308, 0.0], [1e308, 1.0]],
    );
    let (ids, _) = link(&frames, &pos, &velocity(1, 2, 1e100)).unwrap();
    assert_eq!(ids.len(), 4);
}
