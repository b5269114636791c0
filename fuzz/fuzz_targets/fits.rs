//! FITS through a temporary file (cfitsio reads paths): the image reader of `paco`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::init();
    let p = common::temp_file(data, "fits");
    let _ = arraybridge::io::fits::read_image(p.path());
});
