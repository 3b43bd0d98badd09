//! What reaches a log line from a client.
//!
//! Invariant: client-supplied text (a JSON-RPC `method`, an HTTP method, a header) is
//! logged only through [`Clipped`]: escaped, so it cannot forge a line or a field, and cut
//! to [`MAX_LOGGED_CHARS`], so a 4 MB `method` costs the log ~200 bytes, not 4 MB.

use std::fmt;

/// The most characters of one client-supplied string that reach a log line.
pub const MAX_LOGGED_CHARS: usize = 128;

/// Client text as it may appear in a log: escaped and bounded.
#[derive(Clone, Copy)]
pub struct Clipped<'a>(pub &'a str);

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut chars = self.0.chars();
        let shown: String = chars.by_ref().take(MAX_LOGGED_CHARS).collect();
        write!(f, "{}", shown.escape_debug())?;
        let rest = chars.as_str().len();
        if rest > 0 {
            write!(f, "…(+{rest} bytes)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_text_is_escaped_and_bounded() {
        assert_eq!(Clipped("tools/call").to_string(), "tools/call");
        assert_eq!(
            Clipped("a\nlevel=error msg=\"forged\"").to_string(),
            "a\\nlevel=error msg=\\\"forged\\\""
        );
        let huge = "m".repeat(4 * 1024 * 1024);
        let logged = Clipped(&huge).to_string();
        assert!(logged.len() < 200, "{}", logged.len());
        assert!(logged.ends_with(&format!("…(+{} bytes)", huge.len() - MAX_LOGGED_CHARS)));
        assert_eq!(format!("{:?}", Clipped("x")), "\"x\"");
    }
}
