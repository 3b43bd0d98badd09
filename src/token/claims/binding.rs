//! What a token binds a request to ([`RequestBinding`]): the method, its target, the
//! digest of its arguments (the reference's canonical JSON) and the request path.

use super::super::canonical::{CanonicalError, python_spelled, write_python_json};
use crate::jsonrpc::{
    JsonView, LITE_ARENA_BYTES, LiteArena, ParamRead, ParamView, Params, ParamsField,
};
use base64_simd::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

const ARGS_DIGEST_LEN: usize = 16;
/// The digest's length in base64url.
const DIGEST_CHARS: usize = ARGS_DIGEST_LEN.div_ceil(3) * 4 - 2;
/// What absent (or falsy) arguments digest as.
const EMPTY_ARGUMENTS: &str = "{}";

/// Why a request cannot be bound the way the reference would bind it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    #[error("`params.{0}` is not a string")]
    NonStringTarget(&'static str),
    #[error("`params.arguments` cannot be digested: {0}")]
    Arguments(#[from] CanonicalError),
}

/// What a token is bound to on one request: the method, its target (`params.name`, or
/// `params.uri` for `resources/read`), the digest of `params.arguments` and, when the
/// caller knows it, the HTTP request path.
///
/// The four are one text (method ‖ target ‖ digest ‖ path), so a binding is one
/// allocation, not one per part.
///
/// The path (`u` claim) is compared byte for byte. Minting with a path writes the claim.
/// Opening: a token that carries the claim opens only under a binding with exactly that
/// path (a binding without one refuses it), so a token minted on `/a` does not open on
/// `/b` when one upstream serves several MCP servers or tenants under different paths. A
/// token without the claim still opens under a binding with a path. That is safe: such a
/// token comes from the reference SDK, which cannot express paths, or from a version of
/// ours that did not write them, and it is held to everything it does carry, including
/// the audience that binds it to this service. Stripping the claim from one of our tokens
/// is not possible: the claims are authenticated.
#[derive(Clone, PartialEq, Eq)]
pub struct RequestBinding {
    text: String,
    target_at: usize,
    digest_at: usize,
    /// Where the path starts (it runs to the end), when the binding has one.
    path_at: Option<usize>,
}

impl RequestBinding {
    /// A binding of the given parts, as they are.
    pub fn new(method: &str, target: &str, args_digest: &str, path: Option<&str>) -> Self {
        let digest = |text: &mut String| {
            text.push_str(args_digest);
            Ok::<_, std::convert::Infallible>(())
        };
        let Ok(binding) = Self::assemble(method, target, args_digest.len(), digest, path);
        binding
    }

    /// The one text: `method`, `target`, what `digest` writes (given `room` for it, which
    /// it may use as scratch) and `path`.
    fn assemble<E>(
        method: &str,
        target: &str,
        room: usize,
        digest: impl FnOnce(&mut String) -> Result<(), E>,
        path: Option<&str>,
    ) -> Result<Self, E> {
        let size = method.len() + target.len() + room + path.map_or(0, str::len);
        let mut text = String::with_capacity(size);
        text.push_str(method);
        text.push_str(target);
        let digest_at = text.len();
        digest(&mut text)?;
        Ok(Self {
            target_at: method.len(),
            digest_at,
            path_at: None,
            text,
        }
        .with_path(path))
    }

    pub fn method(&self) -> &str {
        &self.text[..self.target_at]
    }

    pub fn target(&self) -> &str {
        &self.text[self.target_at..self.digest_at]
    }

    pub fn args_digest(&self) -> &str {
        &self.text[self.digest_at..self.path_at.unwrap_or(self.text.len())]
    }

    /// The request path, when the binding has one ([`RequestBinding::at_path`]).
    pub fn path(&self) -> Option<&str> {
        self.path_at.map(|at| &self.text[at..])
    }

    #[cfg(any(test, feature = "oracle"))]
    /// Bind a request as the reference's `_request_identity` does: a per-method allowlist,
    /// so a future wire field cannot silently join (or escape) the digest.
    pub fn of(method: &str, params: Option<&Map<String, Value>>) -> Result<Self, BindingError> {
        // The two members it reads: the method's target field
        // ([`crate::mcp::target_field`]) and `arguments`.
        let field = crate::mcp::target_field(method);
        let target = (params.and_then(|p| p.get(field))).map(Value::as_str);
        let arguments = params.and_then(|p| p.get("arguments"));
        Self::of_parts(method, target, arguments, 0, None)
    }

    /// The binding of a call as the gate scanned it: the target and the arguments read
    /// over the body's text while nobody edited them (no tree built), the members an
    /// edit left otherwise. The same binding as `RequestBinding::of` (the oracle) on the same
    /// call (the `gate` fuzz target compares the two).
    pub fn of_params(method: &str, params: &Params<'_>) -> Result<Self, BindingError> {
        let arena = LiteArena::with_capacity(LITE_ARENA_BYTES);
        Self::of_params_in(method, params, &arena, None)
    }

    /// [`RequestBinding::of_params`], its arguments read into `arena` (a caller reading
    /// more of the same body shares one), bound to `path` when one is given.
    pub(crate) fn of_params_in(
        method: &str,
        params: &Params<'_>,
        arena: &LiteArena,
        path: Option<&str>,
    ) -> Result<Self, BindingError> {
        let read = params.read(ParamsField::target(method));
        let target = match &read {
            None => None,
            Some(ParamRead::Text(text)) => Some(Some(&**text)),
            Some(ParamRead::Value(value)) => Some(value.as_str()),
            Some(ParamRead::Null | ParamRead::Other) => Some(None),
        };
        if !params.is_there(ParamsField::Arguments) {
            return Self::of_parts::<Value>(method, target, None, 0, path);
        }
        // Arguments that came as the reference writes them (compact, keys in order,
        // strings and integers in its spelling, as nearly every client sends a small
        // object) are digested as their text stands: nothing is read or written again.
        // An object, so never one that digests as `{}` unless it is `{}`.
        if let Some(args) = params.text(ParamsField::Arguments)
            && method != "resources/read"
            && args.starts_with('{')
            && python_spelled(args, true)
        {
            let target = target_text(method, target)?;
            let Ok(binding) = Self::assemble(
                method,
                target,
                DIGEST_CHARS,
                |text| {
                    push_digest_of(args, text);
                    Ok::<_, std::convert::Infallible>(())
                },
                path,
            );
            return Ok(binding);
        }
        let room = params.text_len(ParamsField::Arguments).unwrap_or(0);
        match params.view(ParamsField::Arguments, arena) {
            None => Self::of_parts::<Value>(method, target, None, 0, path),
            Some(ParamView::Text(args)) => Self::of_parts(method, target, Some(&args), room, path),
            Some(ParamView::Value(args)) => Self::of_parts(method, target, Some(args), room, path),
        }
    }

    /// `target`: absent, or there and a string (or not). `room`: about the length of the
    /// arguments' canonical text (their text as it came).
    fn of_parts<A: JsonView>(
        method: &str,
        target: Option<Option<&str>>,
        arguments: Option<&A>,
        room: usize,
        path: Option<&str>,
    ) -> Result<Self, BindingError> {
        let target = target_text(method, target)?;
        let arguments = arguments.filter(|args| method != "resources/read" && !python_falsy(*args));
        // Room for the arguments' canonical text too: it is written where the digest goes,
        // digested, and replaced by the digest. (A canonical text longer than the one that
        // came, with escapes, grows the buffer once.)
        let digest = |text: &mut String| push_args_digest(arguments, text);
        Ok(Self::assemble(
            method,
            target,
            room.max(DIGEST_CHARS),
            digest,
            path,
        )?)
    }

    /// The binding's digest when it is [`args_digest`] of `arguments` as they are (the
    /// arguments it was computed from, unchanged since), so a later reader of them
    /// (idempotency) takes it rather than serialise them again. `None` for the falsy
    /// values other than `{}`, which the binding reads as no arguments (as the reference
    /// does).
    pub(crate) fn digest_of_arguments(&self, arguments: Option<&Value>) -> Option<&str> {
        let as_is =
            arguments.is_none_or(|a| !python_falsy(a) || a.as_object().is_some_and(Map::is_empty));
        as_is.then_some(self.args_digest())
    }

    /// Also bind the request path: the HTTP path exactly as received (no decoding or
    /// normalisation), so a retry must arrive on the very same path.
    #[must_use]
    pub fn at_path(self, path: &str) -> Self {
        self.with_path(Some(path))
    }

    /// Bound to `path` when one is given, to none otherwise.
    #[must_use]
    pub fn with_path(mut self, path: Option<&str>) -> Self {
        self.text.truncate(self.path_at.unwrap_or(self.text.len()));
        self.path_at = path.map(|path| {
            let at = self.text.len();
            self.text.push_str(path);
            at
        });
        self
    }
}

impl std::fmt::Debug for RequestBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBinding")
            .field("method", &self.method())
            .field("target", &self.target())
            .field("args_digest", &self.args_digest())
            .field("path", &self.path())
            .finish()
    }
}

