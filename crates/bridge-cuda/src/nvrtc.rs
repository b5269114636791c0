//! NVRTC: compile CUDA C++ source strings at run time. The only `unsafe` calls into `libnvrtc`
//! live here. NVRTC needs no GPU, so CI compiles every shipped kernel with it.

use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use bridge_core::{BridgeError, Device, Result};
use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};

use crate::error;

/// What NVRTC should produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// SASS for a real architecture (`--gpu-architecture=sm_XY`): a CUBIN the driver loads
    /// without JIT.
    Cubin(u32, u32),
    /// PTX for a virtual architecture (`compute_XY`), JIT-compiled by the driver.
    Ptx(u32, u32),
}

impl Target {
    /// The architecture option.
    pub fn arch_option(self) -> String {
        match self {
            Target::Cubin(a, b) => format!("--gpu-architecture=sm_{a}{b}"),
            Target::Ptx(a, b) => format!("--gpu-architecture=compute_{a}{b}"),
        }
    }
}

/// The architecture CI compiles for: sm_90 (H100/H200, the GPU machine's).
pub const CHECK_TARGET: Target = Target::Cubin(9, 0);

/// The environment variable holding the NVRTC options added to every program a [`Gpu`](crate::Gpu)
/// compiles (whitespace-separated).
pub const OPTIONS_ENV: &str = "ARRAYBRIDGE_NVRTC_OPTIONS";

/// The default of [`OPTIONS_ENV`]: no fused multiply-add contraction, so that CUDA computes the
/// same roundings as the CPU path and PoCL (bit-identical results where the algorithms promise
/// them). `ARRAYBRIDGE_NVRTC_OPTIONS="--fmad=true"` trades that for speed;
/// `"--fmad=false -lineinfo"` adds source lines for profilers.
pub const DEFAULT_OPTIONS: &str = "--fmad=false";

/// The options [`OPTIONS_ENV`] asks for (read once per process), or [`DEFAULT_OPTIONS`].
pub fn device_options() -> &'static [String] {
    static O: OnceLock<Vec<String>> = OnceLock::new();
    O.get_or_init(|| parse_options(bridge_core::tuning::raw(OPTIONS_ENV).as_deref()))
}

