//! The leaf table against serde: every key, set to a value that is not its default,
//! is stored by its leaf exactly as extracting the whole configuration stores it.

use super::super::load::LEAVES;
use super::super::*;
use figment::Jail;
use std::path::Path;

#[test]
fn assembly_leaf_by_leaf_matches_serde() {
    // Every key set to a non-default value: the leaf table must store each one in the
    // field serde does, or a misrouted leaf would hide behind a default.
    Jail::expect_with(|jail| {
        jail.create_file(
            "all.toml",
            r#"
            listen = "0.0.0.0:1"
            upstream = "http://u:2/b"
            admin_listen = "0.0.0.0:3"
            passthrough_paths = ["/p"]
            allowed_hosts = ["mcp.example.com"]
            [upstream_command]
            argv = ["server", "--stdio"]
            env = { A = "1" }
            cwd = "/srv"
            inherit_env = true
            restart_min_ms = 26
            restart_max_ms = 27
            queue_max = 28
            queue_max_per_principal = 7
            max_sessions = 9
            max_sessions_per_principal = 3
            session_idle_ms = 31
            [state]
            audience = "aud"
            keys_file = "/k"
            ttl_seconds = 4
            reload_interval_ms = 500
            [principal]
            source = "mtls"
            header = "X-User"
            forward_header = true
            trusted_proxies = ["10.0.0.0/8"]
            [principal.mtls]
            identity = "subject"
            [principal.jwt]
            issuer = "https://issuer"
            audience = "https://mcp"
            jwks_file = "/jwks.json"
            jwks_url = "https://issuer/jwks"
            jwks_ca_file = "/jwks-ca.pem"
            leeway_seconds = 5
            resource_metadata = "https://mcp/.well-known/oauth-protected-resource"
            forward_authorization = false
            jwks_refresh_seconds = 30
            jwks_cooldown_seconds = 3
            verified_tokens = 77
            [tls]
            cert_file = "/cert.pem"
            key_file = "/key.pem"
            client_ca_file = "/ca.pem"
            reload_interval_ms = 300
            [upstream_tls]
            ca_file = "/up-ca.pem"
            cert_file = "/up-cert.pem"
            key_file = "/up-key.pem"
            [single_use]
            store = "redis"
            redis_url = "redis://r"
            tools = ["t"]
            prompts = ["p"]
            resources = ["r"]
            default = true
            on_store_error = "allow"
            memory_max_entries = 5
            max_entries_per_principal = 4
            redis_key_prefix = "k:"
            redis_timeout_ms = 11
            redis_wait_replicas = 2
            redis_wait_ms = 12
            [mrtr]
            max_rounds = 3
            max_flow_seconds = 4
            [admin]
            token_file = "/t"
            [limits]
            max_body_bytes = 2000
            max_event_bytes = 3000
            max_state_bytes = 100
            max_json_values = 1000
            max_buffered_bytes = 9000
            max_connections = 12
            max_connections_per_peer = 11
            http2_max_concurrent_streams = 13
            http2_max_header_list_bytes = 2048
            upstream_max_idle_per_host = 14
            [timeouts]
            connect_ms = 6
            response_head_ms = 7
            drain_ms = 8
            header_read_ms = 9
            body_read_ms = 10
            client_idle_ms = 15
            upstream_idle_ms = 16
            [log]
            format = "json"
            level = "warn"
            [readyz]
            check_upstream = false
            upstream_timeout_ms = 17
            max_key_age_seconds = 18
            [idempotency]
            tools = ["w"]
            require_key = ["w2"]
            ttl_seconds = 19
            max_result_bytes = 20
            strip_key = true
            lease_ms = 21
            memory_max_bytes = 22
            max_records_per_principal = 23
            max_bytes_per_principal = 24
            max_in_flight_per_principal = 25
            [[handles]]
            kind = "import"
            issued_by = ["start"]
            result_pointer = "/structuredContent/id"
            accepted_by = ["append"]
            argument_pointer = "/id"
            "#,
        )?;
        let figment = Config::figment(Some(Path::new("all.toml")), &Overrides::default());
        let whole: Config = figment.extract()?;
        let first = figment::Error::from("stand-in");
        let (assembled, problems) = super::load::assemble(&figment, first).unwrap();
        assert_eq!(assembled, whole);
        assert_eq!(problems.len(), 1, "only the stand-in error: {problems:#?}");
        let defaults = serde_json::to_value(Config::default()).unwrap();
        let all = serde_json::to_value(&whole).unwrap();
        for super::load::Leaf { key, .. } in LEAVES {
            let pointer = format!("/{}", key.replace('.', "/"));
            assert_ne!(
                defaults.pointer(&pointer),
                all.pointer(&pointer),
                "{key} not exercised"
            );
        }
        Ok(())
    });
}
