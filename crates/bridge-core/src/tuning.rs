//! Run-time tuning knobs: every choice worth comparing on a GPU is an environment variable with
//! a documented default, because the GPU machine has no compiler (`docs/gpu.md`).
//!
//! Each knob is read once per process, on first use. A value that does not parse or is out of
//! range falls back to the default with one warning (never a panic). [`KNOBS`] is the full list
//! (the table in `docs/gpu.md` is checked against it by a test) and [`snapshot`] gives the value
//! each knob has in this process, which `arraybridge bench` prints with its figures so that a
//! variant's numbers always say what they were measured with.
//!
//! ```
//! use bridge_core::tuning;
//! // `None`: unset or "auto", so the caller's device-dependent default applies.
//! let wg = tuning::usize_knob("ARRAYBRIDGE_PACO_STATS_WG").unwrap_or(64);
//! assert!(wg >= 1);
//! assert!(tuning::snapshot().iter().any(|(name, _)| *name == "ARRAYBRIDGE_PACO_STATS_WG"));
//! ```

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// One knob: its variable, its default (as text; `auto` means "chosen per device"), the values
/// it accepts and what it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knob {
    /// The environment variable.
    pub name: &'static str,
    /// The default, as printed.
    pub default: &'static str,
    /// What it accepts.
    pub accepts: Accepts,
    /// What it changes (one line).
    pub doc: &'static str,
}

/// The values a [`Knob`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepts {
    /// An integer in the range, or `auto` (the default chosen per device) when the default is
    /// `auto`.
    Int(u64, u64),
    /// One of these words.
    Choice(&'static [&'static str]),
    /// Free text (options passed on to a compiler).
    Text,
}

/// Every knob of the workspace.
pub const KNOBS: &[Knob] = &[
    Knob {
        name: "ARRAYBRIDGE_NVRTC_OPTIONS",
        default: "--fmad=false",
        accepts: Accepts::Text,
        doc: "NVRTC options of every program compiled for a CUDA device (whitespace-separated)",
    },
    Knob {
        name: "ARRAYBRIDGE_CUDA_LAUNCH",
        default: "stream",
        accepts: Accepts::Choice(&["stream", "sync"]),
        doc: "stream: a CUDA executor enqueues on its own stream and waits only where the host \
              reads; sync: every launch waits for its kernel (the old behaviour, for A/B tests)",
    },
    Knob {
        name: "ARRAYBRIDGE_STAGING_CHUNK_MB",
        default: "64",
        accepts: Accepts::Int(1, 1024),
        doc: "size of one pinned staging chunk of host<->device copies",
    },
    Knob {
        name: "ARRAYBRIDGE_STAGING_BUFFERS",
        default: "4",
        accepts: Accepts::Int(2, 8),
        doc: "pinned staging chunks in flight",
    },
    Knob {
        name: "ARRAYBRIDGE_DIRECT_COPY_KB",
        default: "1024",
        accepts: Accepts::Int(0, 1 << 20),
        doc: "uploads up to this size are one plain copy (by an executor: asynchronous, from a \
              host copy kept until the copy completes); larger ones go through pinned staging",
    },
    Knob {
        name: "ARRAYBRIDGE_CHECK_PARAMS",
        default: "1",
        accepts: Accepts::Int(0, 1),
        doc: "0 skips the launch-time check of CUDA kernel argument sizes",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_WG_X",
        default: "64",
        accepts: Accepts::Int(1, 1024),
        doc: "work-group width of the detection kernels log_pass_y, log_pass_x, log_peaks and \
              of locate's per-pixel kernels",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_WG_Y",
        default: "auto",
        accepts: Accepts::Int(1, 64),
        doc: "work-group height of the same kernels (auto: 4 on CUDA, 1 on OpenCL)",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_ROWS",
        default: "auto",
        accepts: Accepts::Int(1, 16),
        doc: "rows computed by each work-item of log_pass_y, sliding a window over the taps \
              (auto: 8 on CUDA, 1 on OpenCL); does not change results",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_COLS",
        default: "1",
        accepts: Accepts::Int(1, 16),
        doc: "columns computed by each work-item of log_pass_x, the same way; does not change \
              results",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_PREP_WG",
        default: "256",
        accepts: Accepts::Int(1, 1024),
        doc: "work-group size of the detection prescale kernels (native dtype to REAL) and of \
              locate's load and rescale kernels",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_CERTIFIED",
        default: "1",
        accepts: Accepts::Int(0, 1),
        doc: "1: exact blob_log on the CPU finds its maxima in an f32 scale space with a \
              proven error bound and computes the exact f64 value of every voxel the bound \
              leaves open (same results, faster); 0: the whole scale space in f64",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_BAND_ROWS",
        default: "auto",
        accepts: Accepts::Int(1, 1 << 16),
        doc: "rows of the scale space computed per step of blob_log on the CPU, every scale \
              (auto: as many as fit 512 KiB, at least 8)",
    },
    Knob {
        name: "ARRAYBRIDGE_PACO_STATS_WG",
        default: "auto",
        accepts: Accepts::Int(1, 1024),
        doc: "work-group size of paco_stats, one group per pixel (auto: 64 on GPUs, 32 on CPU \
              OpenCL devices)",
    },
    Knob {
        name: "ARRAYBRIDGE_PACO_LINE_WG",
        default: "64",
        accepts: Accepts::Int(1, 1024),
        doc: "work-group size of paco_centre, paco_z and paco_accumulate",
    },
    Knob {
        name: "ARRAYBRIDGE_PACO_DEVICE_BATCH",
        default: "65536",
        accepts: Accepts::Int(1, 1 << 26),
        doc: "output positions per paco_accumulate launch on a device (the next batch's \
              trajectories are computed on the host while the device runs this one)",
    },
    Knob {
        name: "ARRAYBRIDGE_TRACE",
        default: "0",
        accepts: Accepts::Choice(&["0", "1", "true", "yes", "false", "no"]),
        doc: "1: the device detection pipeline prints a per-batch time breakdown on stderr \
              (kernels are then waited for one by one, so the breakdown is exact)",
    },
    Knob {
        name: "ARRAYBRIDGE_BENCH_MAX_MB",
        default: "4096",
        accepts: Accepts::Int(1, 1 << 20),
        doc: "largest size of the criterion transfer bench",
    },
];

