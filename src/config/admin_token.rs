//! The format of `admin.token_file`: one secret of at least 16 bytes, surrounding
//! whitespace trimmed. Start-up (`app::files`, `check-config` too) reads and checks the
//! file; the admin listener loads and reloads it through the same parser.
//!
//! Invariant: no message contains the secret, and the secret is zeroed when dropped.

use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// The shortest admin secret accepted.
const MIN_TOKEN_BYTES: usize = 16;

/// Why a token file holds no usable secret; it names the file, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TokenError {
    #[error("{} is not UTF-8", .0.display())]
    NotUtf8(PathBuf),
    #[error("{} must hold a secret of at least {MIN_TOKEN_BYTES} bytes", .0.display())]
    TooShort(PathBuf),
}

/// The secret in `bytes`, as read from `path`.
pub(crate) fn parse_token(bytes: &[u8], path: &Path) -> Result<Zeroizing<String>, TokenError> {
    let text = std::str::from_utf8(bytes).map_err(|_| TokenError::NotUtf8(path.to_owned()))?;
    let token = Zeroizing::new(text.trim().to_owned());
    if token.len() < MIN_TOKEN_BYTES {
        return Err(TokenError::TooShort(path.to_owned()));
    }
    Ok(token)
}
