//! Scientific pipelines for arraybridge.
