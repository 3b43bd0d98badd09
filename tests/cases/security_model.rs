//! The security model and the tests that prove it cannot drift apart: every test that
//! docs/security-model.md's "What is protected, against whom, and the test that proves it" names (its
//! table and its "does not protect" list) exists, and every guarantee module of
//! `tests/cases/` is named in that table, whose rows follow the modules' order in
//! `tests/cases/mod.rs`. A renamed, moved or deleted test fails here with the reference
//! that went stale.
//!
//! The same goes for the documentation's links: every relative link in README.md and
//! docs/*.md names a file of the repository and, into a Markdown file, one of its headings,
//! and the README links to every file of docs/.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The file that states the security model.
const DOC: &str = "docs/security-model.md";

/// The section of [`DOC`] that states the security model's guarantees.
const HEADING: &str = "## What is protected, against whom, and the test that proves it";

/// The modules of `tests/cases/` that prove no guarantee of the security model: what the
/// sidecar must not break (`passthrough`), how it is run and observed (`tls` included:
/// the model trusts the upstream and the files it is given), the peers and suites it
/// interoperates with, and the checks of the code itself. Every other module is
/// a guarantee and must be named in the table.
const NOT_GUARANTEES: &[&str] = &[
    "cli",
    "conformance",
    "fuzz_regressions",
    "helm",
    "image",
    "interop",
    "jwt_interop",
    "layers",
    "observability",
    "operations",
    "passthrough",
    "security_model",
    "stdio_conformance",
    "stdio_everything",
    "tls",
    "token_interop",
    "ts_conformance",
    "ts_upstream",
];

/// A test named by the security model.
#[derive(Debug, Clone, PartialEq)]
enum Reference {
    /// `module::name` (a file of `tests/cases/`); `name` may be `*` or end in `*`.
    Case { module: String, name: String },
    /// unit `a::b::tests::name`: a unit test in `src/a/b`.
    Unit { path: Vec<String>, name: String },
    /// fuzz target `name`: `fuzz/fuzz_targets/name.rs`.
    Fuzz(String),
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reference::Case { module, name } => write!(f, "`{module}::{name}`"),
            Reference::Unit { path, name } => write!(f, "unit `{}::{name}`", path.join("::")),
            Reference::Fuzz(name) => write!(f, "fuzz target `{name}`"),
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `a_{json,sse}_b` → `a_json_b`, `a_sse_b` (any number of brace groups).
fn expand(text: &str) -> Vec<String> {
    let Some(open) = text.find('{') else {
        return vec![text.to_owned()];
    };
    let close = open + text[open..].find('}').expect("a closing brace");
    let (head, tail) = (&text[..open], &text[close + 1..]);
    let alternatives = text[open + 1..close].split(',');
    alternatives
        .flat_map(|a| expand(&format!("{head}{a}{tail}")))
        .collect()
}

fn is_path(span: &str) -> bool {
    let word = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| "abcdefghijklmnopqrstuvwxyz0123456789_{},*".contains(c))
    };
    span.contains("::") && span.split("::").all(word)
}

/// The references in `text`, in order: backticked `module::name` paths (after the word
/// `unit`: a unit test), and the backticked names after "fuzz target(s)".
fn references(text: &str) -> Vec<Reference> {
    let mut found = Vec::new();
    let (mut rest, mut fuzz) = (text, false);
    while let Some(start) = rest.find('`') {
        let gap = &rest[..start];
        let Some(len) = rest[start + 1..].find('`') else {
            break;
        };
        let span = &rest[start + 1..start + 1 + len];
        rest = &rest[start + len + 2..];
        fuzz = gap.contains("fuzz target") || (fuzz && gap.trim() == ",");
        if is_path(span) {
            let unit = gap.trim_end().ends_with("unit");
            for path in expand(span) {
                let mut parts: Vec<String> = path.split("::").map(str::to_owned).collect();
                let name = parts.pop().unwrap();
                found.push(match (unit, parts.len()) {
                    (false, 1) => Reference::Case {
                        module: parts.pop().unwrap(),
                        name,
                    },
                    _ => Reference::Unit { path: parts, name },
                });
            }
        } else if fuzz && span.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            found.push(Reference::Fuzz(span.to_owned()));
        }
    }
    found
}

