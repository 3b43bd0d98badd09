//! The binary's contract: `keygen`, `check-config` listing every problem, `run` refusing
//! a bad configuration, and the one command the README gives working on the defaults.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-state-guard"));
    // A stray MCP_STATE_GUARD_* variable in the environment would be an unknown key.
    for (key, _) in std::env::vars() {
        if key.starts_with("MCP_STATE_GUARD_") {
            command.env_remove(key);
        }
    }
    command
}

#[test]
fn keygen_prints_one_fresh_key_line() {
    let a = binary().arg("keygen").output().unwrap();
    let b = binary().arg("keygen").output().unwrap();
    assert!(a.status.success());
    let line = String::from_utf8(a.stdout).unwrap();
    assert_eq!(line.len(), 65, "{line:?}");
    assert!(line[..64].bytes().all(|c| c.is_ascii_hexdigit()) && line.ends_with('\n'));
    assert_ne!(line, String::from_utf8(b.stdout).unwrap());
}

/// `check-config --config path`: exit code and standard error.
fn check_config(path: &std::path::Path) -> (Option<i32>, String) {
    let out = binary()
        .args(["check-config", "--config"])
        .arg(path)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

/// Third review, finding 3: with a stdio child every path is MCP, so a passthrough path
/// was a raw channel to it, and `check-config` called the combination valid.
#[test]
fn check_config_refuses_passthrough_paths_with_a_stdio_child() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        "upstream = \"stdio\"\npassthrough_paths = [\"/oauth/token\"]\n\
         [upstream_command]\nargv = [\"python3\", \"server.py\"]\n",
    )
    .unwrap();
    let (code, stderr) = check_config(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("passthrough_paths (MCP_STATE_GUARD_PASSTHROUGH_PATHS)")
            && stderr.contains("must be empty when upstream is \"stdio\""),
        "{stderr}"
    );
    std::fs::write(
        &config,
        "upstream = \"stdio\"\n[upstream_command]\nargv = [\"python3\", \"server.py\"]\n",
    )
    .unwrap();
    let (code, stderr) = check_config(&config);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn check_config_lists_every_problem_with_key_and_env_var() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::write(&keys, "short\n").unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "upstream = \"ftp://x\"\n[state]\nkeys_file = {:?}\nttl_seconds = 0\n[principal]\nsource = \"jwt\"\n",
            keys.display().to_string()
        ),
    )
    .unwrap();
    let (code, stderr) = check_config(&config);
    assert_eq!(code, Some(1));
    for needle in [
        "upstream (MCP_STATE_GUARD_UPSTREAM)",
        "state.ttl_seconds (MCP_STATE_GUARD_STATE__TTL_SECONDS)",
        "state.audience (MCP_STATE_GUARD_STATE__AUDIENCE)",
        "principal.jwt.issuer (MCP_STATE_GUARD_PRINCIPAL__JWT__ISSUER)",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in:\n{stderr}");
    }

    // Once the configuration is fixed, the key file itself is checked (line and reason,
    // never the secret).
    std::fs::write(
        &config,
        format!(
            "[state]\nkeys_file = {:?}\naudience = \"svc\"\n",
            keys.display().to_string()
        ),
    )
    .unwrap();
    let (code, stderr) = check_config(&config);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("line 1") && stderr.contains("at least 32"),
        "{stderr}"
    );
    assert!(!stderr.contains("short"), "the secret leaked: {stderr}");

    std::fs::write(&keys, "0123456789abcdef0123456789abcdef0123456789abcdef\n").unwrap();
    let (code, stderr) = check_config(&config);
    assert_eq!(code, Some(0), "{stderr}");

    // The admin secret's file is read by start-up's file checks, which check-config runs.
    let token = dir.path().join("admin-token");
    std::fs::write(&token, "short-secret\n").unwrap();
    std::fs::write(
        &config,
        format!(
            "[state]\nkeys_file = {:?}\naudience = \"svc\"\n[admin]\ntoken_file = {:?}\n",
            keys.display().to_string(),
            token.display().to_string()
        ),
    )
    .unwrap();
    let (code, stderr) = check_config(&config);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("admin.token_file (MCP_STATE_GUARD_ADMIN__TOKEN_FILE)")
            && stderr.contains("at least 16"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("short-secret"),
        "the secret leaked: {stderr}"
    );
    std::fs::remove_file(&token).unwrap();
    let (code, stderr) = check_config(&config);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot be read"), "{stderr}");
}