/// Split an options string (`None`: [`DEFAULT_OPTIONS`]) on whitespace.
pub fn parse_options(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or(DEFAULT_OPTIONS)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Compiled code: a CUBIN or a NUL-terminated PTX image, ready for `cuModuleLoadData`.
#[derive(Debug, Clone)]
pub struct Image {
    /// The bytes (PTX images include the terminating NUL).
    pub bytes: Vec<u8>,
    /// The compiler log (warnings), possibly empty.
    pub log: String,
}

/// Whether `libnvrtc` loads and answers `nvrtcVersion`; cached. `Err` says why not.
pub fn available() -> std::result::Result<(u32, u32), String> {
    static V: OnceLock<std::result::Result<(u32, u32), String>> = OnceLock::new();
    V.get_or_init(|| {
        if !crate::ffi::nvrtc_present() {
            return Err(
                "libnvrtc not found (run scripts/nvrtc.sh and export its LD_LIBRARY_PATH)".into(),
            );
        }
        let r = catch_unwind(|| {
            let (mut major, mut minor) = (0, 0);
            // SAFETY: two valid out-pointers.
            let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
            (r, major, minor)
        });
        match r {
            Ok((nvrtcResult::NVRTC_SUCCESS, a, b)) => Ok((a.max(0) as u32, b.max(0) as u32)),
            Ok((code, _, _)) => Err(format!("nvrtcVersion failed: {code:?}")),
            Err(_) => Err("libnvrtc lacks a required symbol".into()),
        }
    })
    .clone()
}

/// Compile `source` (program `name`) with `options` for `target`. Compile errors come back as
/// [`BridgeError::KernelCompile`] with NVRTC's log; a missing NVRTC as
/// [`BridgeError::BackendUnavailable`].
pub fn compile(
    name: &str,
    source: &str,
    options: &[String],
    target: Target,
    device: Device,
) -> Result<Image> {
    available().map_err(|r| BridgeError::unavailable("nvrtc", r))?;
    let bad = |what: &str| BridgeError::invalid_argument(what, "contains a NUL byte");
    let c_src = CString::new(source).map_err(|_| bad("kernel source"))?;
    let c_name = CString::new(name).map_err(|_| bad("kernel name"))?;
    let mut opts = vec![target.arch_option()];
    opts.extend(options.iter().cloned());
    let c_opts = opts
        .iter()
        .map(|o| CString::new(o.as_str()).map_err(|_| bad("build option")))
        .collect::<Result<Vec<_>>>()?;
    catch_unwind(AssertUnwindSafe(|| {
        compile_raw(name, &c_src, &c_name, &c_opts, target, device)
    }))
    .unwrap_or_else(|_| {
        Err(BridgeError::backend(
            "nvrtc",
            None,
            "libnvrtc panicked (missing symbol?)",
        ))
    })
}

/// Owns an `nvrtcProgram` and destroys it on drop.
struct Program(nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        let _ = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn fetch(
    prog: &Program,
    size_fn: unsafe fn(nvrtcProgram, *mut usize) -> nvrtcResult,
    get_fn: unsafe fn(nvrtcProgram, *mut c_char) -> nvrtcResult,
    what: &str,
) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: valid program and out-pointer.
    let r = unsafe { size_fn(prog.0, &mut size) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(error::nvrtc(r, what));
    }
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: `buf` holds at least `size` bytes, as NVRTC asked for.
    let r = unsafe { get_fn(prog.0, buf.as_mut_ptr().cast()) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(error::nvrtc(r, what));
    }
    buf.truncate(size.max(1));
    Ok(buf)
}

fn log_of(prog: &Program) -> String {
    match fetch(
        prog,
        sys::nvrtcGetProgramLogSize,
        sys::nvrtcGetProgramLog,
        "nvrtcGetProgramLog",
    ) {
        Ok(b) => String::from_utf8_lossy(&b)
            .trim_end_matches('\0')
            .trim()
            .to_owned(),
        Err(e) => format!("(no log: {e})"),
    }
}

fn compile_raw(
    name: &str,
    src: &CString,
    c_name: &CString,
    opts: &[CString],
    target: Target,
    device: Device,
) -> Result<Image> {
    let mut raw: nvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid out-pointer and NUL-terminated strings that outlive the program (they are
    // borrowed for this whole function, and the program is destroyed before it returns).
    let r = unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            src.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(error::nvrtc(r, "nvrtcCreateProgram"));
    }
    let prog = Program(raw);
    let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let n = i32::try_from(ptrs.len())
        .map_err(|_| BridgeError::invalid_argument("options", "too many"))?;
    // SAFETY: `ptrs` holds `n` pointers to NUL-terminated strings alive for the call.
    let r = unsafe { sys::nvrtcCompileProgram(prog.0, n, ptrs.as_ptr()) };
    let log = log_of(&prog);
    match r {
        nvrtcResult::NVRTC_SUCCESS => {}
        nvrtcResult::NVRTC_ERROR_COMPILATION | nvrtcResult::NVRTC_ERROR_INVALID_OPTION => {
            let opts: Vec<String> = opts
                .iter()
                .map(|o| o.to_string_lossy().into_owned())
                .collect();
            return Err(BridgeError::KernelCompile {
                kernel: name.to_owned(),
                device,
                log: format!("{code:?} with options {opts:?}\n{log}", code = r),
            });
        }
        other => return Err(error::nvrtc(other, "nvrtcCompileProgram")),
    }
    let bytes = match target {
        Target::Cubin(..) => fetch(
            &prog,
            sys::nvrtcGetCUBINSize,
            sys::nvrtcGetCUBIN,
            "nvrtcGetCUBIN",
        )?,
        Target::Ptx(..) => fetch(&prog, sys::nvrtcGetPTXSize, sys::nvrtcGetPTX, "nvrtcGetPTX")?,
    };
    Ok(Image { bytes, log })
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_OPTIONS, parse_options};

    #[test]
    fn device_options_default_to_no_fma_contraction() {
        assert_eq!(DEFAULT_OPTIONS, "--fmad=false");
        assert_eq!(parse_options(None), vec!["--fmad=false".to_owned()]);
        assert_eq!(
            parse_options(Some(" --fmad=false  -lineinfo ")),
            vec!["--fmad=false".to_owned(), "-lineinfo".to_owned()]
        );
        assert!(parse_options(Some("")).is_empty());
    }
}
