//! The format of `admin.token_file`: one secret of at least 16 bytes, surrounding
//! whitespace trimmed. The configuration checks it; the admin listener loads and
//! reloads it through the same parser.
//!
//! Invariant: no message contains the secret, and the secret is zeroed when dropped.

use std::path::Path;
use zeroize::Zeroizing;

/// The shortest admin secret accepted.
const MIN_TOKEN_BYTES: usize = 16;

/// Read `admin.token_file`: one secret, surrounding whitespace trimmed. The message
/// never contains the secret.
pub fn read_token(path: &Path) -> Result<Zeroizing<String>, String> {
    let bytes = std::fs::read(path)
        .map(Zeroizing::new)
        .map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    parse_token(&bytes, path)
}

/// The secret in `bytes`, as read from `path` (named in the message, which never
/// contains the secret).
pub fn parse_token(bytes: &[u8], path: &Path) -> Result<Zeroizing<String>, String> {
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
