//! Kubernetes: the Helm chart rendered, linted and validated by the real Helm engine and
//! the Kubernetes schemas (tests/py/helm_chart.py); the release binary the image ships,
//! built by the image's own build script, checking every rendered configuration; the
//! rendered alerts through promtool; the dashboard against the metrics the sidecar
//! exports; and a Secret volume's `..data` symlink swap reaching the running sidecar.

use crate::support::helm;
use crate::support::http::send;
use crate::support::pki::{self, Ca};
use crate::support::prometheus::promtool;
use crate::support::python::repo_path;
use crate::support::sidecar::{self, Sidecar};
use http::Method;
use mcp_state_guard::facade::config::Config;
use mcp_state_guard::facade::config::reload::ConfigSource;
use mcp_state_guard::facade::config::reload::ReloadOutcome;
use mcp_state_guard::facade::token::{KeyId, KeyRing};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn render(out: &Path) -> Value {
    helm::chart("render", out)
}

#[test]
fn the_chart_renders_lints_and_validates_for_every_combination() {
    let out = tempfile::tempdir().unwrap();
    let answer = render(out.path());
    let cases = answer["cases"].as_object().unwrap();
    // The default values and at least six feature combinations.
    assert!(cases.contains_key("defaults"), "{cases:?}");
    assert!(cases.len() >= 7, "{} cases", cases.len());
    // Every object checked against two Kubernetes versions; only custom resources lack
    // a schema (their fields are checked one by one by the script).
    assert_eq!(answer["kube_versions"].as_array().unwrap().len(), 2);
    let validated = answer["validated"].as_u64().unwrap();
    assert!(validated >= 2 * 5 * cases.len() as u64, "{validated}");
    let unvalidated: BTreeSet<&str> = answer["unvalidated_kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(
        unvalidated.is_subset(&BTreeSet::from([
            "Certificate",
            "PodMonitor",
            "PrometheusRule",
            "ServiceMonitor"
        ])),
        "{unvalidated:?}"
    );
    // Every optional object appeared in some case.
    let kinds: BTreeSet<&str> = cases
        .values()
        .flat_map(|c| c["kinds"].as_array().unwrap())
        .map(|k| k.as_str().unwrap())
        .collect();
    for kind in [
        "Deployment",
        "Service",
        "ConfigMap",
        "Secret",
        "NetworkPolicy",
        "ServiceAccount",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "Certificate",
    ] {
        assert!(kinds.contains(kind), "no case rendered a {kind}");
    }
    assert_eq!(answer["checksum"]["hot"].as_array().unwrap().len(), 3);
    assert!(answer["schema_keys"].as_u64().unwrap() > 60, "{answer}");
    assert_eq!(
        answer["alerts_equal_shipped"], true,
        "charts/mcp-state-guard/files/alerts.yml differs from config/alerts.yml"
    );
}

#[test]
fn invalid_values_are_refused_with_the_schemas_error() {
    let out = tempfile::tempdir().unwrap();
    let answer = helm::chart("schema", out.path());
    let cases = answer["cases"].as_object().unwrap();
    assert!(cases.len() >= 8, "{cases:?}");
    for (case, error) in cases {
        let error = error.as_str().unwrap_or_else(|| panic!("{case} accepted"));
        assert!(!error.is_empty(), "{case}");
        eprintln!("{case}: {}", error.trim());
    }
    assert!(
        cases["unknown config key"]
            .as_str()
            .unwrap()
            .contains("additional properties 'tool' not allowed"),
        "{cases:?}"
    );
}

#[test]
fn config_values_render_as_toml_with_integers_kept() {
    let out = tempfile::tempdir().unwrap();
    let answer = helm::chart("toml", out.path());
    let toml = answer["toml"].as_str().unwrap();
    assert!(
        toml.contains("max_buffered_bytes = 17179869184\n"),
        "{toml}"
    );
    assert!(toml.contains("ttl_seconds = 300\n"), "{toml}");
    assert!(!toml.contains("e+"), "{toml}");
    // The sidecar's own loader reads it (every value of the right type).
    let path = out.path().join("config.toml");
    std::fs::write(&path, toml).unwrap();
    let loaded =
        Config::load(Some(&path), &Default::default()).unwrap_or_else(|e| panic!("{e:?}\n{toml}"));
    assert_eq!(loaded.limits.max_buffered_bytes, 17_179_869_184);
    assert_eq!(loaded.handles.len(), 2);
}

#[test]
fn an_upgrade_keeps_the_generated_keys() {
    let out = tempfile::tempdir().unwrap();
    let answer = helm::chart("lookup", out.path());
    assert_eq!(answer["upgrade_kept"], true);
    assert_eq!(answer["install"], 65, "64 hex digits and a newline");
}

