//! Build script of the `arraybridge` package.
//!
//! With the `torch` feature, binaries, tests and examples of this package link libtorch
//! dynamically. `cargo:rustc-link-arg` from bridge-torch's build script applies only to
//! bridge-torch's own targets, so this script adds the same `-Wl,-rpath` for ours: the
//! directories come from `DEP_ARRAYBRIDGE_TORCH_RPATH`, which bridge-torch publishes through its
//! `links = "arraybridge_torch"` key. Without the feature this script does nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    if let Ok(rpath) = std::env::var("DEP_ARRAYBRIDGE_TORCH_RPATH") {
        for dir in rpath.split(':').filter(|d| !d.is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
