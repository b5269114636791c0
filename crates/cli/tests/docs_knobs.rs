//! `docs/gpu.md` documents every tuning knob of `bridge_core::tuning::KNOBS`, with its default.

#[test]
fn gpu_doc_lists_every_knob_with_its_default() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/gpu.md"))
        .expect("docs/gpu.md");
    for k in bridge_core::tuning::KNOBS {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", k.name)))
            .unwrap_or_else(|| panic!("docs/gpu.md has no table row for {}", k.name));
        assert!(
            row.contains(&format!("`{}`", k.default)),
            "the row of {} does not state its default {:?}: {row}",
            k.name,
            k.default
        );
    }
}

/// `arraybridge bench` says what it measured with: the knobs line, and the `knobs` object of
/// `--json` (a value set in the environment shows; an unset one shows its default).
#[test]
fn bench_prints_the_knobs_in_effect() {
    let run = |json: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_arraybridge"));
        cmd.args([
            "bench", "paco", "--device", "cpu", "--frames", "6", "--size", "24", "--reps", "1",
        ])
        .env("ARRAYBRIDGE_PACO_STATS_WG", "96");
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().expect("arraybridge runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let text = run(false);
    let first = text.lines().next().unwrap_or_default();
    assert!(first.starts_with("knobs: "), "{text}");
    assert!(first.contains("ARRAYBRIDGE_PACO_STATS_WG=96"), "{first}");
    assert!(first.contains("ARRAYBRIDGE_CUDA_LAUNCH=stream"), "{first}");
    let v: serde_json::Value = serde_json::from_str(&run(true)).expect("one JSON document");
    assert_eq!(v["knobs"]["ARRAYBRIDGE_PACO_STATS_WG"], "96");
    assert_eq!(v["knobs"]["ARRAYBRIDGE_PACO_DEVICE_BATCH"], "65536");
}
