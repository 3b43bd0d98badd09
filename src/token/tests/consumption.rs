//! The name a consumption is recorded under, pinned.

use super::super::consumption_id;

/// The first 16 bytes of SHA-256("mcp-state-guard/consumed/v1:" ‖ key id ‖ nonce), as
/// every earlier version named it (`hashlib` computed the pinned value): a replica that
/// named a consumption otherwise, in a rolling upgrade, would let its token be spent
/// once more.
#[test]
fn a_consumption_is_named_as_every_version_names_it() {
    let id: [u8; 16] = std::array::from_fn(|i| i as u8);
    assert_eq!(
        crate::text::hex_lower(&consumption_id(&id)),
        "914813a8e9c8252aad0b913a56d9c451"
    );
}
