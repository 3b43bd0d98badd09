//! Tests of configuration loading and validation; environment changes go through
//! `figment::Jail` only (it serialises tests and restores the environment). The rules
//! themselves are tested next to them, in `validate.rs`.
#![allow(
    clippy::result_large_err,
    reason = "figment::Jail closures must return figment::Error"
)]

use super::validate::tests::assert_only;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Jail;
use figment::providers::Format;

use super::load::LEAVES;
use super::*;

mod assembly;

const SHIPPED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/mcp-state-guard.toml");

fn load_err(file: Option<&Path>, overrides: &Overrides) -> Vec<ConfigProblem> {
    Config::load(file, overrides)
        .expect_err("configuration must be refused")
        .0
}

/// The problems for `key` in `problems`, asserting there is at least one.
fn messages_for<'a>(problems: &'a [ConfigProblem], key: &str) -> Vec<&'a str> {
    let found: Vec<&str> = problems
        .iter()
        .filter(|p| p.key == key)
        .map(|p| p.message.as_str())
        .collect();
    assert!(!found.is_empty(), "no problem for {key} in {problems:#?}");
    found
}

#[test]
fn defaults_load_and_validate() {
    Jail::expect_with(|_| {
        let config = Config::load(None, &Overrides::default()).unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(
            config.listen,
            "127.0.0.1:8080".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(config.upstream, "http://127.0.0.1:3000");
        assert_eq!(config.state.ttl_seconds, 600);
        assert_eq!(config.limits.max_body_bytes, 4_194_304);
        assert!(config.validate().is_empty());
        Ok(())
    });
}

#[test]
fn shipped_file_is_the_defaults() {
    Jail::expect_with(|_| {
        let config = Config::load(Some(Path::new(SHIPPED)), &Overrides::default())
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(config, Config::default());
        assert!(config.validate().is_empty());
        Ok(())
    });
    // Every key is spelled out, not merely defaulted: the file alone extracts.
    let file = figment::Figment::from(figment::providers::Toml::file_exact(SHIPPED));
    assert_eq!(file.extract::<Config>().unwrap(), Config::default());
    let dict: figment::value::Dict = file.extract().unwrap();
    let mut keys = BTreeSet::new();
    leaf_paths("", &figment::value::Value::from(dict), &mut keys);
    let optional = [
        "allowed_hosts",
        "admin.token_file",
        "state.audience",
        "state.keys_file",
        "single_use.redis_url",
        // Unset: a fraction of the bound they share (the file shows the default's value).
        "single_use.max_entries_per_principal",
        "idempotency.max_bytes_per_principal",
        "limits.max_connections_per_peer",
        "upstream_command.queue_max_per_principal",
        "upstream_command.max_sessions_per_principal",
        "principal.jwt.issuer",
        "principal.jwt.audience",
        "principal.jwt.jwks_file",
        "principal.jwt.jwks_url",
        "principal.jwt.jwks_ca_file",
        "principal.jwt.resource_metadata",
        "tls.cert_file",
        "tls.key_file",
        "tls.client_ca_file",
        "upstream_tls.ca_file",
        "upstream_tls.cert_file",
        "upstream_tls.key_file",
        "upstream_command.cwd",
        "log.format",
    ];
    let expected: BTreeSet<String> = LEAVES
        .iter()
        .map(|leaf| leaf.key.to_string())
        .filter(|key| !optional.contains(&key.as_str()))
        .collect();
    assert_eq!(keys, expected);
}

/// Keys whose value is a table of the operator's names: one leaf, not a section.
const MAP_LEAVES: [&str; 1] = ["upstream_command.env"];

fn leaf_paths(prefix: &str, value: &figment::value::Value, out: &mut BTreeSet<String>) {
    match value.as_dict() {
        Some(dict) if !MAP_LEAVES.contains(&prefix) => {
            for (name, child) in dict {
                let key = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                leaf_paths(&key, child, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned());
        }
    }
}

#[test]
fn leaf_table_matches_the_struct() {
    fn json_leaves(prefix: &str, value: &serde_json::Value, out: &mut BTreeSet<String>) {
        match value.as_object() {
            Some(map) if !MAP_LEAVES.contains(&prefix) => {
                for (name, child) in map {
                    let key = if prefix.is_empty() {
                        name.clone()
                    } else {
                        format!("{prefix}.{name}")
                    };
                    json_leaves(&key, child, out);
                }
            }
            _ => {
                out.insert(prefix.to_owned());
            }
        }
    }
    let mut from_struct = BTreeSet::new();
    json_leaves(
        "",
        &serde_json::to_value(Config::default()).unwrap(),
        &mut from_struct,
    );
    let from_table: BTreeSet<String> = LEAVES.iter().map(|leaf| leaf.key.to_string()).collect();
    assert_eq!(from_struct, from_table);
}

#[test]
fn file_overrides_defaults() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "c.toml",
            r#"
            listen = "0.0.0.0:8443"
            upstream = "http://mcp:8000/base/"
            passthrough_paths = ["/oauth/token"]
            [state]
            audience = "https://mcp.example.com"
            keys_file = "/etc/keys"
            ttl_seconds = 120
            [principal]
            source = "header"
            header = "X-Auth-User"
            [log]
            format = "json"
            level = "debug,hyper=warn"
            "#,
        )?;
        let config = Config::load(Some(Path::new("c.toml")), &Overrides::default()).unwrap();
        assert_eq!(config.listen, "0.0.0.0:8443".parse::<SocketAddr>().unwrap());
        assert_eq!(config.upstream, "http://mcp:8000/base/");
        assert_eq!(config.passthrough_paths, ["/oauth/token"]);
        assert_eq!(
            config.state.audience.as_deref(),
            Some("https://mcp.example.com")
        );
        assert_eq!(config.state.keys_file, Some(PathBuf::from("/etc/keys")));
        assert_eq!(config.state.ttl_seconds, 120);
        assert_eq!(
            config.state.reload_interval_ms, 2000,
            "untouched keys keep defaults"
        );
        assert_eq!(config.principal.source, PrincipalSource::Header);
        assert_eq!(config.principal.header, "x-auth-user", "stored lowercase");
        assert_eq!(config.log.format, Some(LogFormat::Json));
        assert_eq!(config.log.level, "debug,hyper=warn");
        Ok(())
    });
}

