//! The house keeps its floors: every `crate::` path in `src/` names a module on the floor
//! of the file that writes it or below, and the modules import one another in no circle.
//! The floors are read from the table in `src/lib.rs` (the one place that states them),
//! so moving a module between floors is one edit there, and an upward import or a cycle
//! fails here with the file and the path that broke it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Floor of each top-level module, bottom (0) up, from `src/lib.rs`'s floors table.
fn floors() -> BTreeMap<String, usize> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let start = lib
        .find("# The floors")
        .expect("src/lib.rs states the floors");
    let mut floors = BTreeMap::new();
    let rows = lib[start..]
        .lines()
        .filter(|line| line.starts_with("//! | ") && !line.contains("| ---"))
        .skip(1); // the header
    for (floor, row) in rows.enumerate() {
        let modules = row.split(" | ").nth(2).expect("a modules column");
        for module in modules.split(", ") {
            let name = module.trim_matches(|c| c == '[' || c == ']' || c == '`');
            floors.insert(name.to_owned(), floor);
        }
    }
    assert!(
        floors.len() > 20,
        "the floors table was not read: {floors:?}"
    );
    floors
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a source names through `crate::`, comments left out.
fn named(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
            rest = after;
        }
    }
    names
}

/// `(file, its module, the modules it names)` for every file under `src/` but the crate
/// root, the binary and the build script.
fn edges() -> Vec<(String, String, BTreeSet<String>)> {
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let relative = path.strip_prefix(root().join("src")).unwrap();
        let relative = relative.to_string_lossy().into_owned();
        let module = relative
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned();
        if ["lib", "main", "build"].contains(&module.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        out.push((relative, module, named(&text)));
    }
    out
}

#[test]
fn every_module_is_on_a_floor_and_imports_none_above_its_own() {
    let floors = floors();
    let mut upward = Vec::new();
    for (file, module, names) in edges() {
        let own = *floors.get(&module).unwrap_or_else(|| {
            panic!("src/{file}: module `{module}` is on no floor of src/lib.rs")
        });
        for name in names {
            match floors.get(&name) {
                Some(floor) if *floor > own => upward.push(format!("src/{file} -> crate::{name}")),
                Some(_) => {}
                None => panic!("src/{file} names crate::{name}, which is on no floor"),
            }
        }
    }
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

#[test]
fn modules_import_one_another_in_no_circle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, module, names) in edges() {
        let targets = graph.entry(module.clone()).or_default();
        targets.extend(names.into_iter().filter(|name| *name != module));
    }
    // Depth-first search; a module met again while still on the path closes a circle.
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(at) = path.iter().position(|m| m == module) {
            panic!("import circle: {} -> {module}", path[at..].join(" -> "));
        }
        if done.contains(module) {
            return;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            visit(next, graph, path, done);
        }
        path.pop();
        done.insert(module.to_owned());
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(module, &graph, &mut Vec::new(), &mut done);
    }
}

/// The checks themselves: an upward path and a circle are both seen.
#[test]
fn the_checks_see_what_they_look_for() {
    let names = named("use crate::proxy::x; // crate::admin\nlet a = crate::text::printable(s);");
    assert_eq!(
        names,
        BTreeSet::from(["proxy".to_owned(), "text".to_owned()])
    );
    let floors = floors();
    assert!(floors["text"] < floors["jsonrpc"]);
    assert!(floors["proxy"] < floors["app"]);
}

/// The types a source declares (`struct`, `enum`, `trait` at any depth, `type` aliases
/// at the top: an indented `type` is a trait's associated type), at any visibility,
/// comments and its `mod tests` left out.
fn declared_types(text: &str) -> Vec<String> {
    let text = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at]);
    let mut names = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let indented = code.starts_with(char::is_whitespace);
        let mut rest = code.trim_start();
        if let Some(after) = rest.strip_prefix("pub") {
            rest = match after.strip_prefix('(') {
                Some(scoped) => scoped.split_once(')').map_or("", |(_, r)| r),
                None => after,
            }
            .trim_start();
        }
        for kind in ["struct ", "enum ", "trait ", "type "] {
            if kind == "type " && indented {
                continue;
            }
            if let Some(after) = rest.strip_prefix(kind) {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// A type's name says which one it is: no two types in `src/` share one (at any
/// visibility, test code aside), so a reader (or a `use`) never has to ask which
/// `Upstream` is meant.
#[test]
fn no_two_types_share_a_name() {
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    files.sort();
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for path in files {
        let relative = path
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let name = path.file_name().unwrap().to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") || relative.contains("/tests/") {
            continue;
        }
        for name in declared_types(&std::fs::read_to_string(&path).unwrap()) {
            seen.entry(name).or_default().push(relative.clone());
        }
    }
    assert!(seen.len() > 200, "the types were not read: {seen:?}");
    let shared: Vec<String> = seen
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "types sharing a name:\n{}",
        shared.join("\n")
    );
}

