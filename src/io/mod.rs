//! File formats read and written by the command-line tool (each format in its own module).

pub mod axes;
pub mod csv;
pub mod fits;
pub mod image;
pub mod npy;
pub mod staged;
pub mod staged_dir;
pub mod stream;
pub mod tiff;
