//! arraybridge opencl backend (stub; filled in by its own issue).