/// The knob named `name`, if it is one.
pub fn knob(name: &str) -> Option<&'static Knob> {
    KNOBS.iter().find(|k| k.name == name)
}

/// What a raw value means for `k`: `Ok(Some(v))` a value, `Ok(None)` the default (unset, or
/// `auto` for a knob whose default is `auto`), `Err(reason)` a value that is refused (the caller
/// falls back to the default).
pub fn parse(k: &Knob, raw: Option<&str>) -> Result<Option<String>, String> {
    let Some(raw) = raw else { return Ok(None) };
    let v = raw.trim();
    match k.accepts {
        Accepts::Int(lo, hi) => {
            if v.eq_ignore_ascii_case("auto") && k.default == "auto" {
                return Ok(None);
            }
            match v.parse::<u64>() {
                Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n.to_string())),
                _ => Err(format!(
                    "{}={raw:?} is not an integer in {lo}..={hi}",
                    k.name
                )),
            }
        }
        Accepts::Choice(words) => match words.iter().find(|w| w.eq_ignore_ascii_case(v)) {
            Some(w) => Ok(Some((*w).to_owned())),
            None => Err(format!(
                "{}={raw:?} is not one of {}",
                k.name,
                words.join(", ")
            )),
        },
        Accepts::Text => Ok(Some(raw.to_owned())),
    }
}

fn cache() -> &'static Mutex<HashMap<&'static str, Option<String>>> {
    static C: OnceLock<Mutex<HashMap<&'static str, Option<String>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The value of knob `name` in this process (read once; `None`: the default applies). Unknown
/// names are a programming error and read as `None` with a warning.
pub fn raw(name: &str) -> Option<String> {
    let Some(k) = knob(name) else {
        log::warn!("internal: {name} is not a tuning knob");
        return None;
    };
    let mut c = cache().lock().unwrap_or_else(|p| p.into_inner());
    c.entry(k.name)
        .or_insert_with(|| {
            let env = std::env::var(k.name).ok();
            match parse(k, env.as_deref()) {
                Ok(v) => v,
                Err(reason) => {
                    log::warn!("{reason}; using the default ({})", k.default);
                    None
                }
            }
        })
        .clone()
}

/// An integer knob: `None` when unset, `auto` or refused (the caller's default applies).
pub fn usize_knob(name: &str) -> Option<usize> {
    raw(name).and_then(|v| v.parse().ok())
}

/// An integer knob with a fixed default.
pub fn usize_or(name: &str, default: usize) -> usize {
    usize_knob(name).unwrap_or(default)
}

/// A choice knob's word (its default when unset or refused).
pub fn choice(name: &str) -> String {
    raw(name).unwrap_or_else(|| knob(name).map_or("", |k| k.default).to_owned())
}

/// Every knob with the value it has in this process (its default where unset), in [`KNOBS`]
/// order.
pub fn snapshot() -> Vec<(&'static str, String)> {
    KNOBS
        .iter()
        .map(|k| (k.name, raw(k.name).unwrap_or_else(|| k.default.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_knob_is_named_once_and_documented() {
        let mut names: Vec<_> = KNOBS.iter().map(|k| k.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KNOBS.len());
        for k in KNOBS {
            assert!(k.name.starts_with("ARRAYBRIDGE_"), "{}", k.name);
            assert!(!k.doc.is_empty());
            // the default itself is accepted
            if k.default != "auto" {
                assert!(parse(k, Some(k.default)).is_ok(), "{}", k.name);
            }
        }
    }

    #[test]
    fn values_parse_or_are_refused() {
        let wg = knob("ARRAYBRIDGE_PACO_STATS_WG").unwrap();
        assert_eq!(parse(wg, None), Ok(None));
        assert_eq!(parse(wg, Some("auto")), Ok(None));
        assert_eq!(parse(wg, Some(" 128 ")), Ok(Some("128".into())));
        for bad in ["0", "1025", "-1", "lots", ""] {
            assert!(parse(wg, Some(bad)).is_err(), "{bad}");
        }
        let batch = knob("ARRAYBRIDGE_PACO_DEVICE_BATCH").unwrap();
        assert!(
            parse(batch, Some("auto")).is_err(),
            "auto only where the default is auto"
        );
        let launch = knob("ARRAYBRIDGE_CUDA_LAUNCH").unwrap();
        assert_eq!(parse(launch, Some("SYNC")), Ok(Some("sync".into())));
        assert!(parse(launch, Some("async")).is_err());
        let nvrtc = knob("ARRAYBRIDGE_NVRTC_OPTIONS").unwrap();
        assert_eq!(
            parse(nvrtc, Some("-lineinfo --fmad=true")),
            Ok(Some("-lineinfo --fmad=true".into()))
        );
    }

    #[test]
    fn snapshot_lists_every_knob_with_a_value() {
        let s = snapshot();
        assert_eq!(s.len(), KNOBS.len());
        assert!(s.iter().all(|(_, v)| !v.is_empty()));
        assert!(!choice("ARRAYBRIDGE_CUDA_LAUNCH").is_empty());
    }
}