/// The security model's section: the `proved by` cell of each table row, and the text
/// of the "does not protect" list.
fn section(doc: &str) -> (Vec<String>, String) {
    let start = doc
        .find(HEADING)
        .expect("docs/security-model.md states its security model");
    let body = &doc[start + HEADING.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let rows = body
        .lines()
        .filter(|l| {
            l.starts_with("| ") && !l.starts_with("| guarantee ") && !l.starts_with("| ---")
        })
        .map(|l| {
            let row = l.trim_end().trim_end_matches('|').trim_end();
            row.rsplit(" | ").next().unwrap().to_owned()
        })
        .collect();
    let marker = "does **not** protect";
    let rest = body.find(marker).map_or("", |at| &body[at..]);
    (rows, rest.to_owned())
}

/// The modules `tests/cases/mod.rs` declares, in its order.
fn modules(root: &Path) -> Vec<String> {
    let text = fs::read_to_string(root.join("tests/cases/mod.rs")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

fn declares(text: &str, name: &str) -> bool {
    match name.strip_suffix('*') {
        Some(prefix) => text.contains(&format!("fn {prefix}")),
        None => text.contains(&format!("fn {name}(")),
    }
}

/// The files a unit test of module `path` may live in.
fn unit_files(root: &Path, path: &[String]) -> Vec<PathBuf> {
    let dir = root.join("src").join(path.join("/"));
    let mut files = vec![
        dir.with_extension("rs"),
        dir.join("mod.rs"),
        dir.join("tests.rs"),
    ];
    if let Ok(entries) = fs::read_dir(dir.join("tests")) {
        files.extend(entries.map(|e| e.unwrap().path()));
    }
    files.retain(|f| f.is_file());
    files
}

/// Why `reference` is stale, if it is.
fn stale(root: &Path, declared: &[String], reference: &Reference) -> Option<String> {
    match reference {
        Reference::Case { module, name } => {
            let file = root.join(format!("tests/cases/{module}.rs"));
            let Ok(text) = fs::read_to_string(&file) else {
                return Some(format!("no file tests/cases/{module}.rs"));
            };
            if !declared.contains(module) {
                return Some(format!(
                    "tests/cases/mod.rs does not declare `mod {module};`"
                ));
            }
            (name != "*" && !declares(&text, name))
                .then(|| format!("no `fn {name}` in tests/cases/{module}.rs"))
        }
        Reference::Unit { path, name } => {
            let Some((tests, module)) = path.split_last() else {
                return Some("no module path".into());
            };
            if tests != "tests" {
                return Some("a unit test's path ends in `tests::name`".into());
            }
            let files = unit_files(root, module);
            if files.is_empty() {
                return Some(format!(
                    "no source file for module `{}` under src/",
                    module.join("::")
                ));
            }
            let texts: Vec<String> = files
                .iter()
                .map(|f| fs::read_to_string(f).unwrap())
                .collect();
            let found = match name.as_str() {
                "*" => texts
                    .iter()
                    .any(|t| t.contains("mod tests") || t.contains("fn ")),
                _ => texts.iter().any(|t| declares(t, name)),
            };
            (!found).then(|| format!("no `fn {name}` in {files:?}"))
        }
        Reference::Fuzz(name) => {
            let file = root.join(format!("fuzz/fuzz_targets/{name}.rs"));
            (!file.is_file()).then(|| format!("no file fuzz/fuzz_targets/{name}.rs"))
        }
    }
}

/// Every problem of `doc` against the tree at `root`, one line each.
fn problems(root: &Path, doc: &str) -> Vec<String> {
    let declared = modules(root);
    let (rows, unprotected) = section(doc);
    let mut problems = Vec::new();
    let mut all: Vec<Reference> = rows.iter().flat_map(|r| references(r)).collect();
    all.extend(references(&unprotected));
    for reference in &all {
        if let Some(why) = stale(root, &declared, reference) {
            problems.push(format!("stale reference {reference}: {why}"));
        }
    }

    // Each row starts with a test of the module it belongs to; those modules come in the
    // order mod.rs lists the guarantees.
    let guarantees: Vec<&String> = declared
        .iter()
        .filter(|m| !NOT_GUARANTEES.contains(&m.as_str()))
        .collect();
    let mut position = 0;
    for (n, row) in rows.iter().enumerate() {
        let home = match references(row).first() {
            Some(Reference::Case { module, .. }) => module.clone(),
            _ => {
                problems.push(format!(
                    "table row {}: its first reference is no `module::test`",
                    n + 1
                ));
                continue;
            }
        };
        match guarantees[position..].iter().position(|m| **m == home) {
            Some(at) => position += at,
            None => problems.push(format!(
                "table row {} (`{home}`) is out of the order of tests/cases/mod.rs's guarantee modules",
                n + 1
            )),
        }
    }

    // Every guarantee module is in the table; the allow-list names modules that exist.
    let tabled: Vec<Reference> = rows.iter().flat_map(|r| references(r)).collect();
    for module in &guarantees {
        let named = tabled
            .iter()
            .any(|r| matches!(r, Reference::Case { module: m, .. } if m == *module));
        if !named {
            problems.push(format!(
                "guarantee module tests/cases/{module}.rs is named nowhere in the security model's table \
                 (name it there, or add it to NOT_GUARANTEES if it proves no guarantee)"
            ));
        }
    }
    // Every file of tests/cases/ is compiled: a module mod.rs forgets runs nowhere.
    for entry in fs::read_dir(root.join("tests/cases")).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if stem != "mod" && !declared.contains(&stem) {
            problems.push(format!(
                "tests/cases/{stem}.rs is not declared in tests/cases/mod.rs"
            ));
        }
    }
    for module in NOT_GUARANTEES {
        if !declared.iter().any(|m| m == module) {
            problems.push(format!(
                "NOT_GUARANTEES names `{module}`, which tests/cases/mod.rs does not declare"
            ));
        }
    }
    problems
}

#[test]
fn every_test_the_security_model_names_exists_and_every_guarantee_module_is_named() {
    let root = root();
    let doc = fs::read_to_string(root.join(DOC)).unwrap();
    let (rows, unprotected) = section(&doc);
    assert!(rows.len() >= 15, "the table was not found: {rows:?}");
    assert!(references(&unprotected).len() >= 5, "{unprotected}");
    let problems = problems(&root, &doc);
    assert!(
        problems.is_empty(),
        "{DOC}'s security model and tests/cases/ disagree:\n{}",
        problems.join("\n")
    );
}

/// The checks see what they look for: each kind of stale reference, an unnamed module
/// and an out-of-order row are reported, naming the reference.
#[test]
fn the_checks_see_what_they_look_for() {
    assert_eq!(expand("a_{json,sse}_b_{1,2}").len(), 4);
    let doc = format!(
        "{HEADING}\n\n| guarantee | against | proved by |\n| --- | --- | --- |\n\
         | g | a | `tampering::no_such_test`, `no_such_module::x`, unit `proxy::upstream::tests::no_such`, fuzz targets `gate`, `no_such_target` |\n\
         | g | a | `sealing::manual_loop_sees_only_fresh_tokens_{{json,sse}}_mode` |\n\n\
         What it does **not** protect, by design:\n\n- x (`answers::gone`).\n\n## Next\n"
    );
    let problems = problems(&root(), &doc);
    for stale in [
        "`tampering::no_such_test`",
        "`no_such_module::x`",
        "unit `proxy::upstream::tests::no_such`",
        "fuzz target `no_such_target`",
        "`answers::gone`",
        "row 2 (`sealing`) is out of the order",
        "tests/cases/request_binding.rs is named nowhere",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(stale)),
            "{stale} not reported: {problems:#?}"
        );
    }
    let fine = [
        "fuzz target `gate`",
        "manual_loop_sees_only_fresh_tokens_json_mode",
    ];
    for reference in fine {
        assert!(
            !problems.iter().any(|p| p.contains(reference)),
            "{reference}: {problems:#?}"
        );
    }
}

