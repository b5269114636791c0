//! FITS images: read any image HDU (any BITPIX, BSCALE/BZERO applied) into an f64 array, write
//! f64 images. Built on `fitsio` (cfitsio compiled from source).
//!
//! Arrays are in C order: a FITS file with `NAXIS1 = W, NAXIS2 = H, NAXIS3 = T` becomes an array
//! of shape `(T, H, W)`, indexed `[t][y][x]`, so images keep the orientation of the file.
//!
//! # Hostile files
//!
//! The reader trusts nothing in a header. It talks to cfitsio directly (`fitsio::sys`), not
//! through `fitsio`'s high-level HDU API, which allocates whatever the header declares and panics
//! on some legal headers (unsigned 64-bit images). Before any pixel is read it
//! * opens the file with `fits_open_diskfile` (no extended-filename syntax, no decompression of
//!   gzip'd files: those fail the `SIMPLE` signature check first);
//! * multiplies the axes and `|BITPIX|/8` with checked arithmetic;
//! * rejects an HDU whose data would run past the end of the file (a truncated file, or a
//!   corrupt header declaring more data than there is) — tile-compressed images are exempt
//!   from this rule, as their data is stored compressed;
//! * checks the f64 output (`8 · prod(NAXISn)` bytes) against the host memory budget
//!   ([`bridge_core::host`]) and allocates it fallibly.
//!
//! An integer image (BITPIX 8, 16, 32, 64) with a `BLANK` keyword is refused when any stored
//! pixel equals `BLANK` (the raw value, before BSCALE/BZERO): those pixels are undefined, and
//! read as numbers they would be used as data (as a NaN in a float image would be). The error
//! names the HDU, the BLANK value and how many pixels carry it. An image with `BLANK` but no
//! such pixel reads normally.
//!
//! cfitsio's numeric status codes are turned into words ([`status_text`]).

use std::ffi::{CString, c_int};
use std::path::Path;

use bridge_core::host::{Budget, checked_product, format_bytes};
use bridge_core::{BridgeError, Result};
use fitsio::FitsFile;
use fitsio::images::{ImageDescription, ImageType};
use fitsio::sys;
use ndarray::{ArrayD, IxDyn};

fn fits_err(path: &Path, what: &str, e: impl std::fmt::Display) -> BridgeError {
    BridgeError::InvalidInput(format!("{}: {what}: {e}", path.display()).into())
}

/// A `fitsio` error with cfitsio's status code in words.
fn fitsio_err(path: &Path, what: &str, e: fitsio::errors::Error) -> BridgeError {
    match e {
        fitsio::errors::Error::Fits(f) => fits_err(path, what, status_text(f.status)),
        other => fits_err(path, what, other),
    }
}

/// cfitsio status codes used below.
mod status {
    pub const FILE_NOT_OPENED: i32 = 104;
    pub const END_OF_FILE: i32 = 107;
    pub const READ_ERROR: i32 = 108;
    pub const MEMORY_ALLOCATION: i32 = 113;
    pub const SEEK_ERROR: i32 = 116;
    pub const NO_END: i32 = 210;
    pub const BAD_BITPIX: i32 = 211;
    pub const BAD_NAXIS: i32 = 212;
    pub const BAD_NAXES: i32 = 213;
    pub const BAD_PCOUNT: i32 = 214;
    pub const BAD_GCOUNT: i32 = 215;
    pub const NO_SIMPLE: i32 = 221;
    pub const UNKNOWN_REC: i32 = 252;
    pub const BAD_HEADER_FILL: i32 = 254;
    pub const BAD_DATA_FILL: i32 = 255;
    pub const DATA_DECOMPRESSION_ERR: i32 = 414;
    pub const NUM_OVERFLOW: i32 = 412;
}

/// cfitsio's one-line text for `status` (at most 30 characters).
fn cfitsio_text(code: c_int) -> String {
    let mut buf = [0 as std::ffi::c_char; 81];
    // SAFETY: ffgerr writes at most FLEN_STATUS (31) bytes, NUL included, into `buf` (81).
    unsafe { sys::ffgerr(code, buf.as_mut_ptr()) };
    buf[80] = 0;
    // SAFETY: `buf` is NUL-terminated (ffgerr terminates it; the last byte is forced to 0).
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .trim()
        .to_string()
}

