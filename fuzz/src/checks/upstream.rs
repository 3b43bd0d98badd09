//! `upstream`: the response sealer on an upstream's whole JSON answer
//! ([`ResponseSealer::seal_json`]: one strict scan, the sealed token spliced into the upstream's
//! bytes) against the tree sealer it replaced ([`sealer::TreeSealer`]).
//!
//! Input: a byte whose low bit says whether the client declared every capability (else
//! none), then the upstream's body.
//!
//! Invariants: never panics; both reach the same decision (the answer as it came, sealed,
//! or withheld with the same failure or MRTR refusal), except that the scanner alone
//! refuses serde_json's number stand-in key; a sealed answer reads, once each token is
//! opened back to what it seals, as the tree's sealed answer; no plaintext state reaches
//! the client.

use super::oracle::sealer::{self, TreeSealer};
use super::sealing::{self, LIMITS, MAX_STATE_BYTES};
use super::{ring, visible};
use mcp_state_guard::facade::jsonrpc::{self, ParseError};
use mcp_state_guard::facade::proxy::response::Withheld;

pub fn check(data: &[u8]) {
    let ([flags], body) = super::split_header::<1>(data);
    compare(body, (flags & 1 == 1).then(sealing::every_capability));
}

/// Both sealers on one JSON text of an answer, for a client that declared
/// `capabilities` (see the module's invariants).
pub fn compare(body: &[u8], capabilities: Option<serde_json::Value>) {
    let scanned = sealing::sealer_declaring(capabilities.clone()).seal_json(body);
    let binding = ring::binding();
    let tree = TreeSealer {
        sealer: &ring::sealer(),
        binding: &binding,
        capabilities: capabilities.as_ref(),
        limits: LIMITS,
        max_state_bytes: MAX_STATE_BYTES,
        max_token_bytes: mcp_state_guard::facade::token::max_token_bytes(MAX_STATE_BYTES),
    }
    .seal_json(body);
    match (scanned.map_err(label), tree) {
        (Err("unparseable_body"), _) if is_stand_in(body) => {}
        (Ok(None), Ok(None)) => {}
        (Ok(Some(sealed)), Ok(Some(tree))) => {
            visible::check_body(&sealed);
            let sealed = jsonrpc::parse_bounded(&sealed, usize::MAX)
                .expect("a sealed answer is strict JSON");
            assert_eq!(
                sealer::opened(sealed, &binding),
                sealer::opened(tree, &binding),
                "the client reads a different answer"
            );
        }
        (Err(scanned), Err(tree)) => assert_eq!(scanned, tree, "withheld for another reason"),
        (scanned, tree) => panic!("scanned {scanned:?}, tree {tree:?}"),
    }
}

/// What a withheld answer is counted as.
pub fn label(withheld: Withheld) -> &'static str {
    match withheld {
        Withheld::Failure(failure) => failure.as_str(),
        Withheld::Refused(reason, _) => reason.as_str(),
    }
}

/// The body holds serde_json's number stand-in as a key, which the tree reads as a
/// number.
pub fn is_stand_in(body: &[u8]) -> bool {
    let stand_in = ParseError::AmbiguousKey("$serde_json::private::Number".into());
    jsonrpc::scan_answer(body).err() == Some(stand_in)
}
