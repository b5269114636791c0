//! `.npy`: the in-memory parser and the movie reader (by path) on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::init();
    let _ = arraybridge::io::npy::parse_npy(data, "fuzz.npy");
    let p = common::temp_file(data, "npy");
    let _ = arraybridge::io::image::read_movie(p.path());
});
