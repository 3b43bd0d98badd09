//! How the most lenient parsers compare names, for the look-alike rule: one fold, and
//! ways to compare two names by it without building either.
//!
//! Invariant: [`fold`], [`folded`] and [`folds_equal`] agree: two names are look-alikes
//! exactly when their folds are equal (a test holds `folds_equal` to `fold`).

/// A key as every lenient parser we know of, taken together, compares it: ASCII letters
/// and digits lowercased; every other ASCII character dropped (`request_state`, pydantic's
/// alias spelling); a non-ASCII character replaced by the ASCII letters of its Unicode case
/// mappings, full ones included. That covers Go's `encoding/json`, which matches field
/// names through `unicode.SimpleFold` (`ſ`~`s`, Kelvin sign `K`~`k`), Python's
/// `str.casefold` full folding (`ß`→`ss`, `ﬁ`→`fi`, `İ`→`i̇`), and per-character
/// upper/lower comparisons such as Java's `equalsIgnoreCase` (`ı`~`i`, `İ`~`i`).
/// Belt and braces: `check_reserved` refuses every non-ASCII key anyway; folding first
/// makes a look-alike count as the ambiguous key it is, and keeps the gate sound should
/// an ASCII-only level ever be relaxed.
pub fn fold(key: &str) -> String {
    folded(key).collect()
}

/// Whether `a` and `b` [`fold`] to the same name, built for neither: two ASCII names
/// (nearly every key) are compared byte by byte, their letters and digits lowercased and
/// everything else skipped, which is what [`fold`] does to ASCII; others go through
/// [`folded`].
pub(crate) fn folds_equal(a: &str, b: &str) -> bool {
    fn kept(s: &str) -> impl Iterator<Item = u8> + '_ {
        s.bytes()
            .filter(u8::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
    }
    if a.is_ascii() && b.is_ascii() {
        kept(a).eq(kept(b))
    } else {
        folded(a).eq(folded(b))
    }
}

/// [`fold`] character by character, without building the string.
fn folded(key: &str) -> impl Iterator<Item = char> + '_ {
    key.chars().flat_map(fold_char)
}

/// One character's part of [`fold`]: at most three ASCII letters (no case mapping of one
/// character is longer).
fn fold_char(c: char) -> impl Iterator<Item = char> {
    let mut out = ['\0'; 3];
    let mut len = 0;
    if c.is_ascii() {
        if c.is_ascii_alphanumeric() {
            out[0] = c.to_ascii_lowercase();
            len = 1;
        }
    } else {
        len = ascii_letters(c.to_lowercase(), &mut out);
        if len == 0 {
            len = ascii_letters(c.to_uppercase(), &mut out);
        }
    }
    out.into_iter().take(len)
}

/// The ASCII letters of a case mapping, lowercased, into `out`; how many.
fn ascii_letters(mapping: impl Iterator<Item = char>, out: &mut [char; 3]) -> usize {
    let mut len = 0;
    for letter in mapping.filter(char::is_ascii_alphabetic) {
        out[len] = letter.to_ascii_lowercase();
        len += 1;
    }
    len
}
