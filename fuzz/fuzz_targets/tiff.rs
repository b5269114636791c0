//! Multi-page TIFF through the movie reader of `detect`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::init();
    let p = common::temp_file(data, "tif");
    let _ = arraybridge::io::image::read_movie(p.path());
});
