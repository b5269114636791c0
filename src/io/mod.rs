//! File formats read and written by the command-line tool (each format in its own module).