/// A cfitsio status code in words: what went wrong and, where it helps, the likely cause.
pub fn status_text(code: i32) -> String {
    use status::*;
    let what = match code {
        FILE_NOT_OPENED => "could not open the file",
        END_OF_FILE => "tried to read past the end of the file (truncated?)",
        READ_ERROR => "error reading the file (truncated or unreadable?)",
        MEMORY_ALLOCATION => "cfitsio could not allocate memory",
        SEEK_ERROR => "could not seek in the file (truncated?)",
        NO_END => "the header has no END card (truncated, or not a FITS file?)",
        BAD_BITPIX => "illegal BITPIX (must be 8, 16, 32, 64, -32 or -64)",
        BAD_NAXIS => "illegal NAXIS (must be 0 to 999)",
        BAD_NAXES => "illegal NAXISn (must be a non-negative integer)",
        BAD_PCOUNT => "illegal PCOUNT",
        BAD_GCOUNT => "illegal GCOUNT",
        NO_SIMPLE..=229 => {
            "a required header keyword (SIMPLE/XTENSION, BITPIX, NAXIS, NAXISn, PCOUNT, GCOUNT) \
             is missing or out of order"
        }
        UNKNOWN_REC => "not a FITS file, or a corrupt header (unrecognizable FITS record)",
        BAD_HEADER_FILL | BAD_DATA_FILL => "corrupt fill bytes after a header or data unit",
        DATA_DECOMPRESSION_ERR => "could not decompress the tile-compressed image (corrupt?)",
        NUM_OVERFLOW => "numerical overflow while converting the data to float64",
        _ => "",
    };
    if what.is_empty() {
        format!("cfitsio status {code} ({})", cfitsio_text(code))
    } else {
        format!("{what} (cfitsio status {code})")
    }
}

/// An open cfitsio handle, closed on drop.
struct Handle(*mut sys::fitsfile);

impl Drop for Handle {
    fn drop(&mut self) {
        let mut st = 0;
        // SAFETY: the pointer came from a successful ffdkopn and is closed exactly once.
        unsafe { sys::ffclos(self.0, &mut st) };
    }
}

fn cfitsio_fail(path: &Path, doing: &str, code: c_int) -> BridgeError {
    // Drop cfitsio's error-message stack (nothing here reads it; the status code says it all).
    // SAFETY: ffcmsg only clears that stack, under cfitsio's lock in this reentrant build.
    unsafe { sys::ffcmsg() };
    BridgeError::InvalidInput(format!("{}: {doing}: {}", path.display(), status_text(code)).into())
}

/// Open `path` read-only without cfitsio's extended filename syntax.
fn open_disk(path: &Path) -> Result<Handle> {
    #[cfg(unix)]
    let bytes = {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    };
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| {
            BridgeError::InvalidInput(
                format!("{}: the path is not valid UTF-8", path.display()).into(),
            )
        })?
        .as_bytes()
        .to_vec();
    let c_path = CString::new(bytes).map_err(|_| {
        BridgeError::InvalidInput(
            format!("{}: the path contains a NUL byte", path.display()).into(),
        )
    })?;
    let mut fptr: *mut sys::fitsfile = std::ptr::null_mut();
    let mut st: c_int = 0;
    // SAFETY: valid out-pointers and a NUL-terminated path.
    unsafe { sys::ffdkopn(&mut fptr, c_path.as_ptr(), sys::READONLY as c_int, &mut st) };
    if st != 0 || fptr.is_null() {
        if !fptr.is_null() {
            drop(Handle(fptr));
        }
        return Err(cfitsio_fail(path, "cannot open FITS file", st));
    }
    Ok(Handle(fptr))
}

/// What an image HDU declares, validated against the file.
struct ImageHdu {
    /// Axes in C order (NAXISn reversed).
    shape: Vec<usize>,
    /// Pixels (checked product of the axes; 0 when the HDU has no data).
    count: u64,
    /// The `BLANK` keyword of an integer image (BITPIX 8, 16, 32, 64): the stored value of
    /// undefined pixels. `None` for float images and when absent (or not an integer, which
    /// cfitsio ignores as well).
    blank: Option<i64>,
}

