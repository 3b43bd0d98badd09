//! The container image, built from the repository's Dockerfile and run (buildah without a
//! daemon, `tests/support/image.rs`) on a base made from Debian's packages in place of
//! distroless: the binary and its labels, the user and the absence of a shell, the
//! entrypoint the chart relies on, `check-config` on the chart's configuration mounted
//! where the chart mounts it, the README's round trip through the sidecar in the image
//! and its drain on SIGTERM, and the stdio image of docs/stdio.md (its `COPY --from` line
//! applied to a Python base) serving a stdio server's round trip.

use crate::support::flow::{PROVISIONED, provision, retry, text, token_of};
use crate::support::helm;
use crate::support::http::{post_mcp, send};
use crate::support::image::{
    self, Container, SidecarImage, buildah_ok, descendant, free_port, inspect, sidecar_image, uids,
    volume,
};
use crate::support::legacy::{LegacyServer, Mode};
use crate::support::python::repo_path;
use http::Method;
use serde_json::{Value, json};
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

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

/// Compressed (gzip, as pushed to a registry) and uncompressed size of an image's
/// layers, in bytes: the image written as an OCI layout and its blobs read.
fn sizes(image: &str) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("oci");
    buildah_ok(&[
        "push",
        "--quiet",
        "--compression-format",
        "gzip",
        image,
        &format!("oci:{}", layout.display()),
    ]);
    let read =
        |path: PathBuf| -> Value { serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap() };
    let blob = |digest: &str| {
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let index = read(layout.join("index.json"));
    let manifest = read(blob(index["manifests"][0]["digest"].as_str().unwrap()));
    let mut compressed = 0;
    let mut uncompressed = 0;
    for layer in manifest["layers"].as_array().unwrap() {
        compressed += layer["size"].as_u64().unwrap();
        let file = std::fs::File::open(blob(layer["digest"].as_str().unwrap())).unwrap();
        let mut layer = flate2::read::GzDecoder::new(file);
        uncompressed += std::io::copy(&mut layer, &mut std::io::sink()).unwrap();
    }
    (compressed, uncompressed)
}

const MB: f64 = 1_000_000.0;

#[test]
fn the_image_runs_its_binary_as_nonroot_with_no_shell_and_labels_that_match_it() {
    let image: &SidecarImage = sidecar_image();
    let inspected = inspect(&image.name);
    let config = &inspected["OCIv1"]["config"];

    // The binary the build script built, the binary in the image, and the label agree.
    let outside = Command::new(&image.binary)
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&outside.stdout).trim(),
        image.version
    );
    let container = Container::of(&image.name);
    let (ok, inside) = container.run(&[], &["/usr/local/bin/mcp-state-guard", "--version"]);
    assert!(ok, "{inside}");
    assert_eq!(inside.trim(), image.version);
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        image.version.as_str()
    );
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .unwrap();
    assert!(
        image.version.ends_with(&format!("(commit {revision})")) && revision.len() == 12,
        "revision {revision:?} is not the commit of {:?}",
        image.version
    );
    assert_eq!(
        labels["org.opencontainers.image.source"],
        image.source.as_str()
    );
    assert!(!image.source.is_empty());
    assert_eq!(labels["org.opencontainers.image.title"], "mcp-state-guard");
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");

    // Non-root, as distroless :nonroot; the entrypoint and command the chart relies on.
    assert_eq!(config["User"], "65532:65532", "{config}");
    assert_eq!(
        config["Entrypoint"],
        json!(["/usr/local/bin/mcp-state-guard"]),
        "{config}"
    );
    let pod = &chart_defaults()["pod"];
    assert_eq!(
        pod["command"],
        Value::Null,
        "the chart keeps the entrypoint"
    );
    assert_eq!(
        config["Cmd"], pod["args"],
        "the image's command is the chart's args"
    );
    assert_eq!(pod["run_as_user"], NONROOT, "{pod}");
    let passwd = std::fs::read_to_string(container.rootfs().join("etc/passwd")).unwrap();
    assert!(
        passwd.contains("\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
        "{passwd}"
    );

    // No shell to run, and nothing runnable but the sidecar, the loader and libraries.
    let (ok, said) = container.run(&[], &["/bin/sh", "-c", "true"]);
    assert!(!ok, "a shell ran in the image: {said}");
    // The image's files as shipped: a fresh container (`buildah run` writes /etc/hosts,
    // /etc/resolv.conf and /etc/hostname into the one it runs in, as runtimes do).
    let pristine = Container::of(&image.name);
    let rootfs = pristine.rootfs();
    let mut runnable = Vec::new();
    let mut files = 0;
    walk(&rootfs, &mut |path, meta| {
        files += 1;
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !matches!(
                name.as_str(),
                "sh" | "bash" | "dash" | "ash" | "busybox" | "dpkg" | "apt" | "apt-get" | "su"
            ),
            "the image holds {}",
            path.display()
        );
        let library = name.ends_with(".so") || name.contains(".so.");
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 && !library {
            runnable.push(path.strip_prefix(&rootfs).unwrap().display().to_string());
        }
    });
    assert!(files > 100, "{files} files: the walk saw the image");
    assert_eq!(runnable, ["usr/local/bin/mcp-state-guard"]);
    let bundle = std::fs::read_to_string(rootfs.join("etc/ssl/certs/ca-certificates.crt")).unwrap();
    assert!(bundle.matches("BEGIN CERTIFICATE").count() > 100);
    assert!(rootfs.join("usr/share/zoneinfo/Europe/Paris").exists());
    // What each package is, where scanners look on distroless.
    let status = rootfs.join("var/lib/dpkg/status.d");
    for package in [
        "libc6",
        "libgcc-s1",
        "ca-certificates",
        "tzdata",
        "base-files",
        "netbase",
    ] {
        let text = std::fs::read_to_string(status.join(package)).unwrap();
        assert!(text.starts_with(&format!("Package: {package}\n")), "{text}");
        assert!(text.contains("\nVersion: "), "{text}");
    }

    // Its size (docs/operations.md gives it beside distroless's), kept in check.
    let (compressed, uncompressed) = sizes(&image.name);
    let (base_compressed, base_uncompressed) = sizes(&image.base);
    eprintln!(
        "image: {:.1} MB compressed, {:.1} MB uncompressed; its base {:.1} / {:.1} MB; built in {:.1} s",
        compressed as f64 / MB,
        uncompressed as f64 / MB,
        base_compressed as f64 / MB,
        base_uncompressed as f64 / MB,
        image.build_seconds
    );
    let binary = std::fs::metadata(&image.binary).unwrap().len();
    assert!(uncompressed > binary + 10_000_000, "{uncompressed}");
    assert!(
        uncompressed < binary + 25_000_000,
        "the base grew: {uncompressed}"
    );
}