/// A call's target as the binding holds it: `target` absent is none, there and a string
/// is that string.
fn target_text<'t>(method: &str, target: Option<Option<&'t str>>) -> Result<&'t str, BindingError> {
    match target {
        None => Ok(""),
        Some(Some(target)) => Ok(target),
        // Python would `str()` it ("None", "123"); no real client sends that, so refuse.
        Some(None) => Err(BindingError::NonStringTarget(crate::mcp::target_field(
            method,
        ))),
    }
}

/// `p.get("arguments") or {}`: every falsy Python value digests as an empty object.
fn python_falsy<V: JsonView>(value: &V) -> bool {
    if let Some(literal) = value.number_literal() {
        return literal.parse::<f64>().is_ok_and(|f| f == 0.0);
    }
    if let Some(text) = value.as_str() {
        return text.is_empty();
    }
    if let Some(items) = value.as_array() {
        return items.is_empty();
    }
    if let Some(mut members) = value.entries() {
        return members.next().is_none();
    }
    // `null` or `false`.
    value.as_bool() != Some(true)
}

/// base64url(SHA-256(canonical JSON)[..16]) of the arguments, `{}` when absent.
pub fn args_digest<V: JsonView>(arguments: Option<&V>) -> Result<String, CanonicalError> {
    let mut digest = String::new();
    push_args_digest(arguments, &mut digest)?;
    Ok(digest)
}

