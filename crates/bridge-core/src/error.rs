//! The one error type of arraybridge.
//!
//! Every fallible operation in the workspace returns [`BridgeError`] (through [`Result`]).
//! Variants are typed so callers can branch on them: [`BridgeError::OutOfMemory`] is the
//! only variant that [`crate::oom::with_oom_retry`] retries, and [`BridgeError::is_oom`] is the
//! one predicate that decides it.

use crate::device::{Device, MemoryType};
use crate::dtype::DType;

/// Convenience alias used throughout arraybridge.
pub type Result<T, E = BridgeError> = std::result::Result<T, E>;

/// Everything that can go wrong while describing, planning, moving or computing on arrays.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// A device string such as `cuda:x` could not be parsed.
    #[error(
        "invalid device string {input:?}: {reason} (expected cpu, cuda:N, opencl:N, torch:cpu or torch:cuda:N)"
    )]
    ParseDevice {
        /// The text that was given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A dtype name could not be parsed.
    #[error("unknown dtype {input:?} (expected one of u8, u16, i32, i64, f16, bf16, f32, f64)")]
    ParseDType {
        /// The text that was given.
        input: String,
    },
    /// The device is well-formed but the backend does not have it (ordinal out of range).
    #[error("unknown device {device}: {available}")]
    UnknownDevice {
        /// The device that was asked for.
        device: Device,
        /// A human-readable list of what is available.
        available: String,
    },
    /// A memory type cannot live on that device (an ndarray on `cuda:0`, CUDA memory on `opencl:1`).
    #[error("{memory_type} memory cannot live on device {device}")]
    InvalidPlacement {
        /// Memory type requested.
        memory_type: MemoryType,
        /// Device requested.
        device: Device,
    },
    /// A backend is compiled out, its library is missing, or it has no device.
    #[error("backend {backend} is unavailable: {reason}")]
    BackendUnavailable {
        /// Backend name (`cuda`, `opencl`, `torch`).
        backend: String,
        /// Why (library missing, no device, feature not compiled in, ...).
        reason: String,
    },
    /// The registry has no chain of converters from source to destination.
    #[error(
        "no conversion route from {from_type} on {from_device} to {to_type} on {to_device}: {reason}"
    )]
    NoRoute {
        /// Source memory type.
        from_type: MemoryType,
        /// Source device.
        from_device: Device,
        /// Target memory type.
        to_type: MemoryType,
        /// Target device.
        to_device: Device,
        /// Explanation.
        reason: String,
    },
    /// An array had a different dtype than the operation requires.
    #[error("dtype mismatch{context}: expected {expected}, found {found}")]
    DTypeMismatch {
        /// Expected dtype.
        expected: DType,
        /// Actual dtype.
        found: DType,
        /// Where (prefixed with " in " when non-empty).
        context: ContextStr,
    },
    /// A dtype is not supported on a device (e.g. f16 on an OpenCL device without `cl_khr_fp16`).
    #[error("dtype {dtype} is not supported on {device}: {reason}")]
    UnsupportedDType {
        /// The dtype.
        dtype: DType,
        /// The device.
        device: Device,
        /// Why.
        reason: String,
    },
    /// A lossless cast met a value the target type cannot represent exactly.
    #[error(
        "cannot cast {from} to {to} losslessly: element {index} = {value} does not fit (use CastMode::Saturate or CastMode::RescaleMinMax to opt in)"
    )]
    CastOutOfRange {
        /// Source dtype.
        from: DType,
        /// Target dtype.
        to: DType,
        /// Flat (logical, row-major) index of the first offending element.
        index: usize,
        /// The offending value, printed.
        value: String,
    },
    /// A cast met NaN where the target or the mode cannot represent it.
    #[error("cannot cast {from} to {to}: element {index} is NaN ({mode})")]
    CastNaN {
        /// Source dtype.
        from: DType,
        /// Target dtype.
        to: DType,
        /// Flat index of the first NaN.
        index: usize,
        /// The cast mode in effect.
        mode: String,
    },
    /// Shapes (or byte lengths) do not agree.
    #[error("shape mismatch{context}: expected {expected}, found {found}")]
    ShapeMismatch {
        /// What was expected, printed.
        expected: String,
        /// What was found, printed.
        found: String,
        /// Where (prefixed with " in " when non-empty).
        context: ContextStr,
    },
    /// An argument is out of its valid domain (negative fraction, zero batch size, ...).
    #[error("invalid argument {name}: {reason}")]
    InvalidArgument {
        /// Argument name.
        name: String,
        /// Why it is invalid.
        reason: String,
    },
    /// Input data is unusable (empty, all NaN, corrupt file, ...); the frames of a movie it
    /// concerns, when it concerns some, are typed ([`InputError::frames`]).
    #[error("invalid input: {0}")]
    InvalidInput(InputError),
    /// A device allocation failed because memory ran out (after `attempts` tries).
    #[error("out of memory on {device}: requested {requested} bytes after {attempts} attempt(s)")]
    OutOfMemory {
        /// Device that ran out.
        device: Device,
        /// Bytes requested by the failing allocation.
        requested: u64,
        /// How many attempts were made (1 = no retry).
        attempts: u32,
    },
    /// A host allocation whose size comes from a file header, a flag or a parameter would not
    /// fit in the memory the process may use (see [`crate::host::Budget`]). Not retried.
    #[error(
        "{what} needs {} but only {} fit ({limited_by}){}",
        crate::units::format_bytes_apart(*requested, *limit).0,
        crate::units::format_bytes_apart(*requested, *limit).1,
        if hint.is_empty() { String::new() } else { format!("; {hint}") }
    )]
    TooLarge {
        /// What asked for the memory, as the user wrote it (`--num-sigma 100000`, `m.npy (shape …)`).
        what: String,
        /// Bytes needed.
        requested: u64,
        /// Bytes that may be allocated.
        limit: u64,
        /// What sets the limit (available memory, cgroup, ulimit, the environment variable).
        limited_by: String,
        /// What would fit, or what to change (may be empty).
        hint: String,
    },
    /// A runtime-compiled kernel failed to build; `log` is the compiler's build log.
    #[error("kernel {kernel} failed to compile for {device}:\n{log}")]
    KernelCompile {
        /// Kernel or program name.
        kernel: String,
        /// Device it was compiled for.
        device: Device,
        /// Compiler log.
        log: String,
    },
    /// Any other failure reported by a backend library, with its native code when there is one.
    #[error("{backend} error{}: {message}", code.map(|c| format!(" {c}")).unwrap_or_default())]
    Backend {
        /// Backend name.
        backend: String,
        /// Native error code, if any.
        code: Option<i64>,
        /// Message.
        message: String,
    },
    /// The operation is not supported (yet) for these arguments.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The caller stopped the computation ([`crate::control::Control::cancel`]: Ctrl-C in
    /// Python); nothing it would have returned is returned.
    #[error("{what}: cancelled")]
    Cancelled {
        /// What was stopped.
        what: String,
    },
    /// I/O failure with the path involved.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// Path (or description) of what was being read/written.
        path: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// The message of [`BridgeError::InvalidInput`] and, when the input is a movie and the error
