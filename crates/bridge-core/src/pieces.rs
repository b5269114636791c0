//! A movie run piece by piece (chunks of a stream, batches of frames in memory), numbered in the
//! movie's frames: the one place that counts frames across pieces and puts the movie's frame
//! numbers into an error of a piece ([`crate::error::InputError::of_batch`]). The command line's
//! stream, the Python package's batches and `LogDetector::detect_stream` all walk a movie this
//! way.
//!
//! ```
//! use bridge_core::pieces::{Piece, pieces};
//! use bridge_core::{BridgeError, Result};
//!
//! // three chunks of a movie (2, 3 and 1 frames); the second has a bad frame 1 (its own count)
//! let chunks: Vec<Result<Vec<i32>>> = vec![Ok(vec![1, 2]), Ok(vec![3, -1, 5]), Ok(vec![6])];
//! let check = |c: &Vec<i32>| -> Result<usize> {
//!     match c.iter().position(|&v| v < 0) {
//!         Some(i) => Err(BridgeError::InvalidInput(
//!             bridge_core::error::InputError::in_frames(i..i + 1, "negative"),
//!         )),
//!         None => Ok(c.len()),
//!     }
//! };
//! let mut seen = Vec::new();
//! let mut err = None;
//! for piece in pieces(chunks, Vec::len) {
//!     let piece: Piece<Vec<i32>> = piece?;
//!     seen.push(piece.frames.clone());
//!     if let Err(e) = piece.errors(check(&piece.data)) {
//!         err = Some(e);
//!         break;
//!     }
//! }
//! assert_eq!(seen, vec![0..2, 2..5]);
//! // the movie's frame 3, not the chunk's frame 1
//! assert_eq!(err.unwrap().to_string(), "invalid input: in frames 3..4: negative");
//! # Ok::<(), BridgeError>(())
//! ```

use std::ops::Range;

use crate::{BridgeError, Result};

/// One piece of a movie: its data and the movie's numbers of its frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece<P> {
    /// The movie's numbers of the piece's frames.
    pub frames: Range<usize>,
    /// The piece.
    pub data: P,
    /// Whether errors name frames (not for a movie of one frame: an image, [`Pieces::of`]).
    numbered: bool,
}

impl<P> Piece<P> {
    /// `r` with an input error in the movie's frame numbers: one that names frames of the piece
    /// (counted from its first) has them shifted; one that names none is about the whole
    /// piece. An image (a movie of one frame, [`Pieces::of`]) keeps its errors as they are.
    /// Other errors are unchanged.
    pub fn errors<R>(&self, r: Result<R>) -> Result<R> {
        match r {
            Err(e) if self.numbered => Err(e.of_batch(self.frames.clone())),
            r => r,
        }
    }

    /// The piece's first frame as a `u32` frame number (CSV rows, particles), or an error for a
    /// movie past 2³² frames.
    pub fn first_frame_u32(&self) -> Result<u32> {
        // the last frame's number must fit (the first's, for a piece of no frame)
        let last = self.frames.end.saturating_sub(1).max(self.frames.start);
        u32::try_from(last)
            .map(|_| self.frames.start as u32)
            .map_err(|_| BridgeError::InvalidInput("a movie of more than 2^32 frames".into()))
    }
}

/// The pieces of `parts` numbered in the movie's frames (`frames_of` counts a piece's frames);
/// an error of the source itself (a chunk that could not be read) is passed on as it is. The
/// source is read one piece at a time, never ahead.
pub fn pieces<P, I, F>(parts: I, frames_of: F) -> Pieces<I::IntoIter, F>
where
    I: IntoIterator<Item = Result<P>>,
    F: Fn(&P) -> usize,
{
    Pieces {
        inner: parts.into_iter(),
        frames_of,
        next: 0,
        image: false,
    }
}

/// The iterator of [`pieces`].
pub struct Pieces<I, F> {
    inner: I,
    frames_of: F,
    next: usize,
    image: bool,
}

