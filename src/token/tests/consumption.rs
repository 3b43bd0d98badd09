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

/// A shared store (Redis) is given the digest every replica computes; the memory store,
/// which no other process reads, the key id and nonce themselves: distinct per token
/// either way.
#[test]
fn a_consumption_is_named_by_digest_only_for_a_shared_store() {
    let s = super::sealer(None);
    let opened: Vec<_> = (0..2)
        .map(|_| {
            let token = super::seal(&s, None);
            let opened = (s.open_at(super::NOW, &token, &super::provision(), None)).unwrap();
            assert_eq!(opened.consumption_id(), consumption_id(&opened.id));
            assert_ne!(opened.consumption_id(), opened.id);
            opened
        })
        .collect();
    assert_ne!(opened[0].consumption_id(), opened[1].consumption_id());
    assert_ne!(opened[0].id, opened[1].id);
}