/// [`args_digest`] appended to `out`, the canonical text written where the digest goes
/// (no buffer of its own).
fn push_args_digest<V: JsonView>(
    arguments: Option<&V>,
    out: &mut String,
) -> Result<(), CanonicalError> {
    let at = out.len();
    match arguments {
        Some(args) => write_python_json(args, true, out)?,
        None => out.push_str(EMPTY_ARGUMENTS),
    }
    let digest = sha256(&out.as_bytes()[at..]);
    out.truncate(at);
    push_digest(digest.as_ref(), out);
    Ok(())
}

/// The digest of arguments whose canonical text is `canonical`, appended to `out`.
fn push_digest_of(canonical: &str, out: &mut String) {
    push_digest(sha256(canonical.as_bytes()).as_ref(), out);
}

/// SHA-256 of `bytes`, by aws-lc (see `Cargo.toml`: assembly where `sha2` has none).
fn sha256(bytes: &[u8]) -> aws_lc_rs::digest::Digest {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes)
}

fn push_digest(digest: &[u8], out: &mut String) {
    URL_SAFE_NO_PAD.encode_append(&digest[..ARGS_DIGEST_LEN], out);
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    /// The arguments' digest is SHA-256 whichever implementation computes it: aws-lc's,
    /// over every length around its blocks, against `sha2`'s.
    #[test]
    fn the_digest_is_sha256() {
        let text: Vec<u8> = (0..300u32).map(|i| (i * 131 + 7) as u8).collect();
        for len in 0..text.len() {
            let bytes = &text[..len];
            assert_eq!(
                super::sha256(bytes).as_ref(),
                &Sha256::digest(bytes)[..],
                "{len}"
            );
        }
    }
}