/// The `BLANK` keyword of the current HDU, if it holds an integer.
fn blank_keyword(h: &Handle) -> Option<i64> {
    let mut value: sys::LONGLONG = 0;
    let mut comment = [0 as std::ffi::c_char; 81];
    let mut st: c_int = 0;
    // SAFETY: `h.0` is an open handle; the key name is NUL-terminated; `comment` holds more than
    // FLEN_COMMENT (73) bytes.
    unsafe {
        sys::ffgkyjj(
            h.0,
            c"BLANK".as_ptr(),
            &mut value,
            comment.as_mut_ptr(),
            &mut st,
        )
    };
    if st != 0 {
        // Absent (status KEY_NO_EXIST) or not an integer (which cfitsio ignores too): no
        // undefined pixels to look for.
        // SAFETY: as in `cfitsio_fail`.
        unsafe { sys::ffcmsg() };
        return None;
    }
    Some(value)
}

/// Move to HDU `i` (0-based) and describe it: `Ok(None)` when it is not an image.
fn image_hdu(
    h: &Handle,
    path: &Path,
    i: usize,
    file_len: u64,
    budget: &Budget,
) -> std::result::Result<Option<ImageHdu>, (c_int, BridgeError)> {
    let name = path.display();
    if !move_to_hdu(h, path, i)? {
        return Ok(None);
    }
    let (bitpix, dims) = image_header(h, path, i)?;
    let bytes_per = match bitpix {
        8 | 16 | 32 | 64 | -32 | -64 => u64::from(bitpix.unsigned_abs() / 8),
        b => {
            return Err(hdu_fail(
                path,
                i,
                format!("illegal BITPIX = {b} (must be 8, 16, 32, 64, -32 or -64)"),
            ));
        }
    };
    // NAXIS = 0: no data (not the empty product 1).
    let count = checked_product(&dims)
        .map(|c| if dims.is_empty() { 0 } else { c })
        .filter(|&c| c <= i64::MAX as u64 / 8)
        .ok_or_else(|| {
            hdu_fail(
                path,
                i,
                format!(
                    "the header declares {}: more pixels than any file can hold (corrupt header)",
                    declared(&dims)
                ),
            )
        })?;
    let shape = dims
        .iter()
        .rev()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<Vec<usize>, _>>()
        .map_err(|_| {
            hdu_fail(
                path,
                i,
                format!(
                    "{} does not fit this machine's address space",
                    declared(&dims)
                ),
            )
        })?;
    if count == 0 {
        return Ok(Some(ImageHdu {
            shape,
            count,
            blank: None,
        }));
    }
    let data_bytes = count * bytes_per; // count ≤ i64::MAX / 8, bytes_per ≤ 8
    check_data_in_file(h, (path, i), (bitpix, &dims), data_bytes, file_len)?;
    let out_bytes = count * 8;
    budget
        .check(
            out_bytes,
            &format!("{name} (HDU {i}: {}, read as float64)", declared(&dims)),
            "crop the image (for example with fitscopy 'in.fits[1:512,1:512]' out.fits) or read \
             it on a machine with more memory",
        )
        .map_err(|e| (0, e))?;
    let blank = if bitpix > 0 { blank_keyword(h) } else { None };
    Ok(Some(ImageHdu {
        shape,
        count,
        blank,
    }))
}

/// The error of HDU `i` of `path` that the header itself shows (no cfitsio status: 0).
fn hdu_fail(path: &Path, i: usize, msg: String) -> (c_int, BridgeError) {
    let name = path.display();
    (
        0,
        BridgeError::InvalidInput(format!("{name}: HDU {i}: {msg}").into()),
    )
}

