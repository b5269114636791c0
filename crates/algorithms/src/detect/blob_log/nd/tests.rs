//! Unit tests of the n-D `blob_log`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