/// concerns some of its frames, those frames as data (printed `in frames a..b: message`).
/// It reads as its message (`Deref<Target = str>`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputError {
    /// The frames of the movie (counted from its first frame) the error concerns, if any.
    pub frames: Option<std::ops::Range<usize>>,
    /// What is wrong.
    pub message: String,
}

impl InputError {
    /// The error about `frames` of a movie.
    pub fn in_frames(frames: std::ops::Range<usize>, message: impl Into<String>) -> Self {
        InputError {
            frames: Some(frames),
            message: message.into(),
        }
    }

    /// The same error about frames counted from `offset` frames earlier (a chunk of a movie
    /// that starts at frame `offset`); unchanged without frames.
    pub fn shifted(self, offset: usize) -> Self {
        InputError {
            frames: self
                .frames
                .map(|r| r.start.saturating_add(offset)..r.end.saturating_add(offset)),
            message: self.message,
        }
    }

    /// The error of a batch of `frames` of a movie, in the movie's frame numbers: an error that
    /// names frames of the batch (counted from the batch's first) has them shifted to
    /// `frames.start`; one that names none is about the whole batch.
    pub fn of_batch(self, frames: std::ops::Range<usize>) -> Self {
        match self.frames {
            Some(_) => self.shifted(frames.start),
            None => InputError::in_frames(frames, self.message),
        }
    }
}

