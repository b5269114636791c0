//! FITS images: read any image HDU (any BITPIX, BSCALE/BZERO applied) into an f64 array, write
//! f64 images. Built on `fitsio` (cfitsio compiled from source).
//!
//! Arrays are in C order: a FITS file with `NAXIS1 = W, NAXIS2 = H, NAXIS3 = T` becomes an array
//! of shape `(T, H, W)`, indexed `[t][y][x]`, so images keep the orientation of the file.

use std::path::Path;

use bridge_core::{BridgeError, Result};
use fitsio::FitsFile;
use fitsio::hdu::HduInfo;
use fitsio::images::{ImageDescription, ImageType};
use ndarray::{ArrayD, IxDyn};

fn fits_err(path: &Path, what: &str, e: impl std::fmt::Display) -> BridgeError {
    BridgeError::InvalidInput(format!("{}: {what}: {e}", path.display()))
}

/// Read the first image HDU with data (the primary HDU, or the first image extension when the
/// primary is empty) as f64.
pub fn read_image(path: impl AsRef<Path>) -> Result<ArrayD<f64>> {
    read_image_hdu(path, None)
}

/// Read image HDU `hdu` (0 = primary), or the first image with data when `None`.
pub fn read_image_hdu(path: impl AsRef<Path>, hdu: Option<usize>) -> Result<ArrayD<f64>> {
    let path = path.as_ref();
    // Report missing/unreadable files as I/O errors, and check the FITS signature ourselves so a
    // non-FITS file gives a clear message rather than a cfitsio status code.
    let mut head = [0u8; 9];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(path)
            .map_err(|e| BridgeError::io(path.display().to_string(), e))?;
        let n = f
            .read(&mut head)
            .map_err(|e| BridgeError::io(path.display().to_string(), e))?;
        if n < 9 || &head != b"SIMPLE  =" {
            return Err(BridgeError::InvalidInput(format!(
                "{}: not a FITS file (it does not start with a SIMPLE card)",
                path.display()
            )));
        }
    }
    let mut f = FitsFile::open(path).map_err(|e| fits_err(path, "cannot open FITS file", e))?;
    let n_hdus = f.iter().count();
    let candidates: Vec<usize> = match hdu {
        Some(i) => vec![i],
        None => (0..n_hdus).collect(),
    };
    for i in candidates {
        let h = f
            .hdu(i)
            .map_err(|e| fits_err(path, &format!("no HDU {i}"), e))?;
        let shape = match &h.info {
            HduInfo::ImageInfo { shape, .. } => shape.clone(),
            _ => {
                if hdu.is_some() {
                    return Err(BridgeError::InvalidInput(format!(
                        "{}: HDU {i} is not an image",
                        path.display()
                    )));
                }
                continue;
            }
        };
        if shape.is_empty() || shape.contains(&0) {
            if hdu.is_some() {
                return Err(BridgeError::InvalidInput(format!(
                    "{}: HDU {i} has no data",
                    path.display()
                )));
            }
            continue;
        }
        let data: Vec<f64> = h
            .read_image(&mut f)
            .map_err(|e| fits_err(path, "cannot read image data", e))?;
        return ArrayD::from_shape_vec(IxDyn(&shape), data)
            .map_err(|e| fits_err(path, "image size does not match its header", e));
    }
    Err(BridgeError::InvalidInput(format!(
        "{}: no image HDU with data",
        path.display()
    )))
}

/// Write `data` as a float64 (BITPIX = −64) primary image, replacing any existing file.
pub fn write_image(path: impl AsRef<Path>, data: &ArrayD<f64>) -> Result<()> {
    let path = path.as_ref();
    if data.ndim() == 0 {
        return Err(BridgeError::invalid_argument(
            "data",
            "a FITS image needs at least one axis",
        ));
    }
    if path.exists() {
        std::fs::remove_file(path).map_err(|e| BridgeError::io(path.display().to_string(), e))?;
    }
    let dims: Vec<usize> = data.shape().to_vec();
    let desc = ImageDescription {
        data_type: ImageType::Double,
        dimensions: &dims,
    };
    let mut f = FitsFile::create(path)
        .with_custom_primary(&desc)
        .open()
        .map_err(|e| fits_err(path, "cannot create FITS file", e))?;
    let hdu = f
        .primary_hdu()
        .map_err(|e| fits_err(path, "no primary HDU", e))?;
    let flat: Vec<f64> = data.iter().copied().collect();
    hdu.write_image(&mut f, &flat)
        .map_err(|e| fits_err(path, "cannot write image", e))?;
    Ok(())
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
