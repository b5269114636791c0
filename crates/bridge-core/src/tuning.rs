//! Run-time tuning knobs: every choice worth comparing on a GPU is an environment variable with
//! a documented default, because the GPU machine has no compiler (`docs/gpu.md`).
//!
//! A [`Tuning`] is a value: an algorithm's device configuration carries one (a test sets a knob
//! by value, [`Tuning::with`]); the process has one ([`process`]), which its front end installs
//! from the environment at start ([`install`], [`Tuning::from_env`]: the one place the library
//! reads these variables). A value that does not parse or is out of range falls back to the
//! default with one warning (never a panic). [`KNOBS`] is the full list
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

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::BridgeError;

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
        name: "ARRAYBRIDGE_CUDA_UPLOAD",
        default: "own",
        accepts: Accepts::Choice(&["own", "shared"]),
        doc: "own: a CUDA executor's large uploads (fresh buffers) go on a stream of their own, \
              beside the kernels in flight; shared: behind them on the executor's stream (the \
              old behaviour, for A/B tests)",
    },
    Knob {
        name: "ARRAYBRIDGE_CUDA_PACK",
        default: "pinned",
        accepts: Accepts::Choice(&["pinned", "pageable"]),
        doc: "pinned: frames packed for an upload (detection, locate) are written into a \
              page-locked buffer and sent by one DMA; pageable: into a host vector sent by the \
              staged copy (the old behaviour, for A/B tests)",
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
        name: "ARRAYBRIDGE_STAGING_ADAPT",
        default: "1",
        accepts: Accepts::Int(0, 1),
        doc: "1 cuts a staged copy into chunks of about an eighth of its size (1 MiB up to the \
              chunk size), so copies under 8 chunks overlap the host's copying with the DMA; \
              0 always uses whole chunks",
    },
    Knob {
        name: "ARRAYBRIDGE_HOST_REGISTER_MB",
        default: "0",
        accepts: Accepts::Int(0, 1 << 20),
        doc: "host ranges of at least this many MiB are page-locked in place \
              (cuMemHostRegister) and copied to or from a CUDA device with no staging; 0 never",
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
        name: "ARRAYBRIDGE_DETECT_X_INTERIOR",
        default: "1",
        accepts: Accepts::Int(0, 1),
        doc: "1: log_pass_x slides its window without edge handling where a column's taps are \
              inside the row, also with one column per work-item (0: edge handling at every \
              tap, as before 2026-11-27); does not change results",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_TILE",
        default: "auto",
        accepts: Accepts::Int(0, 64),
        doc: "rows of a tile of the fused LoG pass (log_pass_tile: both passes of a tile in \
              local memory, no scratch cubes); 0: the two passes log_pass_y and log_pass_x \
              (auto: 8 on OpenCL, 0 on CUDA); scales wider than the tile's local memory take \
              the two passes; does not change results",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_BLOCK",
        default: "auto",
        accepts: Accepts::Int(0, 64),
        doc: "rows of a block of the register-blocked fused LoG pass (log_pass_block: the y \
              pass of a block and its halo into local memory with ARRAYBRIDGE_DETECT_ROWS rows \
              per work item, then the x pass from there with ARRAYBRIDGE_DETECT_BLOCK_COLS \
              columns per work item; no scratch cubes, no cube_minmax); it takes precedence over \
              ARRAYBRIDGE_DETECT_TILE; 0: off (auto: 16 on CUDA, 0 on OpenCL); scales wider \
              than the block's local memory take the tile or the two passes; does not change \
              results",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_BLOCK_COLS",
        default: "3",
        accepts: Accepts::Int(1, 15),
        doc: "consecutive columns of each work item in log_pass_block's x pass (the block is \
              ARRAYBRIDGE_DETECT_WG_X times as wide); odd values read local memory without \
              bank conflicts; does not change results",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_SCAN_GROUPS",
        default: "auto",
        accepts: Accepts::Int(0, 1024),
        doc: "work groups a frame that scan the image for its largest magnitude in the \
              certified search (frame_absmax, folded by cert_frames); 0 or 1: cert_frames \
              scans each frame with its one group (auto: on GPUs a group per 16,384 pixels, \
              at most 64; 0 on CPU devices); does not change results",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_MAX_MB",
        default: "auto",
        accepts: Accepts::Int(1, 1 << 20),
        doc: "device working set of one sub-batch of detection (blob_log's cube and scratch, \
              locate's images), in MiB, where GpuDetectConfig::max_device_bytes is 0 (its \
              default); auto: a quarter of what the GPU could allocate when the run starts, \
              64 MiB to 8 GiB, and 512 on a CPU device; does not change results",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_IN_FLIGHT",
        default: "auto",
        accepts: Accepts::Int(1, 4),
        doc: "batches a device detects at once (LogDetector, locate_batches), from as many \
              threads: the next batch is packed and uploaded while the current one computes, \
              the last one's particles or features are finished on the host meanwhile (auto: \
              2 on OpenCL, 1 on CUDA); does not change results",
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
        name: "ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED",
        default: "auto",
        accepts: Accepts::Int(0, 1),
        doc: "1: exact blob_log on a device (with a threshold) searches an f32 scale space \
              with the CPU's proven error bound and settles what the bound leaves open with \
              exact f64 voxels on the host (the CPU's results, also without doubles); 0: the \
              whole scale space in the working type on the device (the CPU's results where \
              the device has doubles)",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_PASS_FMA",
        default: "auto",
        accepts: Accepts::Int(0, 1),
        doc: "1: the certified search's float32 LoG passes on a device fuse each multiply-add \
              (one rounding, within the same proven bound; auto: on CUDA, off on OpenCL); \
              does not change results",
    },
    Knob {
        name: "ARRAYBRIDGE_DETECT_FUSED",
        default: "auto",
        accepts: Accepts::Int(0, 16),
        doc: "the f32 kernels of blob_log's certified search on the CPU: 0 the exact ones \
              (separate multiplies and adds, 8 lanes), 8 fused multiply-adds on 8 lanes \
              (AVX2 and FMA), auto or 16 the widest the CPU has (16 lanes with AVX-512F); \
              the results are the same, only the speed differs",
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
        doc: "work-group size of paco_centre, paco_lag, paco_z and paco_accumulate",
    },
    Knob {
        name: "ARRAYBRIDGE_PACO_DEVICE_BATCH",
        default: "65536",
        accepts: Accepts::Int(1, 1 << 26),
        doc: "output positions per paco_accumulate launch on a device (the next batch's \
              trajectories are computed on the host while the device runs this one)",
    },
    Knob {
        name: "ARRAYBRIDGE_LOCATE_ROWS",
        default: "pixel",
        accepts: Accepts::Choice(&["pixel", "line"]),
        doc: "locate's boxcar along rows: pixel, one work item per pixel (reads coalesced) where \
              the sum is exact in any order (integer frames, no boxcar or no preprocessing), the \
              rows' maxima by a reduction; line, one work item per row (the running sum) always \
              (the same numbers either way)",
    },
    Knob {
        name: "ARRAYBRIDGE_LOCATE_NOISE",
        default: "auto",
        accepts: Accepts::Choice(&["auto", "tiles", "rows"]),
        doc: "locate's background noise: tiles, the uncovered pixels flagged one work item per \
              pixel (locate_noise_flag), then each row's sums in column order by groups of 32 \
              rows read 32 columns at a time through local memory (locate_noise_tiles: reads \
              coalesced); rows, one work item per row flags and sums (locate_noise_rows: each \
              reads its own row); auto: tiles on GPUs, rows on CPU devices; the same numbers \
              either way",
    },
    Knob {
        name: "ARRAYBRIDGE_LOCATE_KEEP",
        default: "1",
        accepts: Accepts::Choice(&["1", "0"]),
        doc: "1: locate on a device reads back only the candidates whose mass can pass \
              minmass (locate_keep compacts them; a sparse movie's are a few percent); 0: \
              every candidate (the same features either way)",
    },
    Knob {
        name: "ARRAYBRIDGE_PACO_COV",
        default: "auto",
        accepts: Accepts::Choice(&["auto", "lag", "direct"]),
        doc: "how paco_stats gets the sample covariance on a device: lag reads a lag table \
              computed by paco_lag (the CPU's, ~13x fewer dot products at radius 4), direct \
              computes K(K+1)/2 dot products per pixel; auto takes whichever computes fewer \
              (the same numbers either way)",
    },
    Knob {
        name: "ARRAYBRIDGE_PACO_LAG_LAYOUT",
        default: "auto",
        accepts: Accepts::Choice(&["auto", "frame", "pixel", "mixed"]),
        doc: "what paco_lag reads and writes: frame, the frame-major centred cube, a thread per \
              pixel and lag (neighbouring threads read neighbouring pixels), the table \
              lag-major; pixel, the pixel-major cube, a thread per pixel over all lags \
              (contiguous columns, cached), the table pixel-major; mixed, the frame-major cube \
              and a pixel-major table (paco_stats reads each patch pixel's lags from one short \
              row); auto: pixel on CPU devices, frame on GPUs (the same numbers either way)",
    },
    Knob {
        name: "ARRAYBRIDGE_PACO_CHOL",
        default: "auto",
        accepts: Accepts::Choice(&["auto", "columns", "rows"]),
        doc: "how paco_stats' Cholesky updates the trailing triangle of each column: columns, \
              a work item per column walking down it; rows, a row at a time over the group; \
              auto: columns where a pixel's group has more than one work item (GPUs), rows \
              for a lone work item (CPU devices) (the same numbers either way)",
    },
    Knob {
        name: "ARRAYBRIDGE_PACO_LAG_ORDER",
        default: "auto",
        accepts: Accepts::Choice(&["auto", "lags", "pixels"]),
        doc: "the order of paco_lag's grid (a thread per pixel and lag): lags, the lags first \
              (the groups in flight share their pixels' frames in the cache); pixels, every \
              pixel of one lag, then the next (the cube streamed once per lag); auto: lags on \
              GPUs, pixels on CPU devices (the same numbers either way)",
    },
    Knob {
        name: "ARRAYBRIDGE_PACO_TRAJ",
        default: "auto",
        accepts: Accepts::Choice(&["auto", "device", "host", "wide"]),
        doc: "where PACO without sub-pixel templates computes its trajectories when the run is \
              in double: device, paco_traj (each rounded coordinate certified against the \
              device's sine, the undecided entries computed on the host); host, on the host \
              (paco_accumulate reads them); wide, as device but leaving every coordinate \
              within 1/1024 pixel of a rounding boundary to the host (a test of that path); \
              auto: device on GPUs, host on CPU devices (the same numbers either way)",
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

/// A validated set of knob values, passed by value to what it tunes (an algorithm's device
/// configuration, e.g. `GpuDetectConfig::tuning`): the knobs set explicitly, every other one at
/// its default. [`Tuning::default`] is every default; [`Tuning::from_env`] is the environment's
/// (the one place the library reads the `ARRAYBRIDGE_*` tuning variables); [`Tuning::with`]
/// sets one knob, so a test compares variants in one process.
///
/// ```
/// use bridge_core::tuning::Tuning;
/// let t = Tuning::default().with("ARRAYBRIDGE_PACO_STATS_WG", "128")?;
/// assert_eq!(t.usize_knob("ARRAYBRIDGE_PACO_STATS_WG"), Some(128));
/// assert_eq!(Tuning::default().usize_knob("ARRAYBRIDGE_PACO_STATS_WG"), None); // auto
/// assert!(Tuning::default().with("ARRAYBRIDGE_PACO_STATS_WG", "0").is_err());
/// # Ok::<(), bridge_core::BridgeError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    set: BTreeMap<&'static str, String>,
    /// The host memory budget's explicit limit ([`MEMORY_LIMIT_ENV`]), as read.
    memory_limit: MemoryLimitSetting,
}

