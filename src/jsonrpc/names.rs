//! Reading a name (or a path of names) out of a message the way every lenient parser
//! reads it, so the sidecar never checks one member while the upstream reads another.
//!
//! Invariant: a name the sidecar reads, at every level of its path, is read only when no
//! sibling folds to it ([`fold()`](fn@super::fold): case, `_`/`-` and the other ASCII punctuation, Unicode
//! case folding), and a name whose exact spelling is absent while a folded one is present
//! is refused, never read as absent. Go's `encoding/json` folds case and lets the later
//! key win (`"Import"` beside `"import"`); a pydantic model with camel-case aliases and
//! `populate_by_name`, the MCP SDK's own style, reads `import_ref` as `importRef`. Either
//! way the member the sidecar checked would not be the one the upstream acts on.

use super::JsonView;
use super::ParseError;
use super::view::member;
use serde_json::Value;

/// Where a 2026 request declares its client's capabilities (`params._meta[...]`).
pub(crate) const CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// What [`crate::policy::capabilities`] asks of a declaration (each: every step there,
/// spelled exactly, and the value at its end not null), in the order of the bits
/// [`super::Index::declared_paths`] answers with.
pub(crate) const DECLARED_PATHS: [&[&str]; 6] = [
    &["elicitation"],
    &["elicitation", "form"],
    &["elicitation", "url"],
    &["sampling"],
    &["sampling", "tools"],
    &["roots"],
];

/// The names [`crate::policy::capabilities`] reads below [`CAPABILITIES_META`], as paths:
/// each level of each is checked at the gate.
pub(super) const CAPABILITY_PATHS: &[&[&str]] = &[
    &["elicitation", "form"],
    &["elicitation", "url"],
    &["sampling", "tools"],
    &["roots"],
];

/// The longest path of [`CAPABILITY_PATHS`], in names.
pub(super) const MAX_CAPABILITY_STEPS: usize = 2;

/// For each path of [`DECLARED_PATHS`], the index of the path one name shorter (`None`
/// for a path of one name): the paths as a tree, which the scan walks by index. Built at
/// compile time, which fails should a path's shorter path be missing from the list.
pub(super) const DECLARED_PARENTS: [Option<usize>; DECLARED_PATHS.len()] = {
    let mut parents = [None; DECLARED_PATHS.len()];
    let mut i = 0;
    while i < DECLARED_PATHS.len() {
        let len = DECLARED_PATHS[i].len();
        if len > 1 {
            parents[i] = Some(declared_index(DECLARED_PATHS[i], len - 1));
        }
        i += 1;
    }
    parents
};

/// Each path of [`CAPABILITY_PATHS`] as the indices in [`DECLARED_PATHS`] of its steps,
/// from its first name (`None` past its end). Built at compile time, which fails should
/// a step be missing from [`DECLARED_PATHS`] or a path be longer than
/// [`MAX_CAPABILITY_STEPS`].
pub(super) const CAPABILITY_STEPS: [[Option<usize>; MAX_CAPABILITY_STEPS]; CAPABILITY_PATHS.len()] = {
    let mut steps = [[None; MAX_CAPABILITY_STEPS]; CAPABILITY_PATHS.len()];
    let mut i = 0;
    while i < CAPABILITY_PATHS.len() {
        let path = CAPABILITY_PATHS[i];
        assert!(
            path.len() <= MAX_CAPABILITY_STEPS,
            "a longer capability path"
        );
        let mut len = 1;
        while len <= path.len() {
            steps[i][len - 1] = Some(declared_index(path, len));
            len += 1;
        }
        i += 1;
    }
    steps
};

/// The index in [`DECLARED_PATHS`] of the first `len` names of `path`.
const fn declared_index(path: &[&str], len: usize) -> usize {
    let mut j = 0;
    'paths: while j < DECLARED_PATHS.len() {
        let candidate = DECLARED_PATHS[j];
        if candidate.len() == len {
            let mut k = 0;
            while k < len {
                if !same_name(candidate[k], path[k]) {
                    j += 1;
                    continue 'paths;
                }
                k += 1;
            }
            return j;
        }
        j += 1;
    }
    panic!("a step of a capability path is missing from DECLARED_PATHS")
}

