//! Opening in a request's arena (`StateSealer::open_in`) against `open`.

use super::*;
use crate::jsonrpc::LiteJson;

/// A token opened in a request's arena reads what `open` reads, its recorded questions
/// to the same tree (read with the claims, or for a plaintext too large to copy, when
/// asked), and refuses what `open` refuses.
#[test]
fn opening_in_an_arena_reads_what_opening_reads() {
    let s = sealer(None);
    let questions = r#"{"region":{"m":"elicitation/create","k":"form","s":{"type":"object"}}}"#;
    let twice = r#"{"region":{"m":"a"},"region":{"m":"b"}}"#;
    for state in ["st".to_owned(), "x".repeat(COPIED_PLAINTEXT_BYTES)] {
        for recorded in [None, Some(questions), Some(twice)] {
            let options = SealOptions {
                questions: recorded,
                ..Default::default()
            };
            let token = s.seal(&state, &provision(), &options);
            let arena = LiteArena::new();
            let opened = s.open(&token, &provision(), None).unwrap();
            let opened_in = s.open_in(&token, &provision(), None, &arena).unwrap();
            assert_eq!(opened_in.state(), state);
            let later = LiteArena::new();
            assert_eq!(
                read(&opened_in, &arena),
                read(&opened, &later),
                "{recorded:?}"
            );
            assert_eq!(
                read(&opened_in, &arena).map(|tree| tree.is_some()),
                recorded.map(|q| q == questions),
            );
            let elsewhere = provision().at_path("/other");
            assert_eq!(
                s.open_in(&token, &elsewhere, None, &arena).err(),
                s.open(&token, &elsewhere, None).err(),
            );
        }
    }
    assert_eq!(
        reason(s.open_in("v1.AAAA", &provision(), None, &LiteArena::new())),
        Reject::Malformed
    );
}

/// The questions an opened token recorded, read (into `arena` unless read already).
fn read<'v>(opened: &'v Opened<'_>, arena: &'v LiteArena) -> Option<Option<LiteJson<'v>>> {
    opened.questions.as_ref().map(|q| q.read(arena))
}
