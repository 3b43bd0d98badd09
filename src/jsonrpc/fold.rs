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

/// Whether `a` and `b` [`fold`] to the same name, built for neither. The ASCII each
/// starts with is compared byte by byte, letters and digits lowercased and everything
/// else skipped, which is what [`fold`] does to ASCII, so two different names (nearly
/// every comparison) part at their first kept byte; from the first non-ASCII character
/// of either, the rest of both go through [`folded`].
///
/// Inlined where it is asked, the first and last bytes answer most comparisons (a key
/// against the fields of its level, which it is not): an ASCII letter or digit is the
/// first character of its name's fold when it starts the name, and the last when it ends
/// it (a byte below 0x80 is a whole character in UTF-8), so two of them that differ but
/// for case part the folds. Names of one family share their first bytes
/// (`io.modelcontextprotocol/...`) far more often than their last.
#[inline]
pub(crate) fn folds_equal(a: &str, b: &str) -> bool {
    let parted = |p: Option<&u8>, q: Option<&u8>| {
        matches!((p, q), (Some(p), Some(q))
            if p.is_ascii_alphanumeric() && q.is_ascii_alphanumeric() && !p.eq_ignore_ascii_case(q))
    };
    let (x, y) = (a.as_bytes(), b.as_bytes());
    if parted(x.first(), y.first()) || parted(x.last(), y.last()) {
        return false;
    }
    folds_equal_past_first(a, b)
}

/// [`folds_equal`] once the first bytes did not part the names.
fn folds_equal_past_first(a: &str, b: &str) -> bool {
    /// The next byte at or after `at` that is not skipped ASCII (or the end).
    fn next_kept(s: &[u8], mut at: usize) -> usize {
        while at < s.len() && s[at].is_ascii() && !s[at].is_ascii_alphanumeric() {
            at += 1;
        }
        at
    }
    // The fold goes character by character, so a prefix both share folds the same on
    // both sides and only what follows it is compared (`io.modelcontextprotocol/...`
    // names share 24 bytes): cut at a character boundary.
    let mut shared = common_prefix(a.as_bytes(), b.as_bytes());
    while !a.is_char_boundary(shared) {
        shared -= 1;
    }
    let (a, b) = (&a[shared..], &b[shared..]);
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (next_kept(x, 0), next_kept(y, 0));
    loop {
        match (x.get(i), y.get(j)) {
            (None, None) => return true,
            (Some(p), Some(q)) if p.is_ascii() && q.is_ascii() => {
                if !p.eq_ignore_ascii_case(q) {
                    return false;
                }
                (i, j) = (next_kept(x, i + 1), next_kept(y, j + 1));
            }
            // One side ended and the other's next is ASCII kept: that byte is in one
            // fold only.
            (None, Some(q)) if q.is_ascii() => return false,
            (Some(p), None) if p.is_ascii() => return false,
            // A non-ASCII character on either side (a char boundary: only ASCII was
            // passed): what is left is compared by the full fold.
            _ => return folded(&a[i..]).eq(folded(&b[j..])),
        }
    }
}

/// How many bytes `x` and `y` start with in common: a word at a time, then bytes.
fn common_prefix(x: &[u8], y: &[u8]) -> usize {
    let word = |s: &[u8], at: usize| {
        s.get(at..at + 8)
            .map(|w| u64::from_ne_bytes(w.try_into().expect("eight bytes")))
    };
    let mut at = 0;
    while let (Some(p), Some(q)) = (word(x, at), word(y, at)) {
        if p != q {
            break;
        }
        at += 8;
    }
    while at < x.len() && at < y.len() && x[at] == y[at] {
        at += 1;
    }
    at
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
