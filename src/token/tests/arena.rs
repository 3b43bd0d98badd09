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

/// What an opened token holds of its own, beside the request's arena: the state as the
/// claims spell it, the asked keys, and the questions' text only when the plaintext was
/// too large to copy into the arena (what the proxy reserves in the memory budget).
#[test]
fn an_opened_token_counts_what_it_holds_outside_the_arena() {
    let s = sealer(None);
    // Longer than what the asked keys' list holds, so that counting it shows.
    let questions = format!(
        r#"{{"region":{{"m":"elicitation/create","k":"form","s":{{"description":"{}"}}}}}}"#,
        "d".repeat(300)
    );
    let asked = ["region".to_owned()];
    let options = SealOptions {
        questions: Some(&questions),
        asked: Some(&asked),
        ..Default::default()
    };
    for (state, copied) in [
        ("st".to_owned(), true),
        ("x".repeat(COPIED_PLAINTEXT_BYTES), false),
    ] {
        let token = s.seal(&state, &provision(), &options);
        let arena = LiteArena::new();
        let opened = s.open_in(&token, &provision(), None, &arena).unwrap();
        // At least the state, one key's `String` and its bytes.
        let outside = opened.state_json.capacity() + std::mem::size_of::<String>() + 6;
        let held = opened.held_bytes();
        assert!(held >= outside, "{held} < {outside}");
        match copied {
            true => assert!(
                held < outside + questions.len(),
                "{held}: the questions are in the arena, not counted again"
            ),
            false => assert!(
                held >= outside + questions.len(),
                "{held}: the copied questions' text is counted"
            ),
        }
    }
}
