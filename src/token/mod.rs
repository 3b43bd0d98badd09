//! The only place crypto lives: sealing an upstream's plaintext `requestState` into a
//! `v1.` token bound to one request, caller, audience and time window, and opening it;
//! and sealing upstream handles into `h1.` tokens ([`handle`]).
//!
//! Invariant: [`StateSealer::open`] returns a plaintext only for a token this key ring
//! sealed, unmodified, unexpired, for the same method, target, arguments, audience and
//! principal as the request at hand, and on the same path if it was minted with one. Key
//! material is zeroized on drop. Every failure is one [`Reject`] reason (for logs and
//! metrics) plus a static detail; neither carries token or state bytes.
//!
//! The format is byte-compatible with the reference SDK (`mcp/server/request_state.py`):
//! tokens minted by either open in the other given the same keys and audience.

pub(crate) mod canonical;
pub(crate) mod claims;
pub(crate) mod handle;
pub(crate) mod keyring;
pub(crate) mod kid;
mod metrics;

use crate::jsonrpc::LiteArena;
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub use claims::Flow;
pub use claims::Questions;
pub use claims::StateText;
pub use claims::binding::RequestBinding;
pub use claims::binding::args_digest;
pub use handle::HandleReject;
pub use keyring::Frame;
pub use keyring::KeyRing;
pub use keyring::KeyRingError;
pub use keyring::OpenError;
pub(crate) use keyring::TOKEN_ID_LEN;
pub use keyring::generate_secret;
pub use kid::KeyId;
pub use metrics::KeyMetrics;

use claims::{MintClaims, OpenedClaims, PrincipalClaim, PrincipalMemo};

/// Tokens minted up to this far in the future (a replica's clock ahead of ours) still open.
pub(crate) const FUTURE_SKEW_SECONDS: f64 = 60.0;

/// The closed set of reasons a token is refused. Labels for metrics and logs; the client
/// only ever sees the one frozen error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// Not a token, tampered, truncated, or claims that do not parse.
    Malformed,
    /// Sealed under a key this ring does not hold (rotated out, another deployment).
    UnknownKey,
    /// Outside its time window: expired, or minted too far in the future.
    Expired,
    /// Minted for another method, target, arguments or request path.
    Binding,
    /// Minted for another audience (another service sharing the keys).
    Audience,
    /// Minted for another caller, or bound/unbound differently than this request.
    Principal,
    /// A single-use state presented again (decided by the store, not the token).
    Replayed,
    /// A single-use state whose consumption could not be recorded (store down or full),
    /// or a revocation that could not be checked.
    StoreUnavailable,
    /// Minted for a principal revoked since.
    Revoked,
}

crate::registry::labels!(pub Reject {
    Malformed => "malformed",
    UnknownKey => "unknown_key",
    Expired => "expired",
    Binding => "binding",
    Audience => "audience",
    Principal => "principal",
    Replayed => "replayed",
    StoreUnavailable => "store_unavailable",
    Revoked => "revoked",
});

/// A refusal: the reason, and a static detail that is safe to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    pub reason: Reject,
    pub detail: &'static str,
}

const fn reject(reason: Reject, detail: &'static str) -> Rejection {
    Rejection { reason, detail }
}

/// What one round's token carries besides the binding.
#[derive(Debug, Clone, Default)]
pub struct SealOptions<'a> {
    /// The identity bound to this request, if a principal source is configured and the
    /// request carried one.
    pub principal: Option<&'a str>,
    /// The state may be consumed once only (`su` claim).
    pub single_use: bool,
    /// The upstream sent no state this round; the token only binds the round (`ns`
    /// claim), so its `inputResponses` can be checked, and the retry is forwarded
    /// without a `requestState`.
    pub no_upstream_state: bool,
    /// The `inputRequests` keys asked in this round (`q` claim); `None` to omit.
    pub asked: Option<&'a [String]>,
    /// What each key asked (`qd` claim): `{key: {"m": method, "k": mode, "s": schema}}`,
    /// as the claim's text, already in the token's encoding (the rules floor writes it).
    pub questions: Option<&'a str>,
    /// The round and the flow's start (`n`, `fs` claims).
    pub flow: Option<Flow>,
}