#[test]
fn another_chart_adds_the_sidecar_with_the_named_templates() {
    let out = tempfile::tempdir().unwrap();
    let answer = helm::chart("parent", out.path());
    assert!(answer["validated"].as_u64().unwrap() >= 4, "{answer}");
}

#[test]
fn the_rendered_alert_rules_pass_promtool() {
    let out = tempfile::tempdir().unwrap();
    let answer = render(out.path());
    let rules: Vec<&str> = answer["cases"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|c| c["rules"].as_array().unwrap())
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(!rules.is_empty(), "no case rendered a PrometheusRule");
    for file in rules {
        let checked = promtool(&["check", "rules", file], "");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        assert!(checked.status.success(), "{said}");
        assert!(said.contains("SUCCESS: 8 rules found"), "{said}");
    }
}

/// Metric names and the labels each carries, from an exposition.
fn exposition(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut families: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, rest) = line.split_once(['{', ' ']).unwrap();
        let labels = families.entry(name.to_owned()).or_default();
        if let Some((inside, _)) = rest.split_once('}') {
            for pair in inside.split("\",").filter(|p| !p.is_empty()) {
                labels.insert(pair.split_once('=').unwrap().0.to_owned());
            }
        }
    }
    families
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_queries_only_metrics_the_sidecar_exports() {
    let out = tempfile::tempdir().unwrap();
    let answer = render(out.path());
    let dashboards: Vec<PathBuf> = answer["cases"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|c| c["dashboards"].as_array().unwrap())
        .map(|d| PathBuf::from(d.as_str().unwrap()))
        .collect();
    assert_eq!(dashboards.len(), 1);
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&dashboards[0]).unwrap()).unwrap();

    let key = "0123456789abcdef0123456789abcdef-dashboard";
    let sidecar = Sidecar::with_keys(sidecar::config("http://127.0.0.1:9"), &[key], "svc").await;
    let url = format!("http://{}/metrics", sidecar.admin_addr);
    let text = send(Method::GET, &url, &[], "", Duration::from_secs(10))
        .await
        .text();
    sidecar.stop().await;
    let families = exposition(&text);

    let mut queried = BTreeSet::new();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    assert!(exprs.len() >= 12, "{exprs:?}");
    for expr in &exprs {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{expr}");
        let mut labels = BTreeSet::from(["le".to_owned(), "job".to_owned()]);
        for metric in &names {
            let carried = families.get(metric).unwrap_or_else(|| {
                panic!("the dashboard queries {metric}, which the sidecar does not export")
            });
            labels.extend(carried.iter().cloned());
            queried.insert(metric.clone());
        }
        for by in expr.split("by (").skip(1) {
            for label in by.split(')').next().unwrap().split(',') {
                assert!(labels.contains(label.trim()), "{expr}: no label {label}");
            }
        }
    }
    // What the issue asks the dashboard to show.
    for wanted in [
        "mcp_state_guard_state_sealed_total",
        "mcp_state_guard_state_verified_total",
        "mcp_state_guard_requests_refused_total",
        "mcp_state_guard_overhead_seconds_bucket",
        "mcp_state_guard_single_use_consumptions_total",
        "mcp_state_guard_store_latency_seconds_bucket",
        "mcp_state_guard_tokens_opened_total",
        "mcp_state_guard_tokens_minted_total",
    ] {
        assert!(
            queried.contains(wanted),
            "the dashboard does not show {wanted}"
        );
    }
}

/// `mcp_state_guard_*` names in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("mcp_state_guard_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The dynamic libraries the distroless `cc` runtime image provides (glibc, libgcc).
const RUNTIME_LIBRARIES: [&str; 7] = [
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
];
/// glibc of Debian 12, which both the build image (rust:*-bookworm) and the runtime
/// image (distroless cc-debian12) carry.
const RUNTIME_GLIBC: (u32, u32) = (2, 36);