const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Where a path of names leads (see [`lookup`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Lookup<'v, V = Value> {
    /// Every step is there, spelled exactly; the value at the end.
    Found(&'v V),
    /// A step is there in no spelling (or is an index an array does not have).
    Absent,
    /// A step holds neither an object nor an array while more of the path follows: a
    /// value an upstream might read in place of what the path names.
    Blocked,
}

impl<'v, V> Lookup<'v, V> {
    #[cfg(test)]
    /// The value found; nothing when the path is absent or blocked.
    pub(crate) fn found(self) -> Option<&'v V> {
        match self {
            Lookup::Found(value) => Some(value),
            Lookup::Absent | Lookup::Blocked => None,
        }
    }
}

/// Follow `path` from `value`: a step into an object is a name read by [`member`] (a
/// look-alike at any level refuses the whole path), a step into an array an index as
/// RFC 6901 spells it (`0`, `17`; no sign, no leading zero). Steps are plain names: a
/// JSON pointer's `~1` / `~0` are the caller's to unescape.
pub(crate) fn lookup<'v, V: JsonView, S: AsRef<str>>(
    value: &'v V,
    path: impl IntoIterator<Item = S>,
) -> Result<Lookup<'v, V>, ParseError> {
    let mut at = value;
    for step in path {
        let step = step.as_ref();
        let next = if at.is_object() {
            member(at, step)?
        } else if let Some(items) = at.as_array() {
            index(step).and_then(|i| items.get(i))
        } else {
            return Ok(Lookup::Blocked);
        };
        match next {
            Some(next) => at = next,
            None => return Ok(Lookup::Absent),
        }
    }
    Ok(Lookup::Found(at))
}

/// An array index as `serde_json`'s own pointer reads it, so a path found here is the
/// one `Value::pointer_mut` then edits.
fn index(step: &str) -> Option<usize> {
    if step.starts_with('+') || (step.starts_with('0') && step.len() != 1) {
        return None;
    }
    step.parse().ok()
}

#[cfg(any(test, feature = "oracle"))]
/// The gate's check of the declared client capabilities: `params._meta`, its
/// [`CAPABILITIES_META`] member and every capability name read below it, each without a
/// look-alike sibling. (The values' shapes are not the gate's business: a capability
/// that is no object is read as the policy reads it.)
pub(super) fn check_capability_names(params: &Value) -> Result<(), ParseError> {
    let Some(meta) = member(params, "_meta")? else {
        return Ok(());
    };
    match lookup(meta, [CAPABILITIES_META])? {
        Lookup::Found(declared) => check_capabilities(declared),
        Lookup::Absent | Lookup::Blocked => Ok(()),
    }
}