/// A verified token; `'a`: the arena its recorded questions were read into, if any
/// ([`StateSealer::open_in`]).
pub struct Opened<'a> {
    /// The upstream's plaintext state, as a JSON string token (quotes included): what
    /// the upstream receives as its `requestState`.
    pub(crate) state_json: String,
    pub single_use: bool,
    /// Minted for a round in which the upstream sent no state (`ns` claim).
    pub no_upstream_state: bool,
    /// The keys asked in the minting round, when the minter recorded them.
    pub asked: Option<Vec<String>>,
    /// What each asked key asked, when the minter recorded it.
    pub questions: Option<Questions<'a>>,
    /// Where the token stands in its flow, when the minter recorded it.
    pub(crate) flow: Option<Flow>,
    /// Unix seconds when it was minted (revocations compare against it).
    pub(crate) issued_at: f64,
    /// Unix seconds after which the token no longer opens (bounds replay bookkeeping).
    pub(crate) expires_at: f64,
    /// Unix seconds it was opened at (its times checked against them): the request's
    /// later checks of time (its flow's age) read these, not the clock again.
    pub(crate) opened_at: f64,
    /// Key id ‖ nonce: names this token for single-use bookkeeping.
    pub(crate) id: [u8; TOKEN_ID_LEN],
}

impl Opened<'_> {
    /// Bytes it holds on the heap of its own: the state, the asked keys and the
    /// questions' text when it was copied out of the plaintext (what a request's arena
    /// holds is counted with the arena).
    pub(crate) fn held_bytes(&self) -> usize {
        let asked = self.asked.as_ref().map_or(0, |keys| {
            keys.capacity() * std::mem::size_of::<String>()
                + keys.iter().map(String::capacity).sum::<usize>()
        });
        let questions = self.questions.as_ref().map_or(0, Questions::owned_bytes);
        self.state_json.capacity() + asked + questions
    }

    /// The upstream's plaintext state.
    pub fn state(&self) -> String {
        serde_json::from_str(&self.state_json).expect("a string token the claims checked")
    }

    /// The name a shared single-use store (Redis) records this token's consumption
    /// under: a digest of its key id and nonce, so the store (and anything that reads
    /// it) holds nothing from which the token could be rebuilt, and two tokens never
    /// share a name. (The memory store, which only this process reads, takes the key id
    /// and nonce themselves, [`Opened::id`].)
    pub(crate) fn consumption_id(&self) -> [u8; 16] {
        consumption_id(&self.id)
    }
}

/// [`Opened::consumption_id`] of the token named `id` (key id ‖ nonce). Every replica and
/// every version names a consumption so (Redis keys it by this in hex): a replica that
/// named it otherwise would let the token be spent once more there.
fn consumption_id(id: &[u8; TOKEN_ID_LEN]) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(b"mcp-state-guard/consumed/v1:")
        .chain_update(id)
        .finalize();
    digest[..16].try_into().expect("SHA-256 is 32 bytes")
}

/// Seals and opens states under a hot-swappable key ring.
pub struct StateSealer {
    ring: ArcSwap<KeyRing>,
    audience: Option<String>,
    ttl_seconds: u64,
    /// Each recent caller's latest principal claim ([`PrincipalMemo`]).
    principals: PrincipalMemo,
}

impl StateSealer {
    pub fn new(ring: KeyRing, audience: Option<String>, ttl_seconds: u64) -> Self {
        assert!(ttl_seconds > 0, "ttl must be positive");
        Self {
            ring: ArcSwap::from_pointee(ring),
            audience,
            ttl_seconds,
            principals: PrincipalMemo::default(),
        }
    }

    /// Swap in a new key ring; tokens in flight keep opening if their key is still in it.
    pub(crate) fn replace_ring(&self, ring: KeyRing) {
        self.ring.store(Arc::new(ring));
    }

    /// The current ring (for key-id reporting).
    pub fn ring(&self) -> Arc<KeyRing> {
        self.ring.load_full()
    }

    /// Seal `state` for the request `binding` describes, valid for one TTL from now.
    pub fn seal(&self, state: &str, binding: &RequestBinding, options: &SealOptions<'_>) -> String {
        self.seal_at(now(), state, binding, options)
    }

    /// [`StateSealer::seal`], and the id of the key that minted the token (read from the
    /// ring it was sealed with, not decoded back from the token).
    pub fn seal_counted(
        &self,
        state: StateText<'_>,
        binding: &RequestBinding,
        options: &SealOptions<'_>,
    ) -> (String, KeyId) {
        let (token, kid) = self.seal_counted_framed(state, binding, options, Frame::NONE);
        let token = String::from_utf8(token).expect("a token is its prefix and base64url");
        (token, kid)
    }

    /// [`StateSealer::seal_counted`], the token written between `frame`'s bytes in one
    /// buffer of exactly their size (an answer's splice, without a copy of the token).
    pub fn seal_counted_framed(
        &self,
        state: StateText<'_>,
        binding: &RequestBinding,
        options: &SealOptions<'_>,
        frame: Frame<'_>,
    ) -> (Vec<u8>, KeyId) {
        let ring = self.ring.load();
        let token = self.seal_with(&ring, now(), state, binding, options, frame);
        (token, KeyId::minting(&ring))
    }

