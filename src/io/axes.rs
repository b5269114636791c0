//! The axes a TIFF stack declares (ImageJ's `channels`/`slices`/`frames`, or OME-XML's `SizeC`,
//! `SizeZ`, `SizeT` and `DimensionOrder`): how its planes group into volumes. The command line's
//! `detect --axes auto` reads z-stacks by them.

use std::io::BufReader;
use std::path::Path;

use bridge_core::{BridgeError, Result};
use tiff::decoder::Decoder;
use tiff::tags::Tag;

/// What the ImageDescription of a file written by ImageJ declares (its first line is
/// `ImageJ=…`); a key that is absent (or not a whole number) counts as 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageJ {
    /// `images=`: the planes of the stack, `channels · slices · frames`.
    pub(crate) images: u64,
    /// `channels=`.
    pub(crate) channels: u64,
    /// `slices=` (z planes).
    pub(crate) slices: u64,
    /// `frames=` (time points).
    pub(crate) frames: u64,
}

impl ImageJ {
    /// Parse an ImageDescription; `None` when it was not written by ImageJ.
    pub(crate) fn parse(description: &str) -> Option<Self> {
        let text = description.split('\0').next().unwrap_or("");
        let mut lines = text.lines();
        if !lines.next()?.trim_start().starts_with("ImageJ=") {
            return None;
        }
        let mut ij = ImageJ {
            images: 1,
            channels: 1,
            slices: 1,
            frames: 1,
        };
        for line in lines {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let Ok(v) = value.trim().parse::<u64>() else {
                continue;
            };
            match key.trim() {
                "images" => ij.images = v,
                "channels" => ij.channels = v,
                "slices" => ij.slices = v,
                "frames" => ij.frames = v,
                _ => {}
            }
        }
        Some(ij)
    }

    /// Refuse a hyperstack whose planes are not all time points: several channels, or several
    /// slices at several time points. (A stack of slices only is a movie of its planes.)
    pub(crate) fn check_hyperstack(&self, path: &str) -> Result<()> {
        let ImageJ {
            channels: c,
            slices: z,
            frames: t,
            ..
        } = *self;
        let hint = if c > 1 {
            "detection takes one channel; split the channels first (ImageJ: Image > Color > Split \
             Channels) and read one of them"
        } else if z > 1 && t > 1 {
            "detection takes one image per time point; keep one slice or project the slices \
             first (ImageJ: Image > Stacks > Z Project)"
        } else {
            return Ok(());
        };
        Err(BridgeError::Unsupported(format!(
            "{path}: an ImageJ hyperstack with channels={c}, slices={z}, frames={t}: {hint} \
             (its planes are not all time points, so they cannot be read as the frames of a \
             movie)"
        )))
    }
}

impl ImageJ {
    /// The axes it declares.
    pub(crate) fn axes(&self) -> StackAxes {
        StackAxes {
            channels: self.channels,
            slices: self.slices,
            frames: self.frames,
            source: "ImageJ",
        }
    }
}

/// The axes a TIFF stack declares (ImageJ's `channels`/`slices`/`frames`, or OME-XML's `SizeC`,
/// `SizeZ`, `SizeT`): how its planes group into volumes. A count that is not declared is 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackAxes {
    /// Channels (detection takes one).
    pub channels: u64,
    /// Z planes of each volume.
    pub slices: u64,
    /// Time points.
    pub frames: u64,
    /// Who declared them: `"ImageJ"` or `"OME"`.
    pub source: &'static str,
}

impl StackAxes {
    /// Whether the file says, unambiguously, that it holds volumes: OME-XML with `SizeZ` > 1,
    /// or an ImageJ hyperstack of slices at several time points. An ImageJ stack of slices
    /// only is *not*: ImageJ saves any plain stack, a time-lapse included, as `slices=N`, so
    /// such a file stays a movie of its planes (`--axes zyx` reads it as one volume).
    pub fn is_volumes(&self) -> bool {
        match self.source {
            "OME" => self.slices > 1,
            _ => self.slices > 1 && self.frames > 1,
        }
    }
}

/// The value of attribute `name` of the first `<Pixels …>` element of an OME-XML text.
fn ome_attribute<'a>(pixels: &'a str, name: &str) -> Option<&'a str> {
    let at = pixels.find(&format!(" {name}=\""))? + name.len() + 3;
    let rest = &pixels[at..];
    Some(&rest[..rest.find('"')?])
}

