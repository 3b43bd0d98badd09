//! The sidecar's log after the soak (JSON lines on stderr, at `warn`): its lines counted
//! by level and message, and searched for what must never be in it: a sealed token or
//! handle, or the upstream's plaintext state.

use std::collections::BTreeMap;
use std::path::Path;

/// What the log held.
pub struct Summary {
    pub lines: u64,
    pub bytes: u64,
    /// (level, message) → lines.
    pub messages: BTreeMap<(String, String), u64>,
    pub errors: u64,
    /// Lines holding a token, a handle or plaintext state; the first one, clipped.
    pub leaks: u64,
    pub first_leak: Option<String>,
}

/// Read and summarise the log at `path`; `plaintext` marks the upstream's state.
pub fn summarise(path: &Path, plaintext: &str) -> Result<Summary, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut summary = Summary {
        lines: 0,
        bytes: text.len() as u64,
        messages: BTreeMap::new(),
        errors: 0,
        leaks: 0,
        first_leak: None,
    };
    for line in text.lines() {
        summary.lines += 1;
        let (level, message) = match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) => (
                v["level"].as_str().unwrap_or("?").to_owned(),
                v["fields"]["message"].as_str().unwrap_or("?").to_owned(),
            ),
            Err(_) => ("?".to_owned(), "(not a JSON line)".to_owned()),
        };
        summary.errors += u64::from(level == "ERROR");
        *summary.messages.entry((level, message)).or_default() += 1;
        if line.contains(plaintext) || sealed(line, "v1.") || sealed(line, "h1.") {
            summary.leaks += 1;
            summary
                .first_leak
                .get_or_insert_with(|| line.chars().take(300).collect());
        }
    }
    Ok(summary)
}

/// Whether `line` holds `prefix` followed by what a sealed value's body looks like (at
/// least 40 base64url characters).
fn sealed(line: &str, prefix: &str) -> bool {
    line.match_indices(prefix).any(|(at, _)| {
        line[at + prefix.len()..]
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
            .count()
            >= 40
    })
}
