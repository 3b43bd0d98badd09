//! Minted tokens need no JSON escaping: the response sealer splices them between quotes.

use super::*;

proptest! {
    /// The response sealer writes a token between quotes without escaping it: whatever
    /// the state (quotes, backslashes, control and astral characters) and principal, the
    /// token has nothing JSON would escape, and `is_json_plain` is what says so.
    #[test]
    fn a_token_needs_no_json_escaping(state in "\\PC*", principal in proptest::option::of("\\PC{0,40}")) {
        let token = sealer(Some("svc")).seal_at(NOW, &state, &provision(), &SealOptions {
            principal: principal.as_deref(),
            ..Default::default()
        });
        prop_assert!(is_json_plain(&token), "{token}");
        let written = format!("\"{token}\"");
        prop_assert_eq!(serde_json::to_string(&token).unwrap(), written);
    }
}

#[test]
fn json_plain_refuses_what_json_escapes() {
    assert!(is_json_plain("v1.AbC-_09"));
    for text in ["a\"b", "a\\b", "a\nb", "a b", "é", "a/b", "a+b", "a=b"] {
        assert!(!is_json_plain(text), "{text:?}");
    }
}