#[test]
fn env_overrides_file() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "c.toml",
            "listen = \"0.0.0.0:1\"\n[state]\nttl_seconds = 120\naudience = \"a\"\n",
        )?;
        jail.set_env("MCP_STATE_GUARD_LISTEN", "0.0.0.0:2");
        jail.set_env("MCP_STATE_GUARD_STATE__TTL_SECONDS", "30");
        jail.set_env("MCP_STATE_GUARD_STATE__KEYS_FILE", "/run/keys");
        jail.set_env("MCP_STATE_GUARD_PASSTHROUGH_PATHS", r#"["/oauth/token"]"#);
        jail.set_env("MCP_STATE_GUARD_PRINCIPAL__FORWARD_HEADER", "true");
        jail.set_env("MCP_STATE_GUARD_LOG__LEVEL", "info,hyper=warn");
        let config = Config::load(Some(Path::new("c.toml")), &Overrides::default()).unwrap();
        assert_eq!(config.listen, "0.0.0.0:2".parse::<SocketAddr>().unwrap());
        assert_eq!(config.state.ttl_seconds, 30);
        assert_eq!(
            config.state.audience.as_deref(),
            Some("a"),
            "file value kept"
        );
        assert_eq!(config.state.keys_file, Some(PathBuf::from("/run/keys")));
        assert_eq!(config.passthrough_paths, ["/oauth/token"]);
        assert!(config.principal.forward_header);
        assert_eq!(config.log.level, "info,hyper=warn");
        Ok(())
    });
}

#[test]
fn flags_override_env() {
    Jail::expect_with(|jail| {
        jail.set_env("MCP_STATE_GUARD_LISTEN", "0.0.0.0:2");
        jail.set_env("MCP_STATE_GUARD_UPSTREAM", "http://env:1");
        let overrides = Overrides {
            listen: Some("127.0.0.1:7".parse().unwrap()),
            upstream: Some("http://flag:2/mcp".to_owned()),
            ..Overrides::default()
        };
        let config = Config::load(None, &overrides).unwrap();
        assert_eq!(config.listen, "127.0.0.1:7".parse::<SocketAddr>().unwrap());
        assert_eq!(config.upstream, "http://flag:2/mcp");
        // A bad flag value is reported as coming from the flag.
        let overrides = Overrides {
            upstream: Some("ftp://flag".to_owned()),
            ..Overrides::default()
        };
        let problems = load_err(None, &overrides);
        let message = messages_for(&problems, "upstream")[0];
        assert!(
            message.contains("set by command-line flag --upstream"),
            "{message}"
        );
        Ok(())
    });
}