    pub fn seal_at(
        &self,
        now: f64,
        state: &str,
        binding: &RequestBinding,
        options: &SealOptions<'_>,
    ) -> String {
        let ring = self.ring.load();
        let token = self.seal_with(&ring, now, state.into(), binding, options, Frame::NONE);
        String::from_utf8(token).expect("a token is its prefix and base64url")
    }

    fn seal_with(
        &self,
        ring: &KeyRing,
        now: f64,
        state: StateText<'_>,
        binding: &RequestBinding,
        options: &SealOptions<'_>,
        frame: Frame<'_>,
    ) -> Vec<u8> {
        let principal = options.principal.map(|p| {
            self.principals
                .claim(p, now, keyring::fast_random_bytes::<8>)
        });
        let claims = self.mint_claims(now, state, binding, options, principal);
        let nonce = keyring::fast_random_bytes();
        ring.seal_text_framed(
            nonce,
            claims.len_hint(),
            |out| claims.encode_into(out),
            frame,
        )
    }

    /// Reference-vector hook: fixed salt and nonce give byte-identical tokens.
    #[cfg(test)]
    pub(crate) fn seal_deterministic(
        &self,
        now: f64,
        state: &str,
        binding: &RequestBinding,
        options: &SealOptions<'_>,
        salt: [u8; 8],
        nonce: [u8; keyring::NONCE_LEN],
    ) -> String {
        let principal = options.principal.map(|p| claims::principal_claim(p, salt));
        let claims = self.mint_claims(now, state.into(), binding, options, principal);
        self.ring
            .load()
            .seal_text(nonce, claims.len_hint(), |out| claims.encode_into(out))
    }