impl BridgeError {
    /// The error of frame `i` of a batch of `n` frames: for `n > 1` an input error that names
    /// no frames gets frame `i` (and one that names frames of that frame is shifted to it);
    /// a batch of one frame (a single image, or the caller's batch of one) leaves it unchanged,
    /// for the caller to say which frame it is, if any.
    pub fn of_frame(self, i: usize, n: usize) -> Self {
        if n > 1 { self.of_batch(i..i + 1) } else { self }
    }

    /// [`InputError::of_batch`] for an input error; any other error unchanged.
    pub fn of_batch(self, frames: std::ops::Range<usize>) -> Self {
        match self {
            BridgeError::InvalidInput(m) => BridgeError::InvalidInput(m.of_batch(frames)),
            other => other,
        }
    }
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.frames {
            Some(r) => write!(f, "in frames {}..{}: {}", r.start, r.end, self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::ops::Deref for InputError {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

impl From<String> for InputError {
    fn from(message: String) -> Self {
        InputError {
            frames: None,
            message,
        }
    }
}

impl From<&str> for InputError {
    fn from(message: &str) -> Self {
        InputError {
            frames: None,
            message: message.to_owned(),
        }
    }
}

/// A short context string printed as ` in <context>` when non-empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextStr(pub String);

impl std::fmt::Display for ContextStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            Ok(())
        } else {
            write!(f, " in {}", self.0)
        }
    }
}

impl From<&str> for ContextStr {
    fn from(s: &str) -> Self {
        ContextStr(s.to_owned())
    }
}

impl From<String> for ContextStr {
    fn from(s: String) -> Self {
        ContextStr(s)
    }
}

impl BridgeError {
    /// True only for [`BridgeError::OutOfMemory`]: the single error that OOM retry acts on.
    pub fn is_oom(&self) -> bool {
        matches!(self, BridgeError::OutOfMemory { .. })
    }

    /// Shorthand for [`BridgeError::InvalidArgument`].
    pub fn invalid_argument(name: impl Into<String>, reason: impl Into<String>) -> Self {
        BridgeError::InvalidArgument {
            name: name.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`BridgeError::ShapeMismatch`].
    pub fn shape_mismatch(
        expected: impl std::fmt::Display,
        found: impl std::fmt::Display,
        context: impl Into<ContextStr>,
    ) -> Self {
        BridgeError::ShapeMismatch {
            expected: expected.to_string(),
            found: found.to_string(),
            context: context.into(),
        }
    }

    /// Shorthand for [`BridgeError::BackendUnavailable`].
    pub fn unavailable(backend: impl Into<String>, reason: impl Into<String>) -> Self {
        BridgeError::BackendUnavailable {
            backend: backend.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`BridgeError::Backend`].
    pub fn backend(
        backend: impl Into<String>,
        code: Option<i64>,
        message: impl Into<String>,
    ) -> Self {
        BridgeError::Backend {
            backend: backend.into(),
            code,
            message: message.into(),
        }
    }

    /// Shorthand for [`BridgeError::Io`].
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        BridgeError::Io {
            path: path.into(),
            source,
        }
    }
}