fn walk(dir: &Path, visit: &mut dyn FnMut(&Path, &std::fs::Metadata)) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            walk(&path, visit);
        } else {
            visit(&path, &meta);
        }
    }
}

#[test]
fn check_config_in_the_image_passes_the_charts_config_and_names_a_broken_key_file() {
    let image = sidecar_image();
    let inspected = inspect(&image.name);
    let config_file = format!("{CONFIG_DIR}/mcp-state-guard.toml");
    let check = entrypoint_with(&inspected, &["check-config", "--config", &config_file]);
    let container = Container::of(&image.name);

    let rendered_key = std::fs::read_to_string(
        Path::new(chart_defaults()["root"].as_str().unwrap()).join("etc/mcp-state-guard/keys/keys"),
    )
    .unwrap();
    let (volumes, _dir) = chart_volumes(&rendered_key);
    let (ok, said) = container.run(&volumes, &strs(&check));
    assert!(
        ok,
        "check-config refused the chart's configuration:\n{said}"
    );
    assert_eq!(said.trim(), "configuration is valid");

    let (volumes, _dir) = chart_volumes("too-short\n");
    let (ok, said) = container.run(&volumes, &strs(&check));
    assert!(!ok, "a 9-byte key was accepted");
    assert!(said.contains("state.keys_file"), "{said}");
    assert!(said.contains(&format!("{KEYS_DIR}/keys")), "{said}");
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

#[tokio::test(flavor = "multi_thread")]
async fn the_sidecar_in_the_image_serves_the_round_trip_and_drains_on_sigterm() {
    let image = sidecar_image();
    let inspected = inspect(&image.name);
    let upstream = LegacyServer::start(Mode::Json);
    let key = "0123456789abcdef0123456789abcdef-image-round-trip";
    let (mut options, _dir) = chart_volumes(&format!("{key}\n"));
    let (port, admin) = (free_port(), free_port());
    const DRAIN_MS: u64 = 3000;
    // The chart's configuration, with what the pod's network gives it replaced: loopback
    // ports on this machine, and the legacy server as the upstream.
    for (name, value) in [
        ("LISTEN", format!("127.0.0.1:{port}")),
        ("ADMIN_LISTEN", format!("127.0.0.1:{admin}")),
        ("UPSTREAM", upstream.base_url()),
        ("TIMEOUTS__DRAIN_MS", DRAIN_MS.to_string()),
    ] {
        options.push(format!("--env=MCP_STATE_GUARD_{name}={value}"));
    }
    // What Kubernetes runs: the entrypoint with the chart's args.
    let pod = &chart_defaults()["pod"];
    let args: Vec<&str> = pod["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let argv = entrypoint_with(&inspected, &args);
    let container = Container::of(&image.name);
    let mut started = Started::spawn(container.command(&options, &strs(&argv)));
    let admin_url = format!("http://127.0.0.1:{admin}");
    until_ok(&format!("{admin_url}/readyz"), &mut started).await;
    let health = send(
        Method::GET,
        &format!("{admin_url}/healthz"),
        &[],
        "",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(health.status, 200);

    // The sidecar runs as the image's user, in the host's network namespace.
    let pid = descendant(started.child.id(), "mcp-state-guard");
    assert_eq!(uids(pid), [NONROOT; 4]);

    let mcp = format!("http://127.0.0.1:{port}/mcp");
    upstream.reset();
    round_trip(&mcp).await;
    let seen = upstream.seen();
    assert_eq!(
        seen.len(),
        2,
        "only the first call and its retry arrived: {seen:?}"
    );
    assert_eq!(
        seen[1]["requestState"], r#"{"k":"provision","name":"web-1","r":1,"tier":"free"}"#,
        "the upstream got its own plaintext back"
    );

    // SIGTERM with a request in flight (the upstream sleeps 3 x 20 s): readiness fails,
    // the drain waits for the request up to its deadline, then the process exits.
    let slow = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "progress_ask", "arguments": {"delay_ms": 20000},
                   "_meta": crate::support::http::meta()}});
    let in_flight = tokio::spawn({
        let mcp = mcp.clone();
        async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<http_body_util::Full<bytes::Bytes>>();
            let mut request = http::Request::post(&mcp)
                .body(http_body_util::Full::new(bytes::Bytes::from(
                    slow.to_string(),
                )))
                .unwrap();
            for (name, value) in
                crate::support::http::mcp_headers("tools/call", Some("progress_ask"))
            {
                request.headers_mut().insert(
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            let _ = client.request(request).await;
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !upstream.seen().iter().any(|s| s["name"] == "progress_ask") {
        assert!(
            Instant::now() < deadline,
            "the slow request never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopping = Instant::now();
    signal(pid, "TERM");
    let grace = Duration::from_millis(DRAIN_MS / 6);
    let bound = grace + Duration::from_millis(DRAIN_MS) + Duration::from_secs(5);
    let status = started.wait(bound).await;
    let took = stopping.elapsed();
    in_flight.abort();
    let status = status
        .unwrap_or_else(|| panic!("still running {bound:?} after SIGTERM:\n{}", started.log()));
    assert!(status.success(), "{status}:\n{}", started.log());
    assert!(
        took >= Duration::from_millis(DRAIN_MS),
        "exited after {took:?}: the in-flight request was not given the drain"
    );
    eprintln!("SIGTERM to exit with a request in flight: {took:?} (drain {DRAIN_MS} ms)");
}

/// The Dockerfile for a stdio server in docs/stdio.md (section "In a container"), as written.
fn documented_stdio_dockerfile() -> String {
    let doc = std::fs::read_to_string(repo_path("docs/stdio.md")).unwrap();
    let start = doc
        .find("```dockerfile\nFROM ")
        .expect("the stdio Dockerfile of docs/stdio.md");
    let block = &doc[start + "```dockerfile\n".len()..];
    block[..block.find("```").unwrap()].to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_server_image_made_with_the_documented_lines_serves_a_round_trip() {
    let image = sidecar_image();
    let python_base = image::base("python-base.sh");
    let dockerfile = documented_stdio_dockerfile();

    // The documented lines on the Python base made from Debian's packages: its FROM names
    // that base, its COPY --from the image built here; the base already carries the pinned
    // SDK the documented pip line installs (a Debian python3 refuses a system-wide pip).
    let requirements = std::fs::read_to_string(repo_path("tests/py/requirements.txt")).unwrap();
    let mut lines = Vec::new();
    let mut copied = false;
    for line in dockerfile.lines() {
        if line.starts_with("FROM ") {
            lines.push(format!("FROM {python_base}"));
        } else if let Some(rest) = line.strip_prefix("COPY --from=") {
            let (_, paths) = rest.split_once(' ').unwrap();
            assert_eq!(
                paths, "/usr/local/bin/mcp-state-guard /usr/local/bin/",
                "{line}"
            );
            lines.push(format!("COPY --from={} {paths}", image.name));
            copied = true;
        } else if line.starts_with("RUN pip install") {
            let pinned = line.split('"').nth(1).unwrap();
            assert!(
                requirements.lines().any(|l| l == pinned),
                "{line}: not the pinned SDK"
            );
        } else if line.starts_with("COPY server.py ") {
            lines.push(line.to_owned());
            // The server the shim runs, beside it.
            lines.push("COPY legacy_server.py peer_server.py /app/".to_owned());
        } else {
            lines.push(line.to_owned());
        }
    }
    assert!(copied, "{dockerfile}");
    let context = tempfile::tempdir().unwrap();
    std::fs::write(
        context.path().join("Containerfile"),
        lines.join("\n") + "\n",
    )
    .unwrap();
    for script in ["legacy_server.py", "peer_server.py"] {
        std::fs::copy(
            repo_path(&format!("tests/py/{script}")),
            context.path().join(script),
        )
        .unwrap();
    }
    // The documented `python /app/server.py`: the legacy server's stdio mode.
    std::fs::write(
        context.path().join("server.py"),
        "import runpy, sys\nsys.argv = ['/app/legacy_server.py', '--stdio']\n\
         runpy.run_path('/app/legacy_server.py', run_name='__main__')\n",
    )
    .unwrap();
    let tag = "localhost/mcp-state-guard-stdio:test";
    let _ = image::buildah_output(&["rmi", "--force", tag]);
    let started_build = Instant::now();
    buildah_ok(&[
        "bud",
        "--isolation",
        "chroot",
        "--pull-never",
        "--quiet",
        "--file",
        context.path().join("Containerfile").to_str().unwrap(),
        "--tag",
        tag,
        context.path().to_str().unwrap(),
    ]);
    eprintln!(
        "stdio image built in {:.1} s",
        started_build.elapsed().as_secs_f64()
    );
    let inspected = inspect(tag);
    let entrypoint: Vec<String> =
        serde_json::from_value(inspected["OCIv1"]["config"]["Entrypoint"].clone()).unwrap();
    let documented_entrypoint = dockerfile
        .lines()
        .find(|l| l.starts_with("ENTRYPOINT "))
        .unwrap();
    let wanted: Vec<String> =
        serde_json::from_str(documented_entrypoint.trim_start_matches("ENTRYPOINT ")).unwrap();
    assert_eq!(entrypoint, wanted);
    // The chart's stdio mode runs the sidecar from such an image by that path.
    let stdio_pod = &chart_cases()["stdio"]["pod"];
    assert_eq!(stdio_pod["command"], json!([wanted[0]]), "{stdio_pod}");

    // The configuration the documented entrypoint reads, mounted where the chart mounts it.
    let key = "0123456789abcdef0123456789abcdef-image-stdio";
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(dir.path().join("config")).unwrap();
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    std::fs::write(
        dir.path().join("config/mcp-state-guard.toml"),
        format!(
            "listen = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
             [state]\naudience = \"https://stdio.example\"\nkeys_file = \"{KEYS_DIR}/keys\"\n\
             [timeouts]\ndrain_ms = 2000\n"
        ),
    )
    .unwrap();
    let key_file = dir.path().join("keys/keys");
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    chown(&key_file, Some(0), Some(NONROOT)).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o440)).unwrap();
    let options = vec![
        volume(&dir.path().join("config"), CONFIG_DIR),
        volume(&dir.path().join("keys"), KEYS_DIR),
        // As the chart runs it: `sidecar.securityContext.runAsUser`.
        format!("--user={NONROOT}:{NONROOT}"),
    ];
    let container = Container::of(tag);
    let mut started = Started::spawn(container.command(&options, &strs(&entrypoint)));
    // Ready once the child answered `server/discover`.
    until_ok(&format!("http://127.0.0.1:{admin}/readyz"), &mut started).await;
    let pid = descendant(started.child.id(), "mcp-state-guard");
    assert_eq!(uids(pid), [NONROOT; 4]);
    let python = descendant(pid, "python");
    assert_eq!(
        uids(python),
        [NONROOT; 4],
        "the child runs as the sidecar's user"
    );

    round_trip(&format!("http://127.0.0.1:{port}/mcp")).await;

    signal(pid, "TERM");
    let status = started.wait(Duration::from_secs(10)).await;
    let status =
        status.unwrap_or_else(|| panic!("still running 10 s after SIGTERM:\n{}", started.log()));
    assert!(status.success(), "{status}:\n{}", started.log());
    drop(container);
    let _ = image::buildah_output(&["rmi", tag]);
}
