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

/// `pub struct|enum|trait|type Name` declarations in a source, comments left out.
fn public_types(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("").trim_start();
        let Some(rest) = code.strip_prefix("pub ") else {
            continue;
        };
        for kind in ["struct ", "enum ", "trait ", "type "] {
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

/// A public type's name says which one it is: no two public types in `src/` share one,
/// so a reader (or a `use`) never has to ask which `Upstream` is meant.
#[test]
fn no_two_public_types_share_a_name() {
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
        for name in public_types(&std::fs::read_to_string(&path).unwrap()) {
            seen.entry(name).or_default().push(relative.clone());
        }
    }
    assert!(seen.len() > 50, "the public types were not read: {seen:?}");
    let shared: Vec<String> = seen
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "public types sharing a name:\n{}",
        shared.join("\n")
    );
}

/// The declaration scan sees every kind and nothing in comments or private.
#[test]
fn public_types_are_read_from_their_declarations() {
    let text = "pub struct A;\npub enum B {}\n    pub trait C {}\npub type D = u8;\n\
                struct E;\n// pub struct F;\npub fn g() {}\npub(crate) struct H;";
    assert_eq!(public_types(text), ["A", "B", "C", "D"]);
}