/// [`MEMORY_LIMIT_ENV`] as a tuning holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum MemoryLimitSetting {
    /// No explicit limit.
    #[default]
    Unset,
    /// A limit in MiB (≥ 1).
    Mib(u64),
    /// A value that is not a whole number of MiB ≥ 1 (the refusal's message).
    Refused(String),
}

impl Tuning {
    /// The knobs of the process environment: each variable parsed once; a value that does not
    /// parse or is out of range is left at its default, with one warning (never a panic).
    pub fn from_env() -> Tuning {
        let mut t = Tuning::default();
        for k in KNOBS {
            let env = std::env::var(k.name).ok();
            match parse(k, env.as_deref()) {
                Ok(Some(v)) => {
                    t.set.insert(k.name, v);
                }
                Ok(None) => {}
                Err(reason) => log::warn!("{reason}; using the default ({})", k.default),
            }
        }
        let raw = std::env::var_os(MEMORY_LIMIT_ENV);
        t.memory_limit = match parse_memory_limit(raw.as_deref().map(|v| v.to_string_lossy())) {
            Ok(None) => MemoryLimitSetting::Unset,
            Ok(Some(n)) => MemoryLimitSetting::Mib(n),
            // the reason alone: `memory_limit_mib` names the variable again
            Err(BridgeError::InvalidArgument { reason, .. }) => MemoryLimitSetting::Refused(reason),
            Err(e) => MemoryLimitSetting::Refused(e.to_string()),
        };
        t
    }

