//! arraybridge cuda backend (stub; filled in by its own issue).