/// The axes as the header declares them: `NAXIS1 = …, NAXIS2 = …`.
fn declared(dims: &[u64]) -> String {
    dims.iter()
        .enumerate()
        .map(|(k, d)| format!("NAXIS{} = {d}", k + 1))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Move to HDU `i` (0-based): whether it is an image.
fn move_to_hdu(
    h: &Handle,
    path: &Path,
    i: usize,
) -> std::result::Result<bool, (c_int, BridgeError)> {
    let name = path.display();
    let num = c_int::try_from(i.saturating_add(1)).map_err(|_| {
        (
            0,
            BridgeError::InvalidInput(format!("{name}: HDU {i} is out of range").into()),
        )
    })?;
    let mut st: c_int = 0;
    let mut hdutype: c_int = -1;
    // SAFETY: `h.0` is an open handle; out-pointers are valid.
    unsafe { sys::ffmahd(h.0, num, &mut hdutype, &mut st) };
    if st != 0 {
        return Err((st, cfitsio_fail(path, &format!("cannot read HDU {i}"), st)));
    }
    Ok(hdutype == 0)
}

/// BITPIX and the axes (NAXIS1, NAXIS2, … in the file's order) of the image HDU `i` the
/// handle is on, checked: NAXIS 0 to 999, no negative axis.
fn image_header(
    h: &Handle,
    path: &Path,
    i: usize,
) -> std::result::Result<(c_int, Vec<u64>), (c_int, BridgeError)> {
    const MAXDIM: usize = 999;
    let mut st: c_int = 0;
    let mut naxes = vec![0 as sys::LONGLONG; MAXDIM];
    let (mut bitpix, mut naxis): (c_int, c_int) = (0, 0);
    // SAFETY: `naxes` holds MAXDIM values, the most cfitsio writes when told maxaxis = MAXDIM.
    unsafe {
        sys::ffgiprll(
            h.0,
            MAXDIM as c_int,
            &mut bitpix,
            &mut naxis,
            naxes.as_mut_ptr(),
            &mut st,
        )
    };
    if st != 0 {
        return Err((
            st,
            cfitsio_fail(path, &format!("cannot read the header of HDU {i}"), st),
        ));
    }
    let fail = |msg: String| hdu_fail(path, i, msg);
    let naxis = usize::try_from(naxis)
        .ok()
        .filter(|&n| n <= MAXDIM)
        .ok_or_else(|| fail(format!("illegal NAXIS = {naxis} (must be 0 to 999)")))?;
    let axes = &naxes[..naxis];
    let mut dims = Vec::with_capacity(naxis);
    for (k, &a) in axes.iter().enumerate() {
        let a = u64::try_from(a).map_err(|_| {
            fail(format!(
                "illegal NAXIS{} = {a} (must not be negative)",
                k + 1
            ))
        })?;
        dims.push(a);
    }
    Ok((bitpix, dims))
}

/// Whether the `data_bytes` of data the header of HDU `i` declares (`bitpix`, `dims`) follow
/// it in the file of `file_len` bytes: an error for a truncated file or a corrupt header.
/// Tile-compressed images are exempt (their data is stored compressed).
fn check_data_in_file(
    h: &Handle,
    (path, i): (&Path, usize),
    (bitpix, dims): (c_int, &[u64]),
    data_bytes: u64,
    file_len: u64,
) -> std::result::Result<(), (c_int, BridgeError)> {
    let mut st: c_int = 0;
    // SAFETY: `h.0` is an open handle positioned on this HDU.
    let compressed = unsafe { sys::fits_is_compressed_image(h.0, &mut st) } != 0;
    if !compressed {
        let mut data_start: sys::LONGLONG = 0;
        // SAFETY: a valid out-pointer; cfitsio skips the null ones. The handle is on this HDU.
        unsafe {
            sys::ffghadll(
                h.0,
                std::ptr::null_mut(),
                &mut data_start,
                std::ptr::null_mut(),
                &mut st,
            )
        };
        if st != 0 {
            return Err((
                st,
                cfitsio_fail(path, &format!("cannot locate the data of HDU {i}"), st),
            ));
        }
        let data_start = u64::try_from(data_start).unwrap_or(u64::MAX);
        let available = file_len.saturating_sub(data_start);
        if data_bytes > available {
            return Err(hdu_fail(
                path,
                i,
                format!(
                    "the header declares {} with BITPIX = {bitpix}, i.e. {} of data, but only {} \
                     follow the header: the file is truncated or its header is corrupt (copy or \
                     export the file again)",
                    declared(dims),
                    format_bytes(data_bytes),
                    format_bytes(available),
                ),
            ));
        }
    }
    Ok(())
}

/// The error for an integer image whose pixels equal its `BLANK` (read as NaN by `ffgpv`): they
/// are undefined values, and used as numbers they would enter every statistic (as one NaN in a
/// float cube would, which `paco` refuses too).
fn blank_pixels(name: &str, i: usize, blank: i64, shape: &[usize], data: &[f64]) -> BridgeError {
    let n = data.iter().filter(|v| v.is_nan()).count();
    let first = data
        .iter()
        .position(|v| v.is_nan())
        .map_or(String::new(), |k| {
            // The position in C order, `[.., y, x]`.
            let mut idx = vec![0; shape.len()];
            let mut rest = k;
            for (d, &len) in idx.iter_mut().zip(shape).rev() {
                *d = rest % len.max(1);
                rest /= len.max(1);
            }
            let idx: Vec<String> = idx.iter().map(ToString::to_string).collect();
            format!(", the first at [{}]", idx.join(", "))
        });
    let (pixels, are) = if n == 1 {
        ("pixel is", "an undefined value")
    } else {
        ("pixels are", "undefined values")
    };
    BridgeError::InvalidInput(
        format!(
            "{name}: HDU {i}: {n} {pixels} BLANK ({blank}), {are}; replace them or mask them first \
         ({n} of {} pixels{first}; read as numbers they would enter every statistic, as a NaN \
         would)",
            data.len()
        )
        .into(),
    )
}

/// Read the first image HDU with data (the primary HDU, or the first image extension when the
/// primary is empty) as f64.
pub fn read_image(path: impl AsRef<Path>) -> Result<ArrayD<f64>> {
    read_image_hdu(path, None)
}

/// Read image HDU `hdu` (0 = primary), or the first image with data when `None`.
///
/// Every problem with the file (not FITS, truncated, a header declaring more data than the file
/// holds or than memory can take, a non-image HDU, an integer image with pixels equal to its
/// `BLANK`, i.e. undefined) is a typed error naming the file; nothing is
/// allocated before the header has been checked against the file's length and the host memory
/// budget.
pub fn read_image_hdu(path: impl AsRef<Path>, hdu: Option<usize>) -> Result<ArrayD<f64>> {
    read_image_hdu_with_budget(path, hdu, &Budget::current())
}

/// [`read_image_hdu`] under an explicit memory budget (tests simulate a small machine with it).
pub fn read_image_hdu_with_budget(
    path: impl AsRef<Path>,
    hdu: Option<usize>,
    budget: &Budget,
) -> Result<ArrayD<f64>> {
    let path = path.as_ref();
    let name = path.display().to_string();
    // Report missing/unreadable files as I/O errors, and check the FITS signature ourselves so a
    // non-FITS file gives a clear message rather than a cfitsio status code.
    let file_len = {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(|e| BridgeError::io(name.clone(), e))?;
        let meta = f.metadata().map_err(|e| BridgeError::io(name.clone(), e))?;
        if meta.is_dir() {
            return Err(BridgeError::InvalidInput(
                format!("{name}: is a folder, not a FITS file").into(),
            ));
        }
        let mut head = [0u8; 9];
        let mut n = 0;
        while n < head.len() {
            match f.read(&mut head[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BridgeError::io(name.clone(), e)),
            }
        }
        if n < 9 || &head != b"SIMPLE  =" {
            return Err(BridgeError::InvalidInput(
                format!("{name}: not a FITS file (it does not start with a SIMPLE card)").into(),
            ));
        }
        meta.len()
    };
    let h = open_disk(path)?;
    let read = |i: usize, img: ImageHdu| -> Result<ArrayD<f64>> {
        let n = usize::try_from(img.count).map_err(|_| {
            BridgeError::InvalidInput(
                format!("{name}: HDU {i} is too large for this machine").into(),
            )
        })?;
        let mut data: Vec<f64> = Vec::new();
        data.try_reserve_exact(n)
            .map_err(|_| BridgeError::TooLarge {
                what: format!("{name} (HDU {i}, {} pixels as float64)", img.count),
                requested: img.count * 8,
                limit: budget.limit.0,
                limited_by: "the allocator refused".into(),
                hint: "read it on a machine with more memory".into(),
            })?;
        data.resize(n, 0.0);
        let (mut st, mut anynul): (c_int, c_int) = (0, 0);
        // An integer image with BLANK: cfitsio compares each stored (raw, unscaled) value with
        // BLANK and writes `nulval` (NaN, which no scaled integer can be) for those that equal
        // it. Otherwise a null nulval: no null substitution, as in `fitsio`'s read_image.
        let mut nulval = f64::NAN;
        let nulval_ptr: *mut std::ffi::c_void = if img.blank.is_some() {
            (&raw mut nulval).cast()
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: `data` holds `n` f64 (TDOUBLE); `nulval_ptr` is null or points at one f64.
        unsafe {
            sys::ffgpv(
                h.0,
                sys::TDOUBLE as c_int,
                1,
                img.count as sys::LONGLONG,
                nulval_ptr,
                data.as_mut_ptr().cast(),
                &mut anynul,
                &mut st,
            )
        };
        if st != 0 {
            return Err(cfitsio_fail(
                path,
                &format!("cannot read the data of HDU {i}"),
                st,
            ));
        }
        if let Some(blank) = img.blank
            && anynul != 0
        {
            return Err(blank_pixels(&name, i, blank, &img.shape, &data));
        }
        ArrayD::from_shape_vec(IxDyn(&img.shape), data)
            .map_err(|e| fits_err(path, "image size does not match its header", e))
    };
    if let Some(i) = hdu {
        return match image_hdu(&h, path, i, file_len, budget) {
            Err((status::END_OF_FILE, _)) => Err(BridgeError::InvalidInput(
                format!("{name}: there is no HDU {i} (the file has fewer HDUs, or is truncated)")
                    .into(),
            )),
            Err((_, e)) => Err(e),
            Ok(None) => Err(BridgeError::InvalidInput(
                format!("{name}: HDU {i} is not an image").into(),
            )),
            Ok(Some(img)) if img.count == 0 => Err(BridgeError::InvalidInput(
                format!("{name}: HDU {i} has no data").into(),
            )),
            Ok(Some(img)) => read(i, img),
        };
    }
    for i in 0.. {
        match image_hdu(&h, path, i, file_len, budget) {
            // Past the last HDU.
            Err((status::END_OF_FILE, _)) if i > 0 => break,
            Err((_, e)) => return Err(e),
            Ok(Some(img)) if img.count > 0 => return read(i, img),
            Ok(_) => {}
        }
    }
    Err(BridgeError::InvalidInput(
        format!("{name}: no image HDU with data").into(),
    ))
}

/// Write `data` as a float64 (BITPIX = −64) primary image, replacing any existing file once
/// the new one is complete (written under a temporary name, [`super::staged`]).
pub fn write_image(path: impl AsRef<Path>, data: &ArrayD<f64>) -> Result<()> {
    let path = path.as_ref();
    if data.ndim() == 0 {
        return Err(BridgeError::invalid_argument(
            "data",
            "a FITS image needs at least one axis",
        ));
    }
    if path.to_str().is_none() {
        // fitsio panics on such paths.
        return Err(BridgeError::invalid_argument(
            "path",
            format!(
                "{}: FITS files can only be written to UTF-8 paths",
                path.display()
            ),
        ));
    }
    // written under a temporary name, in place only once complete (no partial image)
    // (messages name the final path)
    let staged = super::staged::Staged::reserve(path)?;
    let dims: Vec<usize> = data.shape().to_vec();
    let desc = ImageDescription {
        data_type: ImageType::Double,
        dimensions: &dims,
    };
    let mut f = FitsFile::create(staged.write_path())
        .with_custom_primary(&desc)
        .open()
        .map_err(|e| fitsio_err(path, "cannot create FITS file", e))?;
    let hdu = f
        .primary_hdu()
        .map_err(|e| fitsio_err(path, "no primary HDU", e))?;
    let flat: Vec<f64> = data.iter().copied().collect();
    hdu.write_image(&mut f, &flat)
        .map_err(|e| write_err(path, staged.write_path(), e))?;
    // closing flushes cfitsio's last buffers and reports no error: a file shorter than its
    // header block and data is a write that failed there (a disk that filled up)
    drop(f);
    let data_bytes = (flat.len() as u64 * 8).div_ceil(2880) * 2880;
    let written = std::fs::metadata(staged.write_path()).map_or(0, |m| m.len());
    if written < data_bytes + 2880 && !staged.write_path().eq(path) {
        return Err(write_err(
            path,
            staged.write_path(),
            fitsio::errors::Error::Message(format!(
                "the file has {written} bytes of the {} its image needs",
                data_bytes + 2880
            )),
        ));
    }
    staged.commit()
}

/// A failed FITS write in words: cfitsio says only "status 106" (a write error), so a small
/// probe write beside the file asks the file system why (a full disk, a quota, a read-only
/// file system: the operating system's message); cfitsio's status when the probe succeeds.
fn write_err(path: &Path, written: &Path, e: fitsio::errors::Error) -> BridgeError {
    let probe = written.with_extension("probe");
    let why = std::fs::File::create(&probe).and_then(|mut f| {
        use std::io::Write;
        f.write_all(&[0u8; 1 << 16])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&probe);
    match why {
        Err(io) => BridgeError::io(format!("{} (cannot write the image)", path.display()), io),
        Ok(()) => fitsio_err(path, "cannot write image", e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let dir = std::env::temp_dir().join(format!("ab-fits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.fits");
        let a = ArrayD::from_shape_fn(IxDyn(&[2, 3, 4]), |i| {
            (i[0] * 100 + i[1] * 10 + i[2]) as f64 + 0.5
        });
        let mut with_nan = a.clone();
        with_nan[[1, 2, 3]] = f64::NAN;
        write_image(&p, &with_nan).unwrap();
        let b = read_image(&p).unwrap();
        assert_eq!(b.shape(), &[2, 3, 4]);
        assert!(b[[1, 2, 3]].is_nan());
        assert_eq!(b[[1, 2, 2]], a[[1, 2, 2]]);
        let txt = dir.join("x.txt");
        std::fs::write(&txt, "hello, not fits").unwrap();
        assert!(matches!(
            read_image(&txt),
            Err(BridgeError::InvalidInput(_))
        ));
        assert!(matches!(
            read_image(dir.join("missing.fits")),
            Err(BridgeError::Io { .. })
        ));
        // an HDU number at its largest is out of range, not an overflow
        for hdu in [1 << 40, usize::MAX] {
            assert!(matches!(
                read_image_hdu(&p, Some(hdu)),
                Err(BridgeError::InvalidInput(_))
            ));
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn integer_bitpix_with_scaling() {
        let dir = std::env::temp_dir().join(format!("ab-fits-int-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("i16.fits");
        {
            let desc = ImageDescription {
                data_type: ImageType::Short,
                dimensions: &[2, 3],
            };
            let mut f = FitsFile::create(&p)
                .with_custom_primary(&desc)
                .open()
                .unwrap();
            let hdu = f.primary_hdu().unwrap();
            hdu.write_key(&mut f, "BSCALE", 2.0f64).unwrap();
            hdu.write_key(&mut f, "BZERO", 10.0f64).unwrap();
        }
        {
            // Reopen so cfitsio applies the scaling on write as well, then store raw -3..2.
            let mut f = FitsFile::edit(&p).unwrap();
            let hdu = f.primary_hdu().unwrap();
            let phys: Vec<f64> = (-3..3).map(|v| 10.0 + 2.0 * v as f64).collect();
            hdu.write_image(&mut f, &phys).unwrap();
        }
        let a = read_image(&p).unwrap();
        assert_eq!(a.shape(), &[2, 3]);
        let want: Vec<f64> = (-3..3).map(|v| 10.0 + 2.0 * v as f64).collect();
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), want);
        std::fs::remove_dir_all(&dir).ok();
    }
}