    /// The host memory budget's explicit limit in MiB ([`MEMORY_LIMIT_ENV`] for a tuning read
    /// [`from_env`](Self::from_env)): `Ok(None)` for none, [`BridgeError::InvalidArgument`]
    /// naming a value that is not a whole number of MiB ≥ 1 (a front end refuses it at start).
    ///
    /// ```
    /// use bridge_core::tuning::{Tuning, parse_memory_limit};
    /// let t = Tuning::default().with_memory_limit_mib(Some(512)); // by value, no variable
    /// assert_eq!(t.memory_limit_mib()?, Some(512));
    /// assert_eq!(Tuning::default().memory_limit_mib()?, None);
    /// assert_eq!(parse_memory_limit(Some(" 64 "))?, Some(64));
    /// assert!(parse_memory_limit(Some("1e0")).is_err());
    /// # Ok::<(), bridge_core::BridgeError>(())
    /// ```
    pub fn memory_limit_mib(&self) -> Result<Option<u64>, BridgeError> {
        match &self.memory_limit {
            MemoryLimitSetting::Unset => Ok(None),
            MemoryLimitSetting::Mib(n) => Ok(Some(*n)),
            MemoryLimitSetting::Refused(why) => {
                Err(BridgeError::invalid_argument(MEMORY_LIMIT_ENV, why.clone()))
            }
        }
    }

