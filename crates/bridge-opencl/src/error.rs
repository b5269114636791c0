//! Mapping of OpenCL status codes to [`BridgeError`].

use bridge_core::{BridgeError, Device};
use opencl3::error_codes::{
    CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_HOST_MEMORY, CL_OUT_OF_RESOURCES,
    DLOPEN_FUNCTION_NOT_AVAILABLE, DLOPEN_RUNTIME_LOAD_FAILED, error_text,
};

/// Backend name used in errors.
pub(crate) const BACKEND: &str = "opencl";

/// True for the three codes that mean "memory ran out".
pub(crate) fn is_oom_code(code: i32) -> bool {
    matches!(
        code,
        CL_MEM_OBJECT_ALLOCATION_FAILURE | CL_OUT_OF_RESOURCES | CL_OUT_OF_HOST_MEMORY
    )
}

/// Map an OpenCL status code from `what` on `device` to a typed error: the out-of-memory codes
/// become [`BridgeError::OutOfMemory`] (with `requested` bytes), everything else
/// [`BridgeError::Backend`] with the native code.
pub(crate) fn cl_error(device: Device, what: &str, code: i32, requested: u64) -> BridgeError {
    if is_oom_code(code) {
        return BridgeError::OutOfMemory {
            device,
            requested,
            attempts: 1,
        };
    }
    BridgeError::backend(
        BACKEND,
        Some(i64::from(code)),
        format!("{what} on {device} failed: {}", error_text(code)),
    )
}

/// Map a discovery-time status code to a human-readable unavailability reason.
pub(crate) fn discovery_reason(what: &str, code: i32) -> String {
    match code {
        DLOPEN_RUNTIME_LOAD_FAILED => {
            "the OpenCL runtime (libOpenCL.so.1 / OpenCL.dll) could not be loaded; install an ICD loader \
             and a driver (e.g. ocl-icd-libopencl1 and pocl-opencl-icd), or set OPENCL_DYLIB_PATH"
                .to_owned()
        }
        DLOPEN_FUNCTION_NOT_AVAILABLE => format!("{what}: the OpenCL runtime lacks a required function"),
        // CL_PLATFORM_NOT_FOUND_KHR
        -1001 => "the OpenCL ICD loader found no platform (no driver installed?)".to_owned(),
        _ => format!("{what} failed: {} ({code})", error_text(code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opencl3::error_codes::{CL_INVALID_BUFFER_SIZE, CL_INVALID_VALUE};

    #[test]
    fn only_the_three_memory_codes_are_oom() {
        let d = Device::OpenCl(0);
        for c in [
            CL_MEM_OBJECT_ALLOCATION_FAILURE,
            CL_OUT_OF_RESOURCES,
            CL_OUT_OF_HOST_MEMORY,
        ] {
            assert!(cl_error(d, "x", c, 7).is_oom());
        }
        for c in [
            CL_INVALID_VALUE,
            CL_INVALID_BUFFER_SIZE,
            -1,
            DLOPEN_RUNTIME_LOAD_FAILED,
        ] {
            let e = cl_error(d, "x", c, 7);
            assert!(
                matches!(e, BridgeError::Backend { code: Some(k), .. } if k == i64::from(c)),
                "{e}"
            );
        }
    }

    #[test]
    fn discovery_reasons_are_readable() {
        assert!(discovery_reason("x", DLOPEN_RUNTIME_LOAD_FAILED).contains("libOpenCL"));
        assert!(discovery_reason("x", -1001).contains("no platform"));
    }
}
