//! The container image, built from the repository's Dockerfile and run (buildah without a
//! daemon, `tests/support/image.rs`) on a base made from Debian's packages in place of
//! distroless: the binary and its labels, the user and the absence of a shell
//! (`contents`); the entrypoint the chart relies on, `check-config` on the chart's
//! configuration mounted where the chart mounts it, the README's round trip through the
//! sidecar in the image and its drain on SIGTERM (`chart`); and the stdio image of docs/stdio.md
//! (its `COPY --from` line applied to a Python base) serving a stdio server's round trip
//! (`stdio`). Here: what they share, the chart rendered and a process under `buildah run`.

use crate::support::flow::{PROVISIONED, provision, retry, text, token_of};
use crate::support::helm;
use crate::support::http::post_mcp;
use crate::support::image::{self, volume};
use serde_json::{Value, json};
use std::os::unix::fs::{PermissionsExt, chown};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

mod chart;
mod contents;
mod stdio;

/// Where the chart mounts the sidecar's configuration and its keys.
const CONFIG_DIR: &str = "/etc/mcp-state-guard/config";
const KEYS_DIR: &str = "/etc/mcp-state-guard/keys";
const NONROOT: u32 = 65532;

/// The chart rendered once for this module (every case of tests/py/helm_chart.py), under
/// target/buildah.
fn chart_cases() -> &'static Value {
    static RENDERED: OnceLock<Value> = OnceLock::new();
    RENDERED.get_or_init(|| {
        let out = image::storage().join("chart");
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        helm::chart("render", &out)["cases"].clone()
    })
}

/// The chart's default values, rendered.
fn chart_defaults() -> &'static Value {
    &chart_cases()["defaults"]
}

/// The default values' sidecar volumes as the kubelet fills them: the ConfigMap's
/// configuration (with the pod's paths, not the host's) and the Secret's key file,
/// `keys` written in place of the rendered one, with the Secret volume's mode and the
/// pod's fsGroup as its group. Returns the `--volume` options and the directory.
fn chart_volumes(keys: &str) -> (Vec<String>, tempfile::TempDir) {
    let rendered = chart_defaults();
    let root = rendered["root"].as_str().unwrap();
    let pod = &rendered["pod"];
    let text = std::fs::read_to_string(rendered["config"].as_str().unwrap()).unwrap();
    let config = text.replace(
        &format!("\"{root}/etc/mcp-state-guard/"),
        "\"/etc/mcp-state-guard/",
    );
    assert!(config.contains(&format!("\"{KEYS_DIR}/")), "{config}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config_dir = dir.path().join("config");
    let keys_dir = dir.path().join("keys");
    std::fs::create_dir(&config_dir).unwrap();
    std::fs::create_dir(&keys_dir).unwrap();
    std::fs::write(config_dir.join("mcp-state-guard.toml"), config).unwrap();
    let key_file = keys_dir.join("keys");
    std::fs::write(&key_file, keys).unwrap();
    let mode = pod["mounts"][KEYS_DIR]
        .as_u64()
        .expect("the chart mounts the keys") as u32;
    let fs_group = pod["fs_group"].as_u64().expect("the pod's fsGroup") as u32;
    assert_eq!((mode, fs_group), (0o440, NONROOT), "{pod}");
    chown(&key_file, Some(0), Some(fs_group)).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(mode)).unwrap();
    (
        vec![volume(&config_dir, CONFIG_DIR), volume(&keys_dir, KEYS_DIR)],
        dir,
    )
}

/// The image's entrypoint followed by `args`.
fn entrypoint_with(image: &Value, args: &[&str]) -> Vec<String> {
    let entrypoint = image["OCIv1"]["config"]["Entrypoint"].as_array().unwrap();
    entrypoint
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .chain(args.iter().map(|a| a.to_string()))
        .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A process under `buildah run`, its stderr kept; killed (with what it started) if the
/// test ends first.
struct Started {
    child: std::process::Child,
    log: Arc<Mutex<Vec<u8>>>,
}

impl Started {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn buildah run");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        crate::support::process::drain_into(stderr, log.clone());
        Self { child, log }
    }

    fn log(&self) -> String {
        String::from_utf8_lossy(&self.log.lock().unwrap()).into_owned()
    }

    /// The exit status once `buildah run` has ended, within `timeout`.
    async fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let sidecar = image::find_descendant(self.child.id(), "mcp-state-guard");
            if let Some(pid) = sidecar {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{name} {pid}");
}

/// Poll `url` until it answers 200 (up to 60 s: the machine is shared).
async fn until_ok(url: &str, started: &mut Started) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = started.child.try_wait().unwrap() {
            panic!(
                "buildah run ended ({status}) before {url} answered:\n{}",
                started.log()
            );
        }
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Empty<bytes::Bytes>>();
        let answer =
            tokio::time::timeout(Duration::from_secs(2), client.get(url.parse().unwrap())).await;
        if matches!(answer, Ok(Ok(ref r)) if r.status() == 200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} did not answer 200 within 60 s:\n{}",
            started.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The README's round trip through `mcp`: a sealed token, the retry answered, the edited
/// plaintext and an edited token refused with the frozen error.
async fn round_trip(mcp: &str) {
    let first = post_mcp(mcp, &provision(1)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let token = token_of(&first.json());
    let done = post_mcp(mcp, &retry(2, &token)).await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(text(&done.json()), PROVISIONED);
    let frozen = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602,
            "message": "Invalid or expired requestState", "data": {"reason": "invalid_request_state"}}})
    };
    let edited = r#"{"k":"provision","name":"web-1","r":1,"tier":"enterprise"}"#;
    let refused = post_mcp(mcp, &retry(3, edited)).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.json(), frozen(3));
    let mut flipped = token.into_bytes();
    let at = flipped.len() - 5;
    flipped[at] = if flipped[at] == b'A' { b'B' } else { b'A' };
    let refused = post_mcp(mcp, &retry(4, &String::from_utf8(flipped).unwrap())).await;
    assert_eq!(refused.json(), frozen(4));
}