#[test]
fn unknown_key_in_file_is_named() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "c.toml",
            "listn = \"0.0.0.0:1\"\n[state]\nkeys_fil = \"/k\"\n",
        )?;
        let problems = load_err(Some(Path::new("c.toml")), &Overrides::default());
        assert_eq!(problems.len(), 2, "{problems:#?}");
        let top = messages_for(&problems, "listn")[0];
        assert!(
            top.starts_with("unknown key; expected one of `listen`"),
            "{top}"
        );
        assert!(top.contains("c.toml"), "names the file: {top}");
        let nested = messages_for(&problems, "state.keys_fil")[0];
        assert!(nested.contains("`keys_file`"), "{nested}");
        let shown = ConfigErrors(problems).to_string();
        assert!(shown.contains("state.keys_fil (MCP_STATE_GUARD_STATE__KEYS_FIL): unknown key"));
        Ok(())
    });
}

#[test]
fn unknown_env_var_is_named() {
    Jail::expect_with(|jail| {
        jail.set_env("MCP_STATE_GUARD_LISTN", "0.0.0.0:1");
        jail.set_env("MCP_STATE_GUARD_STATE__TTL", "5");
        let problems = load_err(None, &Overrides::default());
        assert_eq!(problems.len(), 2, "{problems:#?}");
        let shown = ConfigErrors(problems).to_string();
        assert!(
            shown.contains("listn (MCP_STATE_GUARD_LISTN): unknown key"),
            "{shown}"
        );
        assert!(shown.contains("set by environment variable MCP_STATE_GUARD_LISTN"));
        assert!(shown.contains("state.ttl (MCP_STATE_GUARD_STATE__TTL): unknown key"));
        Ok(())
    });
}

#[test]
fn section_that_is_not_a_table_is_one_problem() {
    Jail::expect_with(|jail| {
        jail.set_env("MCP_STATE_GUARD_STATE", "5");
        let problems = load_err(None, &Overrides::default());
        assert_only(&problems, "state", "must be a table of `audience`");
        Ok(())
    });
}

#[test]
fn missing_file_is_an_error() {
    Jail::expect_with(|_| {
        let problems = load_err(Some(Path::new("absent.toml")), &Overrides::default());
        assert_only(&problems, "", "absent.toml");
        // The figment alone refuses it too (no silent fallback to defaults).
        let figment = Config::figment(Some(Path::new("absent.toml")), &Overrides::default());
        assert!(figment.extract::<Config>().is_err());
        Ok(())
    });
}

#[test]
fn unparseable_file_is_an_error_without_echoing_it() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "c.toml",
            "[single_use]\nredis_url = \"redis://:hunter2@r:6379\n",
        )?;
        let problems = load_err(Some(Path::new("c.toml")), &Overrides::default());
        assert_eq!(problems.len(), 1, "{problems:#?}");
        let shown = problems[0].to_string();
        assert!(shown.contains("line 2"), "{shown}");
        assert!(shown.contains("c.toml"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        Ok(())
    });
}