/// The axes an OME-XML description declares (`None` when it is not OME-XML). Planes whose
/// time varies faster than z (`DimensionOrder` `XYTZC`, `XYCTZ`, `XYTCZ`) do not group into
/// volumes of consecutive pages: refused, named.
fn ome_axes(description: &str, path: &str) -> Option<Result<StackAxes>> {
    let start = description.find("<OME")?;
    let pixels = &description[start..];
    let pixels = &pixels[pixels.find("<Pixels")?..];
    let pixels = &pixels[..pixels.find('>').unwrap_or(pixels.len())];
    let size = |k: &str| {
        ome_attribute(pixels, k)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(1)
    };
    let axes = StackAxes {
        channels: size("SizeC"),
        slices: size("SizeZ"),
        frames: size("SizeT"),
        source: "OME",
    };
    let order = ome_attribute(pixels, "DimensionOrder").unwrap_or("XYZCT");
    let (z, t) = (order.find('Z'), order.find('T'));
    if axes.slices > 1 && axes.frames > 1 && matches!((z, t), (Some(z), Some(t)) if t < z) {
        return Some(Err(BridgeError::Unsupported(format!(
            "{path}: an OME-TIFF with DimensionOrder={order} (time varies faster than z): its              volumes are not consecutive pages; save it with DimensionOrder XYZCT"
        ))));
    }
    Some(Ok(axes))
}

/// The axes `path` (a TIFF) declares in its first ImageDescription, ImageJ's or OME-XML's
/// (the first 1 MiB of it is read); `None` when it declares none.
pub fn stack_axes(path: &Path) -> Result<Option<StackAxes>> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| BridgeError::io(name.clone(), e))?;
    let mut dec = Decoder::new(BufReader::new(f)).map_err(|e| {
        BridgeError::InvalidInput(format!("{name}: cannot decode TIFF: {e}").into())
    })?;
    let mut buf = vec![0u8; 1 << 20];
    let Some(n) = dec
        .image_ifd()
        .find_tag_bytes(Tag::ImageDescription, &mut buf, 0)
        .ok()
        .flatten()
    else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&buf[..n.min(buf.len())]);
    if let Some(ij) = ImageJ::parse(&text) {
        return Ok(Some(ij.axes()));
    }
    ome_axes(&text, &name).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ome_axes_and_orders() {
        let xml = |order: &str| {
            format!(
                "<?xml version=\"1.0\"?><OME xmlns=\"x\"><Image ID=\"Image:0\"><Pixels \
                 DimensionOrder=\"{order}\" ID=\"Pixels:0\" SizeC=\"1\" SizeT=\"4\" \
                 SizeX=\"64\" SizeY=\"32\" SizeZ=\"7\" Type=\"uint16\"></Pixels></Image></OME>"
            )
        };
        let a = ome_axes(&xml("XYZCT"), "f.ome.tif").unwrap().unwrap();
        assert_eq!((a.channels, a.slices, a.frames, a.source), (1, 7, 4, "OME"));
        assert!(a.is_volumes());
        let e = ome_axes(&xml("XYTZC"), "f.ome.tif").unwrap().unwrap_err();
        assert!(e.to_string().contains("time varies faster than z"), "{e}");
        assert!(ome_axes("ImageJ=1.54f\nslices=3\n", "f").is_none());
        // ImageJ: slices alone stay a movie; slices at several time points are volumes
        let ij = |z, t| {
            ImageJ {
                images: z * t,
                channels: 1,
                slices: z,
                frames: t,
            }
            .axes()
        };
        assert!(!ij(5, 1).is_volumes());
        assert!(ij(5, 2).is_volumes());
    }

    #[test]
    fn imagej_descriptions() {
        let ij = |images, channels, slices, frames| {
            Some(ImageJ {
                images,
                channels,
                slices,
                frames,
            })
        };
        assert_eq!(
            ImageJ::parse("ImageJ=1.54f\nimages=20\nchannels=2\nframes=10\nhyperstack=true\n\0x"),
            ij(20, 2, 1, 10)
        );
        assert_eq!(
            ImageJ::parse("ImageJ=1.11a\r\nimages=5\r\nslices=5\r\nunit=micron\r\n"),
            ij(5, 1, 5, 1)
        );
        // Absent or malformed values count as 1; other writers' descriptions are not ImageJ's.
        assert_eq!(
            ImageJ::parse("ImageJ=\nimages=x\nframes=-3"),
            ij(1, 1, 1, 1)
        );
        assert_eq!(ImageJ::parse("images=20\nframes=20"), None);
        assert_eq!(ImageJ::parse(""), None);
        let hyper = ImageJ::parse("ImageJ=1.54f\nimages=20\nchannels=2\nframes=10").unwrap();
        let e = hyper.check_hyperstack("h.tif").unwrap_err().to_string();
        assert!(
            e.contains(
                "h.tif: an ImageJ hyperstack with channels=2, slices=1, frames=10: detection \
                 takes one channel; split the channels first"
            ),
            "{e}"
        );
        for ok in ["slices=6", "frames=6", "slices=1\nframes=6\nchannels=1"] {
            let s = ImageJ::parse(&format!("ImageJ=1.54f\nimages=6\n{ok}")).unwrap();
            assert!(s.check_hyperstack("s.tif").is_ok(), "{ok}");
        }
    }
}