impl<I, F> Pieces<I, F> {
    /// The same pieces of a movie of `total` frames when known: a movie of one frame is an
    /// image, whose errors name no frame ([`Piece::errors`]).
    pub fn of(mut self, total: Option<usize>) -> Self {
        self.image = total == Some(1);
        self
    }
}

impl<P, I, F> Iterator for Pieces<I, F>
where
    I: Iterator<Item = Result<P>>,
    F: Fn(&P) -> usize,
{
    type Item = Result<Piece<P>>;

    fn next(&mut self) -> Option<Self::Item> {
        let data = match self.inner.next()? {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        let n = (self.frames_of)(&data);
        let start = self.next;
        let Some(end) = start.checked_add(n) else {
            return Some(Err(BridgeError::InvalidInput(
                "a movie of more than 2^64 frames".into(),
            )));
        };
        self.next = end;
        Some(Ok(Piece {
            frames: start..end,
            data,
            numbered: !self.image,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::InputError;

    fn bad(frames: Option<Range<usize>>) -> BridgeError {
        BridgeError::InvalidInput(match frames {
            Some(r) => InputError::in_frames(r, "bad"),
            None => "bad".to_owned().into(),
        })
    }

    /// Frames are counted across pieces; errors are numbered in the movie (the frames they name
    /// shifted, the whole piece where they name none), except for a lone image; other errors
    /// and the source's own errors pass unchanged.
    #[test]
    fn pieces_number_frames_and_errors() {
        let parts: Vec<Result<usize>> = vec![Ok(3), Ok(0), Ok(2), Err(bad(None)), Ok(1)];
        let got: Vec<_> = pieces(parts, |&n| n).collect();
        let ok: Vec<Range<usize>> = got
            .iter()
            .filter_map(|p| p.as_ref().ok().map(|p| p.frames.clone()))
            .collect();
        assert_eq!(ok, vec![0..3, 3..3, 3..5, 5..6]);
        assert!(got[3].is_err());
        let p = got[2].as_ref().unwrap();
        let msg = |r: Result<()>| r.unwrap_err().to_string();
        assert_eq!(
            msg(p.errors(Err(bad(Some(1..2))))),
            "invalid input: in frames 4..5: bad"
        );
        assert_eq!(
            msg(p.errors(Err(bad(None)))),
            "invalid input: in frames 3..5: bad"
        );
        let other = BridgeError::Unsupported("no".into());
        assert_eq!(msg(p.errors(Err(other))), "unsupported: no");
        assert_eq!(p.first_frame_u32().unwrap(), 3);
        // one image (a movie of one frame): its errors name no frame
        let one: Vec<_> = pieces(vec![Ok::<usize, BridgeError>(1)], |&n| n)
            .of(Some(1))
            .collect();
        let one = one[0].as_ref().unwrap();
        assert_eq!(msg(one.errors(Err(bad(None)))), "invalid input: bad");
        // a one-frame piece of a longer (or unknown) movie is the movie's frame
        for total in [None, Some(2)] {
            let two: Vec<_> = pieces(vec![Ok::<usize, BridgeError>(1), Ok(1)], |&n| n)
                .of(total)
                .collect();
            let first = two[0].as_ref().unwrap();
            let e = msg(first.errors(Err(bad(None))));
            assert_eq!(e, "invalid input: in frames 0..1: bad");
        }
        // frame numbers up to 2^32 - 1 fit a u32, not past
        let piece = |frames: Range<usize>| Piece {
            frames,
            data: (),
            numbered: true,
        };
        assert_eq!(
            piece((1 << 32) - 2..1 << 32).first_frame_u32().unwrap(),
            u32::MAX - 1
        );
        assert!(
            piece((1 << 32) - 1..(1 << 32) + 1)
                .first_frame_u32()
                .is_err()
        );
        assert!(piece(1 << 32..1 << 32).first_frame_u32().is_err());
    }
}
