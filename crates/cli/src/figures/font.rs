//! The 3×5 pixel font of the figures: one bitmap per character (`glyph`, drawn by
//! [`Canvas::text`](super::Canvas::text)) and the width of a string ([`text_width`]).

/// 3×5 bitmap glyphs (3 bits per row, most significant bit on the left). Letters are
/// upper case (lower case is drawn the same); `S` and `O` differ from `5` and `0`.
pub(super) fn glyph(c: char) -> [u8; 5] {
    match c.to_ascii_lowercase() {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 1, 1],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        '-' => [0, 0, 7, 0, 0],
        '+' => [0, 2, 7, 2, 0],
        '.' => [0, 0, 0, 0, 2],
        ',' => [0, 0, 0, 2, 4],
        '/' => [1, 1, 2, 4, 4],
        ':' => [0, 2, 0, 2, 0],
        '=' => [0, 7, 0, 7, 0],
        '(' => [1, 2, 2, 2, 1],
        ')' => [4, 2, 2, 2, 4],
        '_' => [0, 0, 0, 0, 7],
        'a' => [2, 5, 7, 5, 5],
        'b' => [6, 5, 6, 5, 6],
        'c' => [3, 4, 4, 4, 3],
        'd' => [6, 5, 5, 5, 6],
        'e' => [7, 4, 7, 4, 7],
        'f' => [7, 4, 7, 4, 4],
        'g' => [3, 4, 5, 5, 3],
        'h' => [5, 5, 7, 5, 5],
        'i' => [7, 2, 2, 2, 7],
        'j' => [1, 1, 1, 5, 2],
        'k' => [5, 5, 6, 5, 5],
        'l' => [4, 4, 4, 4, 7],
        'm' => [5, 7, 7, 5, 5],
        'n' => [6, 5, 5, 5, 5],
        'o' => [2, 5, 5, 5, 2],
        'p' => [6, 5, 6, 4, 4],
        'q' => [2, 5, 5, 6, 3],
        'r' => [6, 5, 6, 5, 5],
        's' => [3, 4, 2, 1, 6],
        't' => [7, 2, 2, 2, 2],
        'u' => [5, 5, 5, 5, 7],
        'v' => [5, 5, 5, 5, 2],
        'w' => [5, 5, 7, 7, 5],
        'x' => [5, 5, 2, 5, 5],
        'y' => [5, 5, 2, 2, 2],
        'z' => [7, 1, 2, 4, 7],
        _ => [0, 0, 0, 0, 0],
    }
}

/// Width in canvas pixels of `chars` characters of [`Canvas::text`](super::Canvas::text) at
/// `scale` (0 for none).
pub fn text_width(chars: usize, scale: usize) -> usize {
    (chars * 4).saturating_sub(1) * scale.max(1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn glyphs_are_distinct() {
        let chars: Vec<char> = ('0'..='9')
            .chain('A'..='Z')
            .chain("-+.,/:=()_".chars())
            .collect();
        for (i, &a) in chars.iter().enumerate() {
            assert_ne!(glyph(a), [0; 5], "{a:?} is blank");
            assert_eq!(glyph(a), glyph(a.to_ascii_lowercase()));
            for &b in &chars[i + 1..] {
                assert_ne!(glyph(a), glyph(b), "{a:?} and {b:?} look the same");
            }
        }
    }
}
