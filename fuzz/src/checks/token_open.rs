//! `token_open`: `StateSealer::open` under the fuzz ring.
//!
//! Input: a mode byte, then two position bytes, then the rest. Mode even: the rest is a
//! candidate token (lossy UTF-8), which must not open: only the sealer mints tokens.
//! Mode odd: the rest is a state; it is sealed, must open to the very same state for the
//! same request and caller and for no other, and a one-byte change at the chosen position
//! (xor with a non-zero byte), a truncation or an extension must keep it from opening.
//! Mode bit 8 also records the rest as the round's questions (`qd`, written verbatim, as
//! the rules floor hands them over): opening in a request's arena
//! (`StateSealer::open_in`, which reads them with the claims) must then answer what
//! `open` answers, and read the questions to the same tree as a read after `open` does.

use super::ring;
use mcp_state_guard::facade::jsonrpc::LiteArena;
use mcp_state_guard::facade::token::{Opened, RequestBinding, SealOptions, StateSealer};

pub fn check(data: &[u8]) {
    let ([mode, position, flip], rest) = super::split_header::<3>(data);
    let sealer = ring::sealer();
    let binding = ring::binding();
    if mode % 2 == 0 {
        let candidate = String::from_utf8_lossy(rest);
        assert!(
            sealer.open(&candidate, &binding, None).is_err(),
            "opened a token it did not seal"
        );
        assert!(sealer.ring().open(&candidate).is_err());
        return;
    }
    let state = String::from_utf8_lossy(rest);
    let principal = (mode & 2 != 0).then_some("alice");
    let options = SealOptions {
        principal,
        single_use: mode & 4 != 0,
        no_upstream_state: false,
        questions: (mode & 8 != 0).then_some(&*state),
        ..SealOptions::default()
    };
    let token = sealer.seal(&state, &binding, &options);
    let arena = LiteArena::new();
    let verdicts = (
        sealer.open(&token, &binding, principal),
        sealer.open_in(&token, &binding, principal, &arena),
    );
    match verdicts {
        (Ok(opened), Ok(opened_in)) => same_opened(&opened, &opened_in, &arena),
        (Err(refused), Err(refused_in)) => assert_eq!(refused, refused_in),
        (opened, _) => panic!(
            "opened in an arena or not, one verdict differs (`open`: {})",
            opened.map_or_else(|r| r.detail, |_| "opened")
        ),
    }
    if options.questions.is_some() {
        // Questions that are not JSON make claims that do not read: nothing more to see.
        return;
    }
    let opened = sealer
        .open(&token, &binding, principal)
        .unwrap_or_else(|r| panic!("a fresh token does not open: {}", r.detail));
    assert_eq!(
        opened.state(),
        state,
        "the state did not survive the round trip"
    );
    assert_eq!(opened.single_use, options.single_use);
    refused(
        &sealer,
        &token,
        &binding,
        principal.xor(Some("mallory")),
        "another caller",
    );
    let other = RequestBinding::new(
        binding.method(),
        &format!("{}x", binding.target()),
        binding.args_digest(),
        binding.path(),
    );
    refused(&sealer, &token, &other, principal, "another target");
    let elsewhere = binding.clone().at_path("/other");
    refused(&sealer, &token, &elsewhere, principal, "another path");

    let mut changed = token.clone().into_bytes();
    let at = usize::from(position) % changed.len();
    changed[at] ^= flip.max(1);
    let changed = String::from_utf8_lossy(&changed);
    refused(&sealer, &changed, &binding, principal, "a changed byte");
    refused(&sealer, &token[..at], &binding, principal, "a truncation");
    let extended = format!("{token}{}", char::from(b'A' + flip % 26));
    refused(&sealer, &extended, &binding, principal, "an extension");
}

/// The same token opened by `open` and by `open_in` (into `arena`): the same contents,
/// and the same questions read.
fn same_opened(opened: &Opened<'_>, opened_in: &Opened<'_>, arena: &LiteArena) {
    assert_eq!(opened.state(), opened_in.state());
    assert_eq!(opened.single_use, opened_in.single_use);
    assert_eq!(opened.no_upstream_state, opened_in.no_upstream_state);
    assert_eq!(opened.asked, opened_in.asked);
    let later = LiteArena::new();
    assert_eq!(
        opened.questions.as_ref().map(|q| q.read(&later)),
        opened_in.questions.as_ref().map(|q| q.read(arena)),
        "the questions read differently with the claims"
    );
}

fn refused(
    sealer: &StateSealer,
    token: &str,
    binding: &RequestBinding,
    principal: Option<&str>,
    what: &str,
) {
    assert!(
        sealer.open(token, binding, principal).is_err(),
        "a token opened after {what}"
    );
}
