//! What a reload takes away: single-use targets, passthrough paths, host restrictions.
//! A file cut short by a torn write, or an edit that forgot a key, reverts the keys it no
//! longer mentions to their defaults; these are the ones whose default protects less, so
//! the operator is told by name at `warn` (the reload is still applied: the file is what
//! it asks for).
//!
//! Invariant: every key listed here is named when a reload changes it in the direction
//! that protects less, with what changed; nothing else of the file is logged.

use crate::config::Config;

/// One key a reload loosened, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loosened {
    pub(crate) key: &'static str,
    pub(crate) what: String,
}

/// The keys `new` loosens against `old`, in a fixed order.
pub(crate) fn loosened(old: &Config, new: &Config) -> Vec<Loosened> {
    let mut out = Vec::new();
    let mut note = |key: &'static str, what: String| out.push(Loosened { key, what });
    let (was, now) = (&old.single_use, &new.single_use);
    for (key, was, now) in [
        ("single_use.tools", &was.tools, &now.tools),
        ("single_use.prompts", &was.prompts, &now.prompts),
        ("single_use.resources", &was.resources, &now.resources),
    ] {
        let gone = missing(was, now);
        if !gone.is_empty() {
            note(key, format!("no longer single-use: {gone:?}"));
        }
    }
    if was.default && !now.default {
        note(
            "single_use.default",
            "unlisted targets are no longer single-use".to_owned(),
        );
    }
    let gone = missing(&old.passthrough_paths, &new.passthrough_paths);
    if !gone.is_empty() {
        note("passthrough_paths", format!("removed: {gone:?}"));
    }
    let added = missing(&new.passthrough_paths, &old.passthrough_paths);
    if !added.is_empty() {
        note(
            "passthrough_paths",
            format!("now forwarded without the gate: {added:?}"),
        );
    }
    match (&old.allowed_hosts, &new.allowed_hosts) {
        (Some(_), None) => note(
            "allowed_hosts",
            "the host restriction is removed (the default applies)".to_owned(),
        ),
        (Some(was), Some(now)) => {
            let added = missing(now, was);
            if !added.is_empty() {
                note("allowed_hosts", format!("now also accepted: {added:?}"));
            }
        }
        _ => {}
    }
    out
}

/// The entries of `from` that `to` lacks.
fn missing<'a>(from: &'a [String], to: &[String]) -> Vec<&'a str> {
    from.iter()
        .filter(|entry| !to.contains(entry))
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_loosening_is_named_and_tightening_is_not() {
        let mut old = Config::default();
        old.single_use.tools = strings(&["transfer", "delete_*"]);
        old.single_use.prompts = strings(&["confirm"]);
        old.single_use.default = true;
        old.passthrough_paths = strings(&["/oauth/token"]);
        old.allowed_hosts = Some(strings(&["mcp.example.com"]));

        // A file cut after its first table: everything below reverted to defaults.
        let mut torn = Config::default();
        torn.single_use.tools = strings(&["transfer"]);
        let keys: Vec<_> = loosened(&old, &torn).into_iter().map(|l| l.key).collect();
        assert_eq!(
            keys,
            [
                "single_use.tools",
                "single_use.prompts",
                "single_use.default",
                "passthrough_paths",
                "allowed_hosts"
            ]
        );
        let first = &loosened(&old, &torn)[0];
        assert!(first.what.contains("delete_*"), "{first:?}");
        assert!(!first.what.contains("\"transfer\""), "{first:?}");

        // More protection is no news; an added passthrough path and host are.
        let mut tighter = old.clone();
        tighter.single_use.tools.push("wire".into());
        tighter.allowed_hosts = Some(vec![]);
        assert!(loosened(&old, &tighter).is_empty());
        let mut wider = old.clone();
        wider.passthrough_paths.push("/admin".into());
        wider.allowed_hosts = Some(strings(&["mcp.example.com", "*"]));
        let wider = loosened(&old, &wider);
        assert_eq!(wider.len(), 2, "{wider:?}");
        assert!(wider[0].what.contains("/admin"));
        assert!(wider[1].what.contains("\"*\""));
        assert!(loosened(&old, &old).is_empty());
    }
}
