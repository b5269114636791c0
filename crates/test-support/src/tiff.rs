//! A TIFF writer for tests: files laid out as ImageJ writes them, byte by byte (so that the
//! readers' handling of ImageJ's descriptions and one-IFD stacks is tested on exact layouts).

/// A TIFF laid out as ImageJ writes one: `description` (an ImageDescription, NUL added) and the
/// `frames` (raw bytes in the file's byte order, `frame` bytes each) one after the other, then
/// either one IFD whose strip is the first frame (`ifds == 1`, ImageJ's layout past 4 GB) or
/// one IFD per frame, the description on the first.
#[allow(clippy::too_many_arguments)]
pub fn imagej_tiff(
    big_endian: bool,
    w: u32,
    h: u32,
    bits: u16,
    format: u16,
    compression: u16,
    description: &str,
    data: &[u8],
    ifds: usize,
) -> Vec<u8> {
    let u16b = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u32b = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let mut b: Vec<u8> = if big_endian {
        b"MM\x00\x2a".to_vec()
    } else {
        b"II\x2a\x00".to_vec()
    };
    let mut desc = description.as_bytes().to_vec();
    desc.push(0);
    if desc.len() % 2 == 1 {
        desc.push(0);
    }
    let desc_at = 8u32;
    let data_at = desc_at + desc.len() as u32;
    let frame = w * h * u32::from(bits) / 8;
    let first_ifd = data_at + data.len() as u32;
    b.extend_from_slice(&u32b(first_ifd));
    b.extend_from_slice(&desc);
    b.extend_from_slice(data);
    let short = |v: u16| {
        let mut f = [0u8; 4];
        f[..2].copy_from_slice(&u16b(v));
        f
    };
    for k in 0..ifds {
        let mut entries: Vec<(u16, u16, u32, [u8; 4])> = vec![
            (256, 4, 1, u32b(w)),
            (257, 4, 1, u32b(h)),
            (258, 3, 1, short(bits)),
            (259, 3, 1, short(compression)),
            (262, 3, 1, short(1)),
        ];
        if k == 0 {
            entries.push((270, 2, desc.len() as u32, u32b(desc_at)));
        }
        entries.extend([
            (273, 4, 1, u32b(data_at + k as u32 * frame)),
            (277, 3, 1, short(1)),
            (278, 4, 1, u32b(h)),
            (279, 4, 1, u32b(frame)),
            (339, 3, 1, short(format)),
        ]);
        let here = b.len() as u32;
        let len = 2 + 12 * entries.len() as u32 + 4;
        b.extend_from_slice(&u16b(entries.len() as u16));
        for (tag, ty, count, value) in entries {
            b.extend_from_slice(&u16b(tag));
            b.extend_from_slice(&u16b(ty));
            b.extend_from_slice(&u32b(count));
            b.extend_from_slice(&value);
        }
        let next = if k + 1 < ifds { here + len } else { 0 };
        b.extend_from_slice(&u32b(next));
    }
    b
}
