//! arraybridge torch backend (stub; filled in by its own issue).