    /// This tuning with the host memory budget's explicit limit set to `mib` MiB (`None`: none).
    pub fn with_memory_limit_mib(mut self, mib: Option<u64>) -> Tuning {
        self.memory_limit = match mib {
            Some(n) if n >= 1 => MemoryLimitSetting::Mib(n),
            _ => MemoryLimitSetting::Unset,
        };
        self
    }

    /// This tuning with knob `name` set to `value` (`auto` for a knob whose default is `auto`
    /// sets it back to its default); [`BridgeError::InvalidInput`] for an unknown knob or a value
    /// it refuses.
    pub fn with(mut self, name: &str, value: &str) -> Result<Tuning, BridgeError> {
        let k = knob(name).ok_or_else(|| {
            BridgeError::invalid_argument(name, "not a tuning knob (see docs/gpu.md)")
        })?;
        match parse(k, Some(value)).map_err(|r| BridgeError::invalid_argument(name, r))? {
            Some(v) => {
                self.set.insert(k.name, v);
            }
            None => {
                self.set.remove(k.name);
            }
        }
        Ok(self)
    }

    /// The value of knob `name` (`None`: its default applies).
    pub fn raw(&self, name: &str) -> Option<String> {
        if knob(name).is_none() {
            log::warn!("internal: {name} is not a tuning knob");
        }
        self.set.get(name).cloned()
    }

    /// An integer knob: `None` when unset or `auto` (the caller's default applies).
    pub fn usize_knob(&self, name: &str) -> Option<usize> {
        self.raw(name).and_then(|v| v.parse().ok())
    }

    /// An integer knob with a fixed default.
    pub fn usize_or(&self, name: &str, default: usize) -> usize {
        self.usize_knob(name).unwrap_or(default)
    }

    /// A choice knob's word (its default when unset).
    pub fn choice(&self, name: &str) -> String {
        self.raw(name)
            .unwrap_or_else(|| knob(name).map_or("", |k| k.default).to_owned())
    }

    /// Every knob with its value here (its default where unset), in [`KNOBS`] order.
    pub fn snapshot(&self) -> Vec<(&'static str, String)> {
        KNOBS
            .iter()
            .map(|k| {
                (
                    k.name,
                    self.raw(k.name).unwrap_or_else(|| k.default.to_owned()),
                )
            })
            .collect()
    }
}

/// The environment variable of the host memory budget's explicit limit, in MiB
/// (`crate::host::LIMIT_ENV`).
pub const MEMORY_LIMIT_ENV: &str = "ARRAYBRIDGE_MEMORY_LIMIT_MB";

