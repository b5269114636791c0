#!/usr/bin/env python3
"""Write the seed corpus of every fuzz target (standard library only; run from anywhere).

The seeds are small valid files of each format plus the hostile cases that crashed, aborted or
hung the readers before (issue #13): a FITS header declaring huge axes, a 69-byte PNG declaring
100000x100000 pixels, a TIFF whose pages share one deflate strip that expands to gigabytes,
CSV frames beyond 2^53, and the absurd command-line flags. `cargo fuzz` adds what it finds to
the same folders; the whole corpus is committed and CI replays it (scripts/fuzz.sh replay).
"""

import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- npy
def npy(descr, shape, payload, version=1):
    shape_txt = "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_txt)
    pre = 10 if version == 1 else 12
    pad = (64 - (pre + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(header)) + header.encode() + payload


px = bytes((i * 37) % 251 for i in range(2 * 8 * 8))
put("npy", "u1-2x8x8", npy("|u1", (2, 8, 8), px))
put("npy", "u2-be", npy(">u2", (1, 4, 4), bytes(range(32))))
put("npy", "f4-v2", npy("<f4", (4, 4), struct.pack("<16f", *[i * 0.5 for i in range(16)]), 2))
put("npy", "huge-shape", npy("<f8", (100000, 100000, 100000), b"\0" * 64))
put("npy", "overflow-shape", npy("<f8", (2**63 - 1, 2**63 - 1), b""))
put("npy", "truncated", npy("|u1", (2, 8, 8), px)[:-7])


# ---------------------------------------------------------------- FITS
def card(k, v):
    return ("%-8s= %20s" % (k, v)).ljust(80).encode()


def fits(bitpix, axes, data=b"", extra=()):
    cards = [card("SIMPLE", "T"), card("BITPIX", str(bitpix)), card("NAXIS", str(len(axes)))]
    cards += [card("NAXIS%d" % (i + 1), str(n)) for i, n in enumerate(axes)]
    cards += [card(k, v) for k, v in extra]
    cards.append(b"END".ljust(80))
    head = b"".join(cards)
    head += b" " * ((-len(head)) % 2880)
    return head + data + b"\0" * ((-len(data)) % 2880 if data else 0)


put("fits", "f64-8x8x3", fits(-64, (8, 8, 3), struct.pack(">192d", *[float(i % 13) for i in range(192)])))
put("fits", "i16-16x16", fits(16, (16, 16), struct.pack(">256h", *range(256))))
put("fits", "huge-axes", fits(-64, (100000, 100000, 100000)) + b"\0" * 2880)
put("fits", "max-axes", fits(8, (2**63 - 1, 2)) + b"\0" * 2880)
put("fits", "truncated", fits(-64, (64, 64, 2), b"\0" * 4000)[:6000])
# Issue #32: integer pixels equal to BLANK are undefined (refused); scaled, the raw value counts.
blank = [-32768 if i % 7 == 3 else i for i in range(64)]
put("fits", "i16-blank", fits(16, (8, 8), struct.pack(">64h", *blank), (("BLANK", "-32768"), ("BZERO", "32768"))))


# ---------------------------------------------------------------- PNG
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(w, h, depth, colour, raw):
    ihdr = struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


rows = b"".join(b"\0" + bytes((x * 16 + y) % 256 for x in range(16)) for y in range(16))
put("png", "grey8-16x16", png(16, 16, 8, 0, rows))
rows16 = b"".join(b"\0" + b"".join(struct.pack(">H", x * 1000 + y) for x in range(8)) for y in range(8))
put("png", "grey16-8x8", png(8, 8, 16, 0, rows16))
put("png", "ihdr-100000x100000", png(100000, 100000, 8, 0, b"\0"))
put("png", "rgb-4x4", png(4, 4, 8, 2, b"".join(b"\0" + bytes(range(12)) for _ in range(4))))


# ---------------------------------------------------------------- TIFF
def tiff_pages(pages, shared_strip=None):
    """Little-endian TIFF; pages = [(w, h, bits, sample_format, compression, strip_bytes)]."""
    out = bytearray(b"II*\0" + struct.pack("<I", 0))
    strips = []
    if shared_strip is not None:
        strips = [len(out)] * len(pages)
        out += shared_strip
    else:
        for p in pages:
            strips.append(len(out))
            out += p[5]
    first_ifd_at = 4
    for i, (w, h, bits, fmt, comp, data) in enumerate(pages):
        while len(out) % 2:
            out += b"\0"
        ifd = len(out)
        struct.pack_into("<I", out, first_ifd_at, ifd)
        n = len(shared_strip) if shared_strip is not None else len(data)
        entries = [
            (256, 4, 1, w), (257, 4, 1, h), (258, 3, 1, bits), (259, 3, 1, comp),
            (262, 3, 1, 1), (273, 4, 1, strips[i]), (277, 3, 1, 1), (278, 4, 1, h),
            (279, 4, 1, n), (339, 3, 1, fmt),
        ]
        out += struct.pack("<H", len(entries))
        for tag, typ, cnt, val in entries:
            out += struct.pack("<HHI", tag, typ, cnt) + (
                struct.pack("<HH", val, 0) if typ == 3 else struct.pack("<I", val)
            )
        first_ifd_at = len(out)
        out += struct.pack("<I", 0)
    return bytes(out)


put("tiff", "u8-2pages", tiff_pages([(8, 8, 8, 1, 1, bytes(range(64)))] * 2))
put("tiff", "u16-1page", tiff_pages([(4, 4, 16, 1, 1, struct.pack("<16H", *range(0, 1600, 100)))]))
put("tiff", "f32-1page", tiff_pages([(4, 4, 32, 3, 1, struct.pack("<16f", *[i / 3 for i in range(16)]))]))
put("tiff", "1bit", tiff_pages([(8, 8, 1, 1, 1, b"\xaa" * 8)]))
# Eight 30000x30000 u8 pages sharing one deflate strip of zeros (~0.9 MB expanding to 900 MB
# each): the decoder limit is per page, the reader's budget is per file. Kept smaller here
# (3000x3000) so the seed stays small; the structure is what matters.
bomb = zlib.compress(b"\0" * (3000 * 3000), 9)
put("tiff", "shared-deflate-strip", tiff_pages([(3000, 3000, 8, 1, 8, b"")] * 8, shared_strip=bomb))
put("tiff", "huge-dims", tiff_pages([(4000000000, 4000000000, 8, 1, 1, b"\0" * 16)]))


def tiff_imagej(w, h, bits, fmt, description, data):
    """Little-endian TIFF with one IFD whose ImageDescription is `description` (ImageJ's), its
    strip the first image at the start of `data` (ImageJ's layout for stacks past 4 GB: the
    other images follow it)."""
    desc = description.encode() + b"\0"
    out = bytearray(b"II*\0" + struct.pack("<I", 0))
    desc_at = len(out)
    out += desc
    while len(out) % 2:
        out += b"\0"
    strip = len(out)
    out += data
    while len(out) % 2:
        out += b"\0"
    struct.pack_into("<I", out, 4, len(out))
    entries = [
        (256, 4, 1, w), (257, 4, 1, h), (258, 3, 1, bits), (259, 3, 1, 1), (262, 3, 1, 1),
        (270, 2, len(desc), desc_at), (273, 4, 1, strip), (277, 3, 1, 1), (278, 4, 1, h),
        (279, 4, 1, w * h * bits // 8), (339, 3, 1, fmt),
    ]
    out += struct.pack("<H", len(entries))
    for tag, typ, cnt, val in entries:
        out += struct.pack("<HHI", tag, typ, cnt) + (
            struct.pack("<HH", val, 0) if typ == 3 else struct.pack("<I", val)
        )
    out += struct.pack("<I", 0)
    return bytes(out)


# Issue #32: ImageJ stacks in one IFD (read as every image), hyperstacks (refused), and a count
# far past the file's end (refused as truncated).
u16x4 = struct.pack("<256H", *range(0, 2560, 10))
put("tiff", "imagej-stack-1ifd", tiff_imagej(8, 8, 16, 1, "ImageJ=1.54f\nimages=4\nframes=4\n", u16x4))
put("tiff", "imagej-hyperstack", tiff_imagej(8, 8, 16, 1, "ImageJ=1.54f\nimages=4\nchannels=2\nframes=2\n", u16x4))
put("tiff", "imagej-images-huge", tiff_imagej(8, 8, 16, 1, "ImageJ=1.54f\nimages=1099511627776\n", u16x4))


# ---------------------------------------------------------------- CSV
csvs = {
    "plain": b"frame,y,x\n0,1,1\n1,1.5,1.2\n2,2,1.4\n",
    "bom-crlf-quotes": b'\xef\xbb\xbf"frame","y","x","note"\r\n0,1,1,"a, b"\r\n\r\n1,1.5,1.2,"say ""hi"""\r\n',
    "huge-frames": b"frame,y,x\n9223372036854775808,1,1\n1e300,2,2\n-9223372036854775808,3,3\n",
    "gap": b"frame,y,x\n0,1,1\n1000000000,1,1\n",
    "ragged": b"frame,y,x\n0,1\n1,2,3,4\n",
    "nan": b"frame,y,x\nnan,1,1\n0,inf,1\n",
}
for k, v in csvs.items():
    put("csv", k, v)


# ---------------------------------------------------------------- command lines
def args(*a):
    return "\0".join(a).encode()


cli = {
    "num-sigma": args("detect", "m.npy", "-o", "x.csv", "--num-sigma", "100000"),
    "num-sigma-max": args("detect", "m.npy", "-o", "x.csv", "--num-sigma", "18446744073709551615"),
    "radius": args("paco", "--cube", "c", "--angles", "a", "--psf", "p", "-o", "o", "--radius", "9223372036854775808"),
    "sizes": args("bench", "transfer", "--sizes-mb", "1000000"),
    "bench-detect": args("bench", "detect", "--frames", "100000000", "--particles", "100000000"),
    "track": args("track", "d.csv", "-o", "t.csv", "--search-range", "5", "--memory", "18446744073709551615"),
    "device": args("--quiet", "detect", "m.npy", "-o", "x.csv", "--device", "cuda:99999999999999999999"),
    "json": args("devices", "--json", "-q"),
    "paco-enums": args("paco", "--cube", "c", "--angles", "a", "--psf", "p", "-o", "o", "--mode", "vip",
                       "--stats-strategy", "full", "--subpixel-method", "table:1024", "--center", "-1e308,1e308"),
}
for k, v in cli.items():
    put("cli", k, v)
print("seeds written under", os.path.join(HERE, "corpus"))