#[test]
fn run_refuses_an_invalid_configuration_and_starts_on_the_defaults() {
    let out = binary()
        .args(["run", "--upstream", "ftp://example.com"])
        .env("MCP_STATE_GUARD_STATE__TTL_SECONDS", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("upstream (MCP_STATE_GUARD_UPSTREAM)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("MCP_STATE_GUARD_STATE__TTL_SECONDS"),
        "{stderr}"
    );

    // The README's run command on the embedded default, on free ports: it warns loudly
    // about the process-local key, serves, and exits cleanly on SIGTERM.
    let mut child = binary()
        .args(["run", "--listen", "127.0.0.1:0"])
        .env("MCP_STATE_GUARD_ADMIN_LISTEN", "127.0.0.1:0")
        .env("MCP_STATE_GUARD_TIMEOUTS__DRAIN_MS", "600")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    std::thread::sleep(Duration::from_millis(700));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the sidecar did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = reader.join().unwrap();
    assert!(status.success(), "{log}");
    assert!(log.contains("process-local random key"), "{log}");
    assert!(log.contains("mcp-state-guard ready"), "{log}");
}

#[test]
fn version_names_the_commit() {
    let out = binary().arg("--version").output().unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let expected = format!(
        "mcp-state-guard {} (commit {})\n",
        env!("CARGO_PKG_VERSION"),
        mcp_state_guard::facade::version::COMMIT
    );
    assert_eq!(line, expected);
    // A checkout builds with its commit; a tarball without git says so.
    let commit = mcp_state_guard::facade::version::COMMIT;
    assert!(
        commit == "unknown" || (commit.len() >= 7 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{commit}"
    );
}

#[test]
fn every_flag_is_described_in_help() {
    for (command, flags) in [
        (
            "run",
            &["--config", "--listen", "--upstream", "--upstream-command"][..],
        ),
        ("check-config", &["--config"][..]),
    ] {
        let out = binary().args([command, "--help"]).output().unwrap();
        assert!(out.status.success());
        let help = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = help.lines().collect();
        for flag in flags {
            let at = lines
                .iter()
                .position(|l| l.trim_start().starts_with(flag))
                .unwrap_or_else(|| panic!("{command} --help lacks {flag}:\n{help}"));
            // The description follows the flag on the next line (clap's long help).
            let description = lines.get(at + 1).map(|l| l.trim()).unwrap_or_default();
            assert!(
                description.len() > 20,
                "{command} {flag} is not described:\n{help}"
            );
        }
    }
}

/// Reads `child`'s standard error until the ready line; its lines so far.
fn until_ready(child: &mut std::process::Child) -> Vec<String> {
    use std::io::BufRead;
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let ready = line.contains("mcp-state-guard ready");
        lines.push(line);
        if ready {
            break;
        }
    }
    lines
}

#[test]
fn logs_are_json_off_a_terminal_unless_text_is_asked_for() {
    for format in [None, Some("json"), Some("text")] {
        let mut command = binary();
        command
            .args(["run", "--listen", "127.0.0.1:0"])
            .env("MCP_STATE_GUARD_ADMIN_LISTEN", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(format) = format {
            command.env("MCP_STATE_GUARD_LOG__FORMAT", format);
        }
        let mut child = command.spawn().unwrap();
        let lines = until_ready(&mut child);
        let _ = child.kill();
        let _ = child.wait();
        assert!(!lines.is_empty());
        let json = lines
            .iter()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok());
        assert_eq!(json, format != Some("text"), "{format:?}: {lines:#?}");
    }
}

/// The README's one command for a stdio server: `run --upstream-command -- ARGV...` runs it
/// as the sidecar's child, which answers `server/discover`; SIGTERM drains, then stops the
/// child, and the sidecar exits cleanly. Without `--`, or with `--upstream` too, the
/// command line is refused.
#[test]
fn upstream_command_runs_a_stdio_server_as_the_child() {
    let python = crate::support::python::interpreter();
    let script = crate::support::python::repo_path("tests/py/stdio_child.py");
    let mut child = binary()
        .args(["run", "--listen", "127.0.0.1:0", "--upstream-command", "--"])
        .arg(&python)
        .arg(&script)
        .env("MCP_STATE_GUARD_ADMIN_LISTEN", "127.0.0.1:0")
        .env("MCP_STATE_GUARD_TIMEOUTS__DRAIN_MS", "600")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log.contains("answered server/discover") {
        assert!(Instant::now() < deadline, "{log}");
        if stderr.read_line(&mut log).unwrap() == 0 {
            panic!("the sidecar exited: {log}");
        }
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the sidecar did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    log.push_str(&reader.join().unwrap());
    assert!(status.success(), "{status:?}: {log}");
    assert!(log.contains("stdio upstream stopped"), "{log}");

    for args in [
        &["run", "--upstream-command"][..],
        &[
            "run",
            "--upstream",
            "http://127.0.0.1:1",
            "--upstream-command",
            "--",
            "x",
        ][..],
    ] {
        let out = binary().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}