#[test]
fn every_extraction_problem_in_one_pass() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "c.toml",
            r#"
            listen = "nowhere"
            bogus = 1
            [state]
            ttl_seconds = "soon"
            [principal]
            source = "ldap"
            [limits]
            max_body_bytes = -1
            "#,
        )?;
        jail.set_env("MCP_STATE_GUARD_TIMEOUTS__CONNECT_MS", "fast");
        jail.set_env("MCP_STATE_GUARD_SINGLE_USE__REDIS_URL", "[1, 2]");
        let problems = load_err(Some(Path::new("c.toml")), &Overrides::default());
        let keys: BTreeSet<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        let expected = [
            "bogus",
            "limits.max_body_bytes",
            "listen",
            "principal.source",
            "single_use.redis_url",
            "state.ttl_seconds",
            "timeouts.connect_ms",
        ];
        assert_eq!(keys, expected.into_iter().collect(), "{problems:#?}");
        assert_eq!(problems.len(), expected.len());
        let connect = messages_for(&problems, "timeouts.connect_ms")[0];
        assert!(connect.contains("environment variable MCP_STATE_GUARD_TIMEOUTS__CONNECT_MS"));
        let ttl = messages_for(&problems, "state.ttl_seconds")[0];
        assert!(ttl.contains("c.toml"), "{ttl}");
        let source = messages_for(&problems, "principal.source")[0];
        assert!(source.starts_with("unknown value `ldap`; expected one of `none`, `header`"));
        let listen = messages_for(&problems, "listen")[0];
        assert!(listen.contains("such as 127.0.0.1:8080"), "{listen}");
        let redis = messages_for(&problems, "single_use.redis_url")[0];
        assert!(redis.contains("not shown"), "{redis}");
        for problem in &problems {
            let shown = problem.to_string();
            assert!(shown.starts_with(&format!("{} ({})", problem.key, env_var_for(&problem.key))));
        }
        Ok(())
    });
}

#[test]
fn type_and_rule_problems_in_one_pass() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "c.toml",
            "[state]\nttl_seconds = \"soon\"\nkeys_file = \"/k\"\n[principal]\nsource = \"jwt\"\n",
        )?;
        let problems = load_err(Some(Path::new("c.toml")), &Overrides::default());
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "state.ttl_seconds",
                "state.audience",
                "principal.jwt.issuer",
                "principal.jwt.audience",
                "principal.jwt.jwks_file"
            ]
        );
        Ok(())
    });
}

#[test]
fn every_validation_problem_in_one_pass() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "c.toml",
            r#"
            upstream = "ftp://mcp"
            passthrough_paths = ["oauth"]
            [state]
            keys_file = "/k"
            ttl_seconds = 0
            reload_interval_ms = 1
            [principal]
            source = "mtls"
            header = "bad header"
            [single_use]
            tools = [""]
            redis_url = "redis://:hunter2@r"
            [limits]
            max_state_bytes = 1
            [timeouts]
            connect_ms = 0
            [log]
            level = " "
            "#,
        )?;
        let errors = Config::load(Some(Path::new("c.toml")), &Overrides::default()).unwrap_err();
        let expected = [
            "upstream",
            "passthrough_paths",
            "state.audience",
            "state.ttl_seconds",
            "state.reload_interval_ms",
            "principal.header",
            "single_use.redis_url",
            "single_use.tools",
            "limits.max_state_bytes",
            "timeouts.connect_ms",
            "log.level",
            "tls.client_ca_file",
        ];
        let keys: Vec<&str> = errors.0.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, expected);
        let shown = errors.to_string();
        assert_eq!(shown.lines().count(), expected.len());
        for (line, key) in shown.lines().zip(expected) {
            assert!(
                line.starts_with(&format!("{key} ({}): ", env_var_for(key))),
                "{line}"
            );
        }
        assert!(shown.contains(
            "state.audience (MCP_STATE_GUARD_STATE__AUDIENCE): required when state.keys_file is set"
        ));
        assert!(
            shown.contains("must be between 1 and 86400 (set by TOML file"),
            "{shown}"
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        Ok(())
    });
}

#[test]
fn env_var_names() {
    assert_eq!(env_var_for("listen"), "MCP_STATE_GUARD_LISTEN");
    assert_eq!(
        env_var_for("state.keys_file"),
        "MCP_STATE_GUARD_STATE__KEYS_FILE"
    );
    let problem = ConfigProblem::new("single_use.tools", "boom");
    assert_eq!(
        problem.to_string(),
        "single_use.tools (MCP_STATE_GUARD_SINGLE_USE__TOOLS): boom"
    );
}

#[test]
fn the_upstream_command_flag_switches_to_stdio() {
    Jail::expect_with(|_| {
        let overrides = Overrides {
            upstream_command: Some(vec!["python".into(), "server.py".into()]),
            ..Overrides::default()
        };
        let config = Config::load(None, &overrides).unwrap();
        assert!(config.is_stdio());
        assert_eq!(config.upstream_command.argv, ["python", "server.py"]);
        // Defaults of the rest of the table survive the flag's partial table.
        assert_eq!(config.upstream_command.queue_max, 256);
        Ok(())
    });
}