/// The declaration scan sees every kind at every visibility, and nothing in comments,
/// associated types or test code.
#[test]
fn types_are_read_from_their_declarations() {
    let text = "pub struct A;\npub enum B {}\n    pub trait C {}\npub type D = u8;\n\
                struct E;\n// pub struct F;\npub fn g() {}\npub(crate) struct H;\n\
                pub(super) enum I {}\nimpl X for Y {\n    type Value = u8;\n}\n\
                #[cfg(test)]\nmod tests {\n    struct T;\n}\n";
    assert_eq!(declared_types(text), ["A", "B", "C", "D", "E", "H", "I"]);
}

/// The file modules under `root` (`proxy/gate.rs` is `["proxy", "gate"]`, a `mod.rs` its
/// folder), and what each names through `crate::`, `super::` and `self::` (test files
/// and `mod tests` left out), resolved to the longest module path that is a file.
fn file_edges(root: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let module_of = |path: &Path| -> Vec<String> {
        let relative = path.strip_prefix(root).unwrap().with_extension("");
        let mut parts: Vec<String> = relative
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        parts
    };
    let modules: BTreeSet<Vec<String>> = files.iter().map(|p| module_of(p)).collect();
    let resolve = |mut path: Vec<String>| {
        while !path.is_empty() && !modules.contains(&path) {
            path.pop();
        }
        path
    };
    let mut edges = BTreeMap::new();
    for path in &files {
        let module = module_of(path);
        let name = path.file_name().unwrap().to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") || module.contains(&"tests".into()) {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let text = text
            .find("#[cfg(test)]\nmod tests")
            .map_or(&text[..], |at| &text[..at]);
        // `super::` is the enclosing module (`a` for `a/b.rs`, the root for `a.rs`).
        let parent = module[..module.len().saturating_sub(1)].to_vec();
        let mut named = BTreeSet::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (prefix, base) in [
                ("crate::", Vec::new()),
                ("super::", parent.clone()),
                ("self::", module.clone()),
            ] {
                for (at, _) in code.match_indices(prefix) {
                    if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                        continue;
                    }
                    let mut target = base.clone();
                    let after = &code[at + prefix.len()..];
                    target.extend(
                        after
                            .split("::")
                            .map(|s| {
                                s.chars()
                                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                                    .collect::<String>()
                            })
                            .take_while(|s| !s.is_empty()),
                    );
                    let target = resolve(target);
                    if !target.is_empty() && target != module {
                        named.insert(target);
                    }
                }
            }
        }
        edges.insert(module, named);
    }
    edges
}

/// The knots under `root`: a file that reaches itself through files that are not each
/// other's parent and child (a parent uses its children and they may use what it
/// declares; siblings are one-way), with the path that closes it.
fn knots(root: &Path) -> Vec<String> {
    let edges = file_edges(root);
    assert!(
        edges.len() > 2,
        "{}: the files were not read",
        root.display()
    );
    let related = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let mut found = Vec::new();
    for start in edges.keys() {
        let mut stack: Vec<(Vec<String>, Vec<String>)> = vec![(start.clone(), vec![])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if related(&at, next) {
                    continue;
                }
                let mut path = path.clone();
                path.push(next.join("::"));
                if next == start {
                    found.push(format!("{} -> {}", start.join("::"), path.join(" -> ")));
                } else if seen.insert(next.clone()) {
                    stack.push((next.clone(), path));
                }
            }
        }
    }
    found
}

/// Inside a module too, its files import one another in no circle, in the crate and in
/// the fuzz checks.
#[test]
fn no_two_files_of_a_module_import_each_other() {
    for root in [root().join("src"), root().join("fuzz/src")] {
        let knots = knots(&root);
        assert!(
            knots.is_empty(),
            "{}: knots:\n{}",
            root.display(),
            knots.join("\n")
        );
    }
}

/// The knot check finds two siblings that import each other, through `super::` and
/// `crate::`, and takes a parent and its child using each other for no knot.
#[test]
fn the_knot_check_finds_siblings_that_import_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "mod a;\n");
    write("a.rs", "mod b;\nmod c;\nmod d;\nuse b::B;\npub struct P;\n");
    write("a/b.rs", "use super::c::C;\nuse super::P;\n");
    write("a/c.rs", "use crate::a::b::B;\n// use super::d::D;\n");
    write("a/d.rs", "use super::b::B;\n");
    let knots = knots(dir.path());
    assert!(
        knots.iter().any(|k| k.starts_with("a::b -> a::c -> a::b")),
        "{knots:?}"
    );
    assert!(knots.iter().all(|k| !k.contains("a::d")), "{knots:?}");
    write("a/c.rs", "// use crate::a::b::B;\n");
    assert!(super::layers::knots(dir.path()).is_empty());
}
