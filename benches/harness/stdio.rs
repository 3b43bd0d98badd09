//! The stdio row (issue 23): the same MRTR workload through a sidecar whose upstream is
//! the harness's fast upstream in stdio mode (`upstream = "stdio"`, this executable with
//! `--role-stdio-upstream` as its child): one line in, one line out, the bridge's own id
//! echoed, no parsing beyond finding it. Compared with the HTTP upstream's direct figures
//! (A), since a stdio server has no direct HTTP path to measure. Its rows are measured as
//! every sidecar-only row is (`sidecar_rows`).

use super::upstream;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

/// When `args` say this process is the stdio upstream, serve stdin until EOF; `false`
/// otherwise.
pub fn run_if_asked(args: &[String]) -> bool {
    if !args.iter().any(|a| a == "--role-stdio-upstream") {
        return false;
    }
    serve();
    true
}

/// Answer each request line: `server/discover`, a retry (it names a `requestState`) with
/// the final result, anything else with the `input_required` round; notifications get
/// nothing. Flushed whenever no more input is buffered.
fn serve() {
    let first = upstream::input_required();
    let (first_head, first_tail) = first.split_once(r#""id":1"#).expect("an id");
    let complete = upstream::complete();
    let (done_head, done_tail) = complete.split_once(r#""id":1"#).expect("an id");
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Some(id) = id_of(&line) else { continue };
        let (head, tail) = if line.contains(r#""method":"server/discover""#) {
            (
                r#"{"jsonrpc":"2.0","#,
                r#","result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"resultType":"complete"}}"#,
            )
        } else if line.contains(r#""requestState""#) {
            (done_head, done_tail)
        } else {
            (first_head, first_tail)
        };
        let written = writeln!(output, "{head}\"id\":{id}{tail}");
        if written.is_err() || (input.buffer().is_empty() && output.flush().is_err()) {
            return;
        }
    }
}

/// The value of the first `"id":` (a request's own, written before its params).
fn id_of(line: &str) -> Option<&str> {
    let rest = &line[line.find(r#""id":"#)? + 5..];
    let end = rest.find([',', '}'])?;
    Some(rest[..end].trim())
}

/// The stdio sidecar's configuration: the sidecar's (`base`) with the child instead of
/// the URL.
pub fn config(base: &str, me: &Path) -> String {
    let mut lines: Vec<String> = base
        .lines()
        .filter(|l| !l.starts_with("upstream = "))
        .map(str::to_owned)
        .collect();
    lines.insert(0, "upstream = \"stdio\"".into());
    // The harness is one caller: it gets the whole queue as its share (the default
    // share, a quarter of `queue_max`, is 64: wrk's 64 connections would sit at it).
    lines.push(format!(
        "[upstream_command]\nargv = [{:?}, \"--role-stdio-upstream\"]\n\
         queue_max = 256\nqueue_max_per_principal = 256",
        me.display().to_string()
    ));
    lines.join("\n") + "\n"
}
