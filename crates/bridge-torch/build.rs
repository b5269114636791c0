//! Build script: compiles the small C++ shim (`shim/torch_shim.cpp`) against the libtorch that
//! torch-sys links, and makes this crate's own test, bench and example binaries find libtorch at
//! run time through an rpath.
//!
//! `cargo:rustc-link-arg` applies only to this package's own targets. Dependents (the root
//! `arraybridge` crate) read the directory from `DEP_ARRAYBRIDGE_TORCH_RPATH` (published here
//! through the `links` key) and emit the same `-Wl,-rpath` from their own build script.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=shim/torch_shim.cpp");
    println!("cargo:rerun-if-changed=build.rs");
    // torch-sys publishes its libtorch lib directory (links = "tch").
    let Ok(lib) = env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!(
            "cargo:warning=DEP_TCH_LIBTORCH_LIB is not set: is torch-sys built with doc-only? \
             The torch shim is not compiled."
        );
        return;
    };
    let lib_dir = PathBuf::from(&lib);
    let root = lib_dir.parent().map(PathBuf::from).unwrap_or_default();
    let include = root.join("include");
    let cxx11_abi = env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");

    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}"))
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .define(
            "AB_TORCH_CUDA_LIB",
            Some(format!("\"{}\"", lib_dir.join("libtorch_cuda.so").display()).as_str()),
        )
        .file("shim/torch_shim.cpp")
        .compile("arraybridge_torch_shim");
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-lib=dl");

    // The rpath for this crate's own binaries (dependents: see the module docs).
    println!(
        "cargo:rustc-env=ARRAYBRIDGE_TORCH_LIB_DIR={}",
        lib_dir.display()
    );
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    // The CUDA runtime wheels next to torch (site-packages/nvidia/*/lib), for libtorch_cuda.
    let mut rpath = vec![lib_dir.display().to_string()];
    if let Some(site) = root.parent() {
        let nvidia = site.join("nvidia");
        if let Ok(entries) = std::fs::read_dir(&nvidia) {
            let mut dirs: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("lib"))
                .filter(|p| p.is_dir())
                .collect();
            dirs.sort();
            for d in dirs {
                println!("cargo:rustc-link-arg=-Wl,-rpath,{}", d.display());
                rpath.push(d.display().to_string());
            }
        }
    }
    // Published to dependents as DEP_ARRAYBRIDGE_TORCH_RPATH (':'-separated).
    println!("cargo:rpath={}", rpath.join(":"));
    println!("cargo:libtorch_lib={}", lib_dir.display());
}
