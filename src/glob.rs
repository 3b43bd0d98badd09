//! Name and URI patterns, on the ground floor: the single-use lists, the handle kinds
//! and the idempotent tools all match targets the same way.
//!
//! Invariant: `*` is the only wildcard (any run of characters, none included); every
//! other character matches itself.

/// `*` matches any run of characters (including none); everything else, `?` and `[`
/// included, is literal, since resource URIs carry both. Written out rather than taken
/// from a glob crate because those give `?`, `[...]` and `/` meanings a URI must not get.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No `*`: exact.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_star_only() {
        for (pattern, text) in [
            ("pay", "pay"),
            ("approve_*", "approve_payment"),
            ("*", ""),
            ("*_payment", "approve_payment"),
            ("a*b*c", "aXbYc"),
            ("a*b*c", "abc"),
            ("file:///secrets/*", "file:///secrets/a/b"),
            ("config://x?y", "config://x?y"),
        ] {
            assert!(glob_match(pattern, text), "{pattern} {text}");
        }
        for (pattern, text) in [
            ("pay", "payment"),
            ("pay", "Pay"),
            ("approve_*", "approve"),
            ("a*b*c", "acb"),
            ("*_x", "_"),
            ("config://x?y", "config://xzy"),
            ("ab*ba", "aba"),
        ] {
            assert!(!glob_match(pattern, text), "{pattern} {text}");
        }
    }
}
