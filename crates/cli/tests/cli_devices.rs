//! `arraybridge devices` and `--version`, run as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn arraybridge(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_arraybridge"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn devices_prints_a_table_with_the_cpu_and_every_backend() {
    let out = arraybridge(&["devices"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("DEVICE"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("cpu ")), "{text}");
    // Every backend is either listed with devices or named as unavailable with a reason.
    for backend in ["cuda", "opencl", "torch"] {
        let listed = text.lines().any(|l| l.starts_with(&format!("{backend}:")));
        let unavailable = text
            .lines()
            .any(|l| l.trim_start().starts_with(backend) && l.len() > backend.len() + 4);
        assert!(listed || unavailable, "{backend} missing from:\n{text}");
    }
}

#[test]
fn devices_json_is_valid_and_complete() {
    let out = arraybridge(&["devices", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["host"]["device"], "cpu");
    let names: Vec<&str> = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    for b in ["cuda", "opencl", "torch"] {
        assert!(names.contains(&b), "{names:?}");
    }
    // devices are written as users type them (`opencl:0`), not as Rust enums
    for b in v["backends"].as_array().unwrap() {
        for d in b["devices"].as_array().into_iter().flatten() {
            let name = d["device"].as_str().unwrap_or_else(|| panic!("{d}"));
            assert!(name.parse::<bridge_core::Device>().is_ok(), "{name}");
        }
    }
}

#[test]
fn devices_without_any_opencl_platform_says_why() {
    // Point the ICD loader at an empty vendor folder: no platform at all.
    let dir = std::env::temp_dir().join(format!("ab-no-icd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_arraybridge"))
        .arg("devices")
        .env("OCL_ICD_VENDORS", &dir)
        .env("OPENCL_VENDOR_PATH", &dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("unavailable backends:") && text.contains("opencl"),
        "{text}"
    );
}

#[test]
fn version_and_bad_usage() {
    let out = arraybridge(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("arraybridge {}", env!("CARGO_PKG_VERSION"))
    );
    let out = arraybridge(&["no-such-command"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-command"));
}