/// Refuse declared client capabilities (the value under [`CAPABILITIES_META`]) in which
/// a capability name the policy reads has a look-alike, at any level.
pub(crate) fn check_capabilities<V: JsonView>(declared: &V) -> Result<(), ParseError> {
    for path in CAPABILITY_PATHS {
        lookup(declared, path.iter())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::view::distinct;
    use crate::jsonrpc::{LiteArena, LiteJson};
    use serde_json::json;

    /// The paths the policy asks about are the leaf paths the gate checks and every step
    /// on the way to them, and nothing else: the two lists cannot drift apart.
    #[test]
    fn the_declared_paths_are_the_checked_paths_and_their_steps() {
        let mut steps: Vec<&[&str]> = CAPABILITY_PATHS
            .iter()
            .flat_map(|path| (1..=path.len()).map(move |n| &path[..n]))
            .collect();
        steps.sort();
        steps.dedup();
        let mut declared = DECLARED_PATHS.to_vec();
        declared.sort();
        assert_eq!(declared, steps);
    }

    /// The tables the scan walks the paths by say what the paths say: each path's parent
    /// is the path one name shorter, and each capability path's steps are its prefixes.
    #[test]
    fn the_path_tables_are_the_paths() {
        for (path, parent) in DECLARED_PATHS.iter().zip(DECLARED_PARENTS) {
            let shorter = &path[..path.len() - 1];
            match parent {
                Some(parent) => assert_eq!(DECLARED_PATHS[parent], shorter),
                None => assert!(shorter.is_empty(), "{path:?}"),
            }
        }
        for (path, steps) in CAPABILITY_PATHS.iter().zip(CAPABILITY_STEPS) {
            for (len, step) in (1..=MAX_CAPABILITY_STEPS).zip(steps) {
                match step {
                    Some(step) => assert_eq!(DECLARED_PATHS[step], &path[..len]),
                    None => assert!(len > path.len(), "{path:?}"),
                }
            }
        }
    }

    fn ambiguous(key: &str) -> ParseError {
        ParseError::AmbiguousKey(key.into())
    }

    /// Pair by pair or through the set (past eight keys), over a tree or over the text:
    /// the later key of a pair that folds together is named.
    #[test]
    fn keys_that_fold_together_are_not_distinct() {
        let check = |value: Value| {
            let text = value.to_string();
            let verdict = distinct(&value);
            let arena = LiteArena::new();
            assert_eq!(distinct(&LiteJson::read(&text, &arena).unwrap()), verdict);
            verdict
        };
        assert_eq!(check(json!({"region": 1, "name": 2})), Ok(()));
        assert_eq!(
            check(json!({"region": 1, "Region": 2})),
            Err(ambiguous("Region"))
        );
        assert_eq!(
            check(json!({"first_name": 1, "firstName": 2})),
            Err(ambiguous("firstName"))
        );
        let mut many: serde_json::Map<String, Value> =
            (0..12).map(|i| (format!("k{i}"), json!(i))).collect();
        assert_eq!(check(Value::Object(many.clone())), Ok(()));
        many.insert("K_7".into(), json!(0));
        assert_eq!(check(Value::Object(many)), Err(ambiguous("K_7")));
        assert_eq!(check(json!([1, 1])), Ok(()));
    }

    #[test]
    fn a_member_is_read_only_without_a_look_alike() {
        let value = json!({"action": "accept", "content": 1});
        assert_eq!(member(&value, "action"), Ok(Some(&json!("accept"))));
        assert_eq!(member(&value, "model"), Ok(None));
        let value = json!({"action": "accept", "ACTION": "decline"});
        assert_eq!(member(&value, "action"), Err(ambiguous("ACTION")));
        let text = value.to_string();
        let arena = LiteArena::new();
        let lite = LiteJson::read(&text, &arena).unwrap();
        assert_eq!(member(&lite, "action"), Err(ambiguous("ACTION")));
        assert_eq!(member(&json!("s"), "action"), Ok(None));
    }

    #[test]
    fn a_member_is_read_only_without_a_look_alike_beside_it() {
        let read = |value: Value, name: &str| member(&value, name).map(|v| v.cloned());
        assert_eq!(
            read(json!({"import": 1, "other": 2}), "import"),
            Ok(Some(json!(1)))
        );
        assert_eq!(read(json!({"other": 2}), "import"), Ok(None));
        // Beside the exact name, or in its place: refused either way.
        assert_eq!(
            read(json!({"import": 1, "Import": 2}), "import"),
            Err(ambiguous("Import"))
        );
        assert_eq!(
            read(json!({"Import": 2}), "import"),
            Err(ambiguous("Import"))
        );
        assert_eq!(
            read(json!({"import_ref": 2}), "importRef"),
            Err(ambiguous("import_ref"))
        );
        assert_eq!(
            read(json!({"\u{131}mport": 2}), "import"),
            Err(ambiguous("\\u{131}mport"))
        );
        // A different name that merely shares letters is no look-alike.
        assert_eq!(read(json!({"imports": 2}), "import"), Ok(None));
    }

    #[test]
    fn every_level_of_a_path_is_checked() {
        let doc =
            json!({"importRef": {"id": "h"}, "list": [{"id": 0}, {"id": 1}], "n": 5, "z": null});
        let at = |path: &[&str]| lookup(&doc, path.iter());
        assert_eq!(at(&["importRef", "id"]), Ok(Lookup::Found(&json!("h"))));
        assert_eq!(at(&["list", "1", "id"]), Ok(Lookup::Found(&json!(1))));
        assert_eq!(at(&[]), Ok(Lookup::Found(&doc)));
        assert_eq!(at(&["missing", "id"]), Ok(Lookup::Absent));
        assert_eq!(at(&["importRef", "other"]), Ok(Lookup::Absent));
        // Indexes as RFC 6901 spells them, nothing else, on an array.
        for step in ["2", "01", "+1", "-1", "id"] {
            assert_eq!(at(&["list", step]), Ok(Lookup::Absent), "{step}");
        }
        // More path below a scalar (null too): blocked, not absent.
        assert_eq!(at(&["n", "id"]), Ok(Lookup::Blocked));
        assert_eq!(at(&["z", "id"]), Ok(Lookup::Blocked));
        assert_eq!(at(&["n"]), Ok(Lookup::Found(&json!(5))));

        let parent = |doc: Value| lookup(&doc, ["import", "id"]).map(|l| l.found().cloned());
        // A look-alike of the parent, beside the exact one or alone, refuses the path.
        assert_eq!(
            parent(json!({"import": {"id": "h"}, "Import": {"id": "imp-1"}})),
            Err(ambiguous("Import"))
        );
        assert_eq!(
            parent(json!({"Import": {"id": "imp-1"}})),
            Err(ambiguous("Import"))
        );
        // ...and so does one of the last step, below the exact parent.
        assert_eq!(
            parent(json!({"import": {"id": "h", "ID": "imp-1"}})),
            Err(ambiguous("ID"))
        );
        let doc = json!({"import_ref": {"id": "imp-1"}});
        assert_eq!(
            lookup(&doc, ["importRef", "id"]),
            Err(ambiguous("import_ref"))
        );
        // Below an array, its elements' members are read by the same rule.
        let doc = json!({"list": [{"id": 0, "Id": 1}]});
        assert_eq!(lookup(&doc, ["list", "0", "id"]), Err(ambiguous("Id")));
    }

    /// Through the gate's own classification, as a client's request meets it.
    fn declaring(meta: Value) -> Result<(), ParseError> {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "x", "_meta": meta}});
        crate::jsonrpc::classify(&call).map(drop)
    }

    #[test]
    fn declared_capabilities_have_no_look_alikes() {
        let caps = |declared: Value| declaring(json!({CAPABILITIES_META: declared}));
        assert_eq!(
            caps(
                json!({"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}})
            ),
            Ok(())
        );
        // Shapes are the policy's business, and other members are not read.
        assert_eq!(
            caps(json!({"elicitation": true, "experimental": {"x": {}}})),
            Ok(())
        );
        for (declared, key) in [
            (
                json!({"elicitation": {}, "Elicitation": {"url": {}}}),
                "Elicitation",
            ),
            (json!({"ELICITATION": {"url": {}}}), "ELICITATION"),
            (json!({"elicitation": {"form": {}, "Form": {}}}), "Form"),
            (json!({"elicitation": {"URL": {}}}), "URL"),
            (json!({"sampling": {"Tools": {}}}), "Tools"),
            (json!({"Sampling": {}}), "Sampling"),
            (json!({"roots": {}, "ROOTS": {}}), "ROOTS"),
            (json!({"root_s": {}}), "root_s"),
        ] {
            assert_eq!(caps(declared.clone()), Err(ambiguous(key)), "{declared}");
        }
    }

    #[test]
    fn the_capabilities_key_itself_has_no_look_alikes() {
        // `fold` drops `.` and `/`: these read as the key to a folding parser.
        for key in [
            "io.modelcontextprotocol/ClientCapabilities",
            "io.modelcontextprotocol/client_capabilities",
            "io_modelcontextprotocol_clientCapabilities",
            "io.modelcontextprotocol.clientCapabilities",
        ] {
            assert_eq!(
                declaring(json!({key: {"roots": {}}})),
                Err(ambiguous(key)),
                "{key} alone"
            );
            assert_eq!(
                declaring(json!({CAPABILITIES_META: {}, key: {"roots": {}}})),
                Err(ambiguous(key)),
                "{key} beside"
            );
        }
        // The other protocol keys of `_meta` are not look-alikes.
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "0"},
            CAPABILITIES_META: {"roots": {}},
            "progressToken": 1
        });
        assert_eq!(declaring(meta), Ok(()));
        assert_eq!(declaring(json!(5)), Ok(()));
    }

    #[test]
    fn idempotency_key_look_alikes_are_refused_at_params_level() {
        // `params.idempotencyKey` is the one place the sidecar reads a key from the body
        // (`tools::idempotency`; nothing under `_meta`): a look-alike is refused rather
        // than passed on unrecorded.
        for key in [
            "IdempotencyKey",
            "idempotency_key",
            "idempotency-key",
            "IDEMPOTENCYKEY",
        ] {
            let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "x", key: "k-1"}});
            assert_eq!(
                crate::jsonrpc::classify(&call),
                Err(ambiguous(key)),
                "{key}"
            );
            let both = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "x", "idempotencyKey": "k-1", key: "k-2"}});
            assert_eq!(
                crate::jsonrpc::classify(&both),
                Err(ambiguous(key)),
                "{key}"
            );
        }
    }
}