    fn mint_claims<'a>(
        &'a self,
        now: f64,
        state: StateText<'a>,
        binding: &'a RequestBinding,
        options: &SealOptions<'a>,
        principal_claim: Option<PrincipalClaim>,
    ) -> MintClaims<'a> {
        // Whole seconds: the reference writes `time.time()` as is, but an integral float
        // encodes without float formatting, and a TTL is not meant to the microsecond.
        // `iat` rounds down and `exp` up, so the token is valid for at least the full TTL
        // after this instant (never up to a second less), and `iat` is never in the
        // future. On a whole second both equal the reference's (`exp = iat + ttl`).
        let iat = now.floor();
        MintClaims {
            iat,
            exp: now.ceil() + self.ttl_seconds as f64,
            binding,
            state,
            audience: self.audience.as_deref(),
            principal_claim,
            single_use: options.single_use,
            no_upstream_state: options.no_upstream_state,
            asked: options.asked,
            questions: options.questions,
            flow: options.flow,
        }
    }

    /// Verify `token` against this request and return the plaintext it carries.
    pub fn open(
        &self,
        token: &str,
        binding: &RequestBinding,
        principal: Option<&str>,
    ) -> Result<Opened<'static>, Rejection> {
        self.open_at(now(), token, binding, principal)
    }

    pub(crate) fn open_at(
        &self,
        now: f64,
        token: &str,
        binding: &RequestBinding,
        principal: Option<&str>,
    ) -> Result<Opened<'static>, Rejection> {
        let unsealed = self.unseal(token)?;
        self.open_unsealed(now, &unsealed, binding, principal)
    }

    /// [`StateSealer::open`], the claims read out of a copy of the plaintext in `arena`
    /// (a request's), with the questions the round recorded: read once, as the claims
    /// are, rather than passed over then and read when the answers are checked. A
    /// plaintext over 4 KiB (`COPIED_PLAINTEXT_BYTES`: a large state) is not copied;
    /// its questions are read when the answers are checked, as `open`'s are.
    pub fn open_in<'a>(
        &self,
        token: &str,
        binding: &RequestBinding,
        principal: Option<&str>,
        arena: &'a LiteArena,
    ) -> Result<Opened<'a>, Rejection> {
        let unsealed = self.unseal(token)?;
        if unsealed.payload().len() > COPIED_PLAINTEXT_BYTES {
            return self.open_unsealed(now(), &unsealed, binding, principal);
        }
        let text = crate::text::utf8(unsealed.payload()).ok_or(MALFORMED_CLAIMS)?;
        let (claims, questions) =
            OpenedClaims::decode_in(arena.alloc_str(text), arena).ok_or(MALFORMED_CLAIMS)?;
        let now = now();
        self.check(now, &claims, binding, principal)?;
        Ok(Self::opened(claims, questions, &unsealed, now))
    }

    /// An unsealed token's claims checked, its questions kept as text.
    fn open_unsealed(
        &self,
        now: f64,
        unsealed: &keyring::Unsealed,
        binding: &RequestBinding,
        principal: Option<&str>,
    ) -> Result<Opened<'static>, Rejection> {
        let claims = OpenedClaims::decode(unsealed.payload()).ok_or(MALFORMED_CLAIMS)?;
        self.check(now, &claims, binding, principal)?;
        let questions = claims.qd.map(Questions::unread);
        Ok(Self::opened(claims, questions, unsealed, now))
    }

    fn unseal(&self, token: &str) -> Result<keyring::Unsealed, Rejection> {
        self.ring.load().open(token).map_err(|e| match e {
            OpenError::Malformed => reject(Reject::Malformed, "not a canonical v1 token"),
            OpenError::UnknownKey => reject(Reject::UnknownKey, "key id not in the ring"),
            OpenError::Tampered => reject(Reject::Malformed, "authentication tag mismatch"),
        })
    }

    /// Whether opened `claims` hold for this request at `now`.
    fn check(
        &self,
        now: f64,
        claims: &OpenedClaims<'_>,
        binding: &RequestBinding,
        principal: Option<&str>,
    ) -> Result<(), Rejection> {
        // Accept-conditions stated positively, as the reference does, so that a NaN
        // (which JSON cannot carry, but a future parser might) fails them.
        let issued_in_time = claims.iat <= now + FUTURE_SKEW_SECONDS;
        let unexpired = now < claims.exp;
        if !issued_in_time {
            return Err(reject(Reject::Expired, "minted in the future"));
        }
        if !unexpired {
            return Err(reject(Reject::Expired, "expired"));
        }
        if claims.m.as_deref() != Some(binding.method())
            || claims.t.as_deref() != Some(binding.target())
            || claims.a.as_deref() != Some(binding.args_digest())
        {
            return Err(reject(Reject::Binding, "minted for another request"));
        }
        // No claim: minted without a path (the reference, or an older version of ours);
        // see `RequestBinding::path` for why that still opens.
        match (claims.u.as_deref(), binding.path()) {
            (None, _) => {}
            (Some(minted), Some(here)) if minted == here => {}
            (Some(_), Some(_)) => return Err(reject(Reject::Binding, "minted for another path")),
            (Some(_), None) => {
                return Err(reject(
                    Reject::Binding,
                    "minted for a path, request has none",
                ));
            }
        }
        if claims.aud.as_deref() != self.audience.as_deref() {
            return Err(reject(Reject::Audience, "minted for another audience"));
        }
        match (claims.p.as_deref(), principal) {
            (None, None) => {}
            (None, Some(_)) | (Some(_), None) => {
                return Err(reject(Reject::Principal, "principal drift"));
            }
            (Some(claim), Some(principal)) if self.principals.matches(claim, principal) => {}
            (Some(_), Some(_)) => return Err(reject(Reject::Principal, "principal mismatch")),
        }
        Ok(())
    }

    fn opened<'a>(
        claims: OpenedClaims<'_>,
        questions: Option<Questions<'a>>,
        unsealed: &keyring::Unsealed,
        opened_at: f64,
    ) -> Opened<'a> {
        Opened {
            state_json: claims.s.to_owned(),
            single_use: claims.su,
            no_upstream_state: claims.ns,
            asked: claims.q,
            questions,
            flow: claims
                .n
                .zip(claims.fs)
                .map(|(round, started)| Flow { round, started }),
            issued_at: claims.iat,
            expires_at: claims.exp,
            opened_at,
            id: unsealed.id(),
        }
    }
}

/// The largest plaintext [`StateSealer::open_in`] copies into a request's arena: the
/// copy lives as long as the arena (across the store's round trips), so a large state
/// is not held twice for the sake of reading its questions once.
pub(crate) const COPIED_PLAINTEXT_BYTES: usize = 4096;

/// What every plaintext that holds no claims of this version is refused as.
const MALFORMED_CLAIMS: Rejection = reject(Reject::Malformed, "claims do not parse");

/// Wall-clock Unix seconds as the reference's `time.time()` gives them.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The largest token worth opening: no token this sidecar mints for a state of
/// `max_state_bytes` is longer (claims overhead, JSON escaping of every byte at worst 6×,
/// base64 4/3).
pub fn max_token_bytes(max_state_bytes: usize) -> usize {
    (max_state_bytes * 6 + 4096) * 4 / 3
}

/// Whether `text` is written in JSON as it is, between quotes: what every token and handle
/// this sidecar mints is (a prefix of letters, digits and `.`, then base64url), so the
/// response sealer splices it without escaping.
pub(crate) fn is_json_plain(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests;