/// A value of [`MEMORY_LIMIT_ENV`] in MiB (`raw`: the variable's text, `None` when unset):
/// `Ok(None)` when unset or empty, `Ok(Some(n))` for a whole number n ≥ 1,
/// [`BridgeError::InvalidArgument`] naming the value otherwise (`abc`, `1e0`, `-5`, `0`). A
/// front end that keeps the variable itself (Python's `os.environ`) parses it with this.
pub fn parse_memory_limit(raw: Option<impl AsRef<str>>) -> Result<Option<u64>, BridgeError> {
    let name = MEMORY_LIMIT_ENV;
    let Some(raw) = raw else {
        return Ok(None);
    };
    let v = raw.as_ref();
    let t = v.trim();
    if t.is_empty() {
        return Ok(None);
    }
    match t.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(Some(n)),
        _ => Err(BridgeError::invalid_argument(
            name,
            format!("expected a whole number of MiB, at least 1 (e.g. 4096), got {v:?}"),
        )),
    }
}

static PROCESS: OnceLock<Tuning> = OnceLock::new();

/// The process's tuning: the one its front end [`install`]ed (the command line and the Python
/// package install [`Tuning::from_env`] at start), else the environment's, read once on first
/// use. What is per process (a CUDA executor's launch mode and staging, NVRTC's options) and
/// the default of every algorithm's device configuration come from it.
pub fn process() -> &'static Tuning {
    PROCESS.get_or_init(Tuning::from_env)
}

/// Fix the process's tuning before anything used it; `Err` with the tuning already in use
/// otherwise (a value cannot change under running work).
pub fn install(t: Tuning) -> Result<(), Tuning> {
    let mut t = Some(t);
    let got = PROCESS.get_or_init(|| t.take().unwrap_or_default());
    match t {
        None => Ok(()),
        Some(t) if *got == t => Ok(()),
        Some(_) => Err(got.clone()),
    }
}

/// The value of knob `name` in this process ([`process`]; `None`: the default applies).
pub fn raw(name: &str) -> Option<String> {
    process().raw(name)
}

/// An integer knob of the process: `None` when unset, `auto` or refused.
pub fn usize_knob(name: &str) -> Option<usize> {
    process().usize_knob(name)
}

/// An integer knob of the process with a fixed default.
pub fn usize_or(name: &str, default: usize) -> usize {
    process().usize_or(name, default)
}

/// A choice knob's word in this process (its default when unset or refused).
pub fn choice(name: &str) -> String {
    process().choice(name)
}

/// Every knob with the value it has in this process (its default where unset), in [`KNOBS`]
/// order.
pub fn snapshot() -> Vec<(&'static str, String)> {
    process().snapshot()
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
    fn a_tuning_is_a_value() {
        let t = Tuning::default()
            .with("ARRAYBRIDGE_DETECT_WG_X", " 32 ")
            .unwrap()
            .with("ARRAYBRIDGE_CUDA_LAUNCH", "SYNC")
            .unwrap();
        assert_eq!(t.usize_or("ARRAYBRIDGE_DETECT_WG_X", 64), 32);
        assert_eq!(t.choice("ARRAYBRIDGE_CUDA_LAUNCH"), "sync");
        assert_eq!(
            Tuning::default().choice("ARRAYBRIDGE_CUDA_LAUNCH"),
            "stream"
        );
        // auto sets a knob back to its default; refused values and unknown names are errors
        let back = t.clone().with("ARRAYBRIDGE_DETECT_WG_Y", "auto").unwrap();
        assert_eq!(back.usize_knob("ARRAYBRIDGE_DETECT_WG_Y"), None);
        assert!(t.clone().with("ARRAYBRIDGE_DETECT_WG_X", "0").is_err());
        assert!(t.clone().with("ARRAYBRIDGE_NOT_A_KNOB", "1").is_err());
        let snap = t.snapshot();
        assert_eq!(snap.len(), KNOBS.len());
        assert!(snap.contains(&("ARRAYBRIDGE_DETECT_WG_X", "32".to_owned())));
    }

    #[test]
    fn snapshot_lists_every_knob_with_a_value() {
        let s = snapshot();
        assert_eq!(s.len(), KNOBS.len());
        assert!(s.iter().all(|(_, v)| !v.is_empty()));
        assert!(!choice("ARRAYBRIDGE_CUDA_LAUNCH").is_empty());
    }
}