fn output(command: &mut Command) -> (bool, String) {
    let out = command.output().expect("run the command");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Build the release binary with the image's build script, into `dir`.
fn build_release(dir: &Path, expected: Option<&str>) -> (bool, String) {
    let mut command = Command::new(repo_path(".ci/build-release.sh"));
    command.arg(dir).args(expected);
    output(&mut command)
}

#[test]
fn the_release_binary_the_image_ships_accepts_every_rendered_config() {
    // The Dockerfile builds with this script and nothing else.
    let dockerfile = std::fs::read_to_string(repo_path("Dockerfile")).unwrap();
    let build_stage = dockerfile.split("\nFROM ").nth(1).unwrap();
    assert!(
        build_stage.contains("RUN .ci/build-release.sh /out \"${VERSION}\""),
        "{dockerfile}"
    );
    // The bases are build arguments whose defaults are the official images; the image
    // tests (tests/cases/image.rs) put a base made from Debian's packages in their place.
    for default in [
        "\nARG BUILD_IMAGE=rust:1.95-bookworm\n",
        "\nARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot\n",
        "\nARG BINARY_FROM=build\n",
    ] {
        assert!(dockerfile.contains(default), "{default:?} in {dockerfile}");
    }
    assert!(
        build_stage.starts_with("${BUILD_IMAGE} AS build\n"),
        "{build_stage}"
    );
    let runtime = dockerfile.rsplit("\nFROM ").next().unwrap();
    assert!(runtime.starts_with("${RUNTIME_IMAGE}\n"), "{runtime}");
    assert!(
        runtime
            .contains("\nCOPY --from=binary /out/mcp-state-guard /usr/local/bin/mcp-state-guard\n"),
        "{runtime}"
    );
    assert!(
        !runtime.contains("\nRUN "),
        "the runtime stage has no shell to run anything"
    );
    assert!(runtime.contains("\nUSER 65532:65532"), "{runtime}");
    assert!(
        runtime.contains("org.opencontainers.image.version=\"${VERSION}\""),
        "{runtime}"
    );

    let bin_dir = tempfile::tempdir().unwrap();
    let (ok, said) = build_release(bin_dir.path(), None);
    assert!(ok, "{said}");
    // Profile-guided: built with the profile its training workload left, which exists.
    let profile = said
        .lines()
        .find_map(|l| l.strip_prefix("build-release: 4/4 the shipped binary, with the profile "))
        .unwrap_or_else(|| panic!("not built with a profile: {said}"));
    let size = std::fs::metadata(profile).map_or(0, |m| m.len());
    assert!(size > 100_000, "{profile}: {size} bytes");
    let binary = bin_dir.path().join("mcp-state-guard");
    let (ok, version) = output(Command::new(&binary).arg("--version"));
    assert!(ok, "{version}");
    let version = version.trim().to_owned();
    assert!(
        version.starts_with(&format!(
            "mcp-state-guard {} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{version}"
    );
    // The label check of the build stage: the right version passes, another fails.
    let (ok, said) = build_release(bin_dir.path(), Some(&version));
    assert!(ok, "{said}");
    let (ok, said) = build_release(bin_dir.path(), Some("mcp-state-guard 9.9.9 (commit 0)"));
    assert!(
        !ok,
        "a label that is not the binary's --version was accepted"
    );
    assert!(said.contains("mcp-state-guard 9.9.9"), "{said}");

    // It runs on the runtime image: only libraries it has, no newer glibc.
    let (ok, dynamic) = output(Command::new("readelf").arg("-dW").arg(&binary));
    assert!(ok, "{dynamic}");
    for line in dynamic.lines().filter(|l| l.contains("(NEEDED)")) {
        let library = line.split('[').nth(1).unwrap().trim_end_matches(']');
        assert!(
            RUNTIME_LIBRARIES.contains(&library),
            "needs {library}, which distroless cc lacks"
        );
    }
    let (ok, symbols) = output(Command::new("readelf").arg("-VW").arg(&binary));
    assert!(ok, "{symbols}");
    for version in symbols.split("GLIBC_").skip(1) {
        let number: String = version
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut parts = number.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let wanted = (parts.next().unwrap(), parts.next().unwrap_or(0));
        assert!(wanted <= RUNTIME_GLIBC, "needs GLIBC_{number}");
    }

    // `check-config` on every rendered configuration, with the rendered Secret's keys
    // (and the files the pod would mount: TLS from the Secret, JWKS from a ConfigMap).
    let out = tempfile::tempdir().unwrap();
    let answer = render(out.path());
    let ca = Ca::new("helm-test");
    let leaf = ca.server();
    let signer = pki::Signer::p256("k1");
    let mut checked = 0;
    for (case, rendered) in answer["cases"].as_object().unwrap() {
        let root = PathBuf::from(rendered["root"].as_str().unwrap()).join("etc/mcp-state-guard");
        if rendered["tls"] == true {
            std::fs::create_dir_all(root.join("tls")).unwrap();
            std::fs::write(root.join("tls/tls.crt"), &leaf.cert_pem).unwrap();
            std::fs::write(root.join("tls/tls.key"), &leaf.key_pem).unwrap();
            std::fs::write(root.join("tls/ca.crt"), &ca.pem).unwrap();
        }
        if rendered["jwks_file"] == true {
            std::fs::create_dir_all(root.join("jwks")).unwrap();
            std::fs::write(root.join("jwks/jwks.json"), pki::jwks(&[&signer])).unwrap();
        }
        let mut command = Command::new(&binary);
        command
            .args(["check-config", "--config"])
            .arg(rendered["config"].as_str().unwrap());
        for (name, value) in rendered["env"].as_object().unwrap() {
            command.env(name, value.as_str().unwrap());
        }
        let (ok, said) = output(&mut command);
        assert!(
            ok,
            "{case}: check-config refused the rendered config:\n{said}"
        );
        assert_eq!(said.trim(), "configuration is valid", "{case}");
        checked += 1;
    }
    assert!(checked >= 7);

    // And it is the binary that refuses: a broken key file in a rendered configuration.
    let defaults = &answer["cases"]["defaults"];
    let keys =
        PathBuf::from(defaults["root"].as_str().unwrap()).join("etc/mcp-state-guard/keys/keys");
    std::fs::write(&keys, "too-short\n").unwrap();
    let (ok, said) = output(
        Command::new(&binary)
            .args(["check-config", "--config"])
            .arg(defaults["config"].as_str().unwrap()),
    );
    assert!(!ok);
    assert!(said.contains("state.keys_file"), "{said}");
}

/// A directory as kubelet writes a Secret or ConfigMap volume: the files are symlinks
/// through `..data`, itself a symlink to a timestamped directory, and an update writes a
/// new timestamped directory and renames a new `..data` link over the old one.
struct AtomicVolume {
    dir: tempfile::TempDir,
    file: &'static str,
    generation: u32,
}

impl AtomicVolume {
    fn new(file: &'static str, content: &str) -> Self {
        let mut volume = Self {
            dir: tempfile::tempdir().unwrap(),
            file,
            generation: 0,
        };
        volume.update(content);
        std::os::unix::fs::symlink(format!("..data/{file}"), volume.path()).unwrap();
        volume
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join(self.file)
    }

    fn update(&mut self, content: &str) {
        let old = format!(
            "..2026_12_01_00_00_{:02}.{}",
            self.generation, self.generation
        );
        self.generation += 1;
        let new = format!(
            "..2026_12_01_00_00_{:02}.{}",
            self.generation, self.generation
        );
        let root = self.dir.path();
        std::fs::create_dir(root.join(&new)).unwrap();
        std::fs::write(root.join(&new).join(self.file), content).unwrap();
        std::os::unix::fs::symlink(&new, root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        let _ = std::fs::remove_dir_all(root.join(old));
    }
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_volume_symlink_swap_reaches_the_keys_and_the_config() {
    const OLD: &str = "0123456789abcdef0123456789abcdef-volume-old";
    const NEW: &str = "0123456789abcdef0123456789abcdef-volume-new";
    let kid = |secret: &str| KeyId::of_ring(&KeyRing::from_secrets(&[secret], "t").unwrap())[0];
    let mut keys = AtomicVolume::new("keys", &format!("{OLD}\n"));
    let keys_file = keys.path();
    let settings = |tools: &str| {
        format!(
            "upstream = \"http://127.0.0.1:9\"\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [state]\naudience = \"svc\"\nkeys_file = {:?}\nreload_interval_ms = 100\n\
             [single_use]\ntools = [{tools}]\n",
            keys_file
        )
    };
    let mut config = AtomicVolume::new("mcp-state-guard.toml", &settings(""));
    let overrides = Default::default();
    let (loaded, source) = ConfigSource::load(config.path(), overrides).unwrap();
    let running = mcp_state_guard::facade::app::start_from(&loaded, Some(source))
        .await
        .unwrap();
    let metrics = running.metrics().clone();
    let minting = |secret: &str| {
        format!(
            "mcp_state_guard_key_ring_minting{{kid=\"{}\"}} 1",
            kid(secret)
        )
    };
    assert!(metrics.render().contains(&minting(OLD)));

    // A rotation's phase 2 arrives as kubelet delivers a Secret update.
    let before = metrics.keys.key_reload_count(true);
    keys.update(&format!("{NEW}\n{OLD}\n"));
    wait_for("the key ring follows the ..data swap", || {
        metrics.keys.key_reload_count(true) > before
    })
    .await;
    assert!(metrics.render().contains(&minting(NEW)));

    // A ConfigMap update of the single-use lists, the same way.
    let before = metrics.process.config_reload_count(ReloadOutcome::Ok);
    config.update(&settings("\"pay\""));
    wait_for("the configuration follows the ..data swap", || {
        metrics.process.config_reload_count(ReloadOutcome::Ok) > before
    })
    .await;
    assert_eq!(metrics.process.config_reload_count(ReloadOutcome::Error), 0);
    assert_eq!(metrics.keys.key_reload_count(false), 0);
    running.shutdown(Duration::ZERO).await;
}