/// README.md, then every Markdown file of docs/, by name.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let mut files = vec![root.join("README.md")];
    files.extend(docs);
    files
}

/// The lines of `text` outside fenced code blocks, numbered from 1 (a `# comment` in a
/// shell block is no heading, and a `](` in code no link).
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    text.lines().enumerate().filter_map(move |(n, line)| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return None;
        }
        (!fenced).then_some((n + 1, line))
    })
}

/// The anchor GitHub gives a heading: lowercase, each space a `-`, and every other
/// character but letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of `text`'s headings; a repeated heading's later copies get `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose(text) {
        let level = line.len() - line.trim_start_matches('#').len();
        if level == 0 || !line[level..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[level..]);
        let copies = seen.entry(base.clone()).or_default();
        anchors.insert(match *copies {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        });
        *copies += 1;
    }
    anchors
}

/// The targets of the inline links `[text](target)` in `line`, outside code spans.
fn link_targets(line: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    for piece in line.split('`').step_by(2) {
        let mut rest = piece;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            targets.push(&after[..end]);
            rest = &after[end..];
        }
    }
    targets
}

/// Every relative link of README.md and docs/*.md that leads nowhere, one line each, and
/// every file of docs/ the README does not link to.
fn broken_links(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut linked = BTreeSet::new();
    for file in markdown_files(root) {
        let text = fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root).unwrap().display().to_string();
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (target, None),
                };
                let resolved = match path {
                    "" => file.clone(),
                    path => file.parent().unwrap().join(path),
                };
                let Ok(resolved) = resolved.canonicalize() else {
                    problems.push(format!("{name}:{n}: ({target}): no such file"));
                    continue;
                };
                if !resolved.starts_with(root) {
                    problems.push(format!("{name}:{n}: ({target}): outside the repository"));
                    continue;
                }
                if name == "README.md" {
                    linked.insert(resolved.clone());
                }
                let Some(anchor) = anchor else { continue };
                let headings = match resolved.extension().is_some_and(|e| e == "md") {
                    true => anchors(&fs::read_to_string(&resolved).unwrap()),
                    false => BTreeSet::new(),
                };
                if !headings.contains(anchor) {
                    problems.push(format!("{name}:{n}: ({target}): no heading #{anchor}"));
                }
            }
        }
    }
    for doc in &markdown_files(root)[1..] {
        if !linked.contains(&doc.canonicalize().unwrap()) {
            problems.push(format!(
                "README.md does not link to {}",
                doc.strip_prefix(root).unwrap().display()
            ));
        }
    }
    problems
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let root = root().canonicalize().unwrap();
    let problems = broken_links(&root);
    assert!(
        problems.is_empty(),
        "broken links in the documentation:\n{}",
        problems.join("\n")
    );
}

/// The link check reads headings and links as GitHub does.
#[test]
fn the_link_check_reads_anchors_and_links_as_github_does() {
    assert_eq!(
        slug(" Prometheus, the dashboard, the alerts"),
        "prometheus-the-dashboard-the-alerts"
    );
    assert_eq!(slug(" What `tests/run.sh` does"), "what-testsrunsh-does");
    assert_eq!(
        slug(" Where a request's time goes"),
        "where-a-requests-time-goes"
    );
    let text = "# Faults\n\n```sh\n# not a heading\n```\n## Faults\n#nope\n";
    let found: Vec<String> = anchors(text).into_iter().collect();
    assert_eq!(found, ["faults", "faults-1"]);
    assert_eq!(
        link_targets("see [`a`](docs/a.md#b), `[c](not-a-link)` and [d](#e)."),
        ["docs/a.md#b", "#e"]
    );
}
