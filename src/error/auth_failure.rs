//! Why a caller could not be identified: the closed reasons of
//! [`ProxyError::Unauthorized`](super::ProxyError::Unauthorized), which [`crate::auth`]
//! produces and `mcp_state_guard_auth_failures_total{reason}` counts.
//!
//! Invariant: the set is closed and each reason has one fixed label; it lives with the
//! errors, below `auth`, which produces it.

/// Why a caller could not be identified: closed labels for
/// `mcp_state_guard_auth_failures_total{reason}` and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthFailure {
    /// No `Authorization: Bearer` header.
    Missing,
    /// Not a compact JWS, a repeated header, a `crit` header, claims that do not parse.
    Malformed,
    /// `none`, HMAC, or an algorithm the key does not allow.
    Algorithm,
    /// A `kid` the key set does not hold (after a refresh), or none among several keys.
    UnknownKey,
    Signature,
    Expired,
    /// `nbf` or `iat` in the future (beyond the leeway).
    NotYetValid,
    Issuer,
    Audience,
    /// `client_id`, `azp`, `sub` or `iat` of the wrong type, `exp` missing.
    Claims,
    /// No key set could be loaded yet (the JWKS URL was never reachable).
    KeysUnavailable,
    /// A TLS connection without a verified client identity (`mtls`).
    ClientCertificate,
}

crate::registry::labels!(pub AuthFailure {
    Missing => "missing",
    Malformed => "malformed",
    Algorithm => "algorithm",
    UnknownKey => "unknown_key",
    Signature => "signature",
    Expired => "expired",
    NotYetValid => "not_yet_valid",
    Issuer => "issuer",
    Audience => "audience",
    Claims => "claims",
    KeysUnavailable => "keys_unavailable",
    ClientCertificate => "client_certificate",
});
