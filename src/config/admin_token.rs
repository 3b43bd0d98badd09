//! The format of `admin.token_file`: one secret of at least 16 bytes, surrounding
//! whitespace trimmed. Start-up (`app::files`, `check-config` too) reads and checks the
//! file; the admin listener loads and reloads it through the same parser.
//!
//! Invariant: no message contains the secret, and the secret is zeroed when dropped.

use std::path::Path;
use zeroize::Zeroizing;

/// The shortest admin secret accepted.
const MIN_TOKEN_BYTES: usize = 16;

/// The secret in `bytes`, as read from `path` (named in the message, which never
/// contains the secret).
pub(crate) fn parse_token(bytes: &[u8], path: &Path) -> Result<Zeroizing<String>, String> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8", path.display()))?;
    let token = Zeroizing::new(text.trim().to_owned());
    if token.len() < MIN_TOKEN_BYTES {
        return Err(format!(
            "{} must hold a secret of at least {MIN_TOKEN_BYTES} bytes",
            path.display()
        ));
    }
    Ok(token)
}
