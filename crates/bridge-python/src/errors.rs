//! The typed Python exceptions and the mapping from [`BridgeError`].

use bridge_core::BridgeError;
use pyo3::PyErr;
use pyo3::exceptions::PyException;

pyo3::create_exception!(
    arraybridge,
    ArrayBridgeError,
    PyException,
    "Base class of every arraybridge error; the message is the Rust error's."
);
pyo3::create_exception!(
    arraybridge,
    OutOfMemory,
    ArrayBridgeError,
    "Out of memory: a device ran out, after arraybridge's retries, or a host allocation sized \
     by an input's shape would not fit the host memory budget (checked before allocating; see \
     set_memory_limit)."
);
pyo3::create_exception!(
    arraybridge,
    BackendUnavailable,
    ArrayBridgeError,
    "The device named is not there: its backend is not compiled in, its library is missing, or \
     the ordinal is out of range."
);
pyo3::create_exception!(
    arraybridge,
    InvalidInput,
    ArrayBridgeError,
    "An argument or array arraybridge cannot use: wrong shape, dtype or device string, a \
     read-only array where a result must be written, a stream for host memory, ..."
);

pyo3::create_exception!(
    arraybridge,
    SubnetOversizeException,
    InvalidInput,
    "link_strategy='drop' met a subnet too large to drop (more than 30 sources; with the \
     adaptive search, a part above 15 sources once its range reached adaptive_stop), where \
     trackpy raises its SubnetOversizeException. arraybridge's link raises it as an instance \
     of trackpy's SubnetOversizeException too when trackpy is imported."
);

/// The Python exception for a Rust error: `OutOfMemory` (a device out of memory, or a host
/// allocation over the budget: `TooLarge`), `BackendUnavailable`, `InvalidInput` (its subclass
/// `SubnetOversizeException` for the drop linker's too large subnet), or the base
/// `ArrayBridgeError` for the rest (unsupported operations, device failures).
///
/// An input error about some frames of a movie carries them as `frames`, a `range` of frame
/// indices (`None` otherwise), so a caller can skip or report them without parsing the message.
pub fn to_py(e: BridgeError) -> PyErr {
    let msg = e.to_string();
    if let BridgeError::InvalidInput(m) = &e {
        let err = if algorithms::track::is_subnet_oversize(&e) {
            SubnetOversizeException::new_err(msg)
        } else {
            InvalidInput::new_err(msg)
        };
        let frames = m.frames.clone();
        pyo3::Python::attach(|py| {
            let value = err.value(py);
            let frames = match frames {
                Some(r) => pyo3::types::PyRange::new(py, r.start as isize, r.end as isize)
                    .map(|r| r.into_any().unbind())
                    .ok(),
                None => None,
            };
            let _ = pyo3::types::PyAnyMethods::setattr(value.as_any(), "frames", frames);
        });
        return err;
    }
    match e {
        BridgeError::OutOfMemory { .. } | BridgeError::TooLarge { .. } => OutOfMemory::new_err(msg),
        BridgeError::BackendUnavailable { .. } | BridgeError::UnknownDevice { .. } => {
            BackendUnavailable::new_err(msg)
        }
        BridgeError::ParseDevice { .. }
        | BridgeError::ParseDType { .. }
        | BridgeError::InvalidPlacement { .. }
        | BridgeError::DTypeMismatch { .. }
        | BridgeError::UnsupportedDType { .. }
        | BridgeError::CastOutOfRange { .. }
        | BridgeError::CastNaN { .. }
        | BridgeError::ShapeMismatch { .. }
        | BridgeError::InvalidArgument { .. }
        | BridgeError::InvalidInput(_) => InvalidInput::new_err(msg),
        _ => ArrayBridgeError::new_err(msg),
    }
}

/// `InvalidInput` with a message.
pub fn invalid(msg: impl Into<String>) -> PyErr {
    InvalidInput::new_err(msg.into())
}

/// Map a `Result<T, BridgeError>` to a `PyResult<T>`.
pub trait IntoPy<T> {
    /// The Python-side result.
    fn py_err(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, BridgeError> {
    fn py_err(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}
