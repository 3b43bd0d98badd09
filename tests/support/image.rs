//! The container image, built and run by buildah without a daemon (Debian's `buildah`,
//! installed by `tests/run.sh` with apt): vfs storage under `target/buildah` (the same
//! options as `tests/image/buildah.sh`), `--isolation chroot`, whose processes share the
//! host's network namespace, so a sidecar in the image binds `127.0.0.1` like every other
//! server the tests start. The bases come from `tests/image/*-base.sh` (Debian's packages,
//! stored under a key of what made them); the sidecar's image from the repository's
//! Dockerfile, its binary built by `.ci/build-release.sh`.
//!
//! A missing buildah is a hard failure, never a skip.

use super::python::repo_path;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The tag the tests build the sidecar's image under.
pub const SIDECAR_IMAGE: &str = "localhost/mcp-state-guard:test";

/// Where the tests' buildah keeps its images and containers.
pub fn storage() -> PathBuf {
    repo_path("target/buildah")
}

/// `buildah` with the tests' storage options.
pub fn buildah() -> Command {
    let root = storage();
    let mut command = Command::new("buildah");
    command
        .arg("--root")
        .arg(root.join("storage"))
        .arg("--runroot")
        .arg(root.join("run"))
        .args(["--storage-driver", "vfs"]);
    command
}

/// Run buildah with `args`; its output, whatever the exit status.
pub fn buildah_output(args: &[&str]) -> Output {
    buildah()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("buildah cannot be run ({e}): tests/run.sh installs it with apt")
        })
}

/// Run buildah with `args` and return its stdout, failing the test with its stderr.
pub fn buildah_ok(args: &[&str]) -> String {
    let out = buildah_output(args);
    assert!(
        out.status.success(),
        "buildah {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A base image made by `tests/image/<script>` (reused when its key is stored): its name.
pub fn base(script: &str) -> String {
    let out = Command::new(repo_path(&format!("tests/image/{script}")))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("tests/image/{script} cannot be run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tests/image/{script} failed (tests/run.sh installs buildah and debootstrap):\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = stdout.lines().last().unwrap_or_default().trim().to_owned();
    assert!(name.starts_with("localhost/"), "{stdout}");
    name
}

/// `buildah inspect` of an image.
pub fn inspect(image: &str) -> Value {
    let text = buildah_ok(&["inspect", "--type", "image", image]);
    serde_json::from_str(&text).expect("buildah inspect prints JSON")
}

/// The sidecar's image, as the Dockerfile's second form builds it (docs/operations.md,
/// "The image").
pub struct SidecarImage {
    pub name: String,
    /// The runtime base it was built on (in place of distroless).
    pub base: String,
    /// What the binary built for it says to `--version`.
    pub version: String,
    /// The commit that version names.
    pub commit: String,
    /// The `SOURCE` build argument.
    pub source: String,
    /// The binary, as `.ci/build-release.sh` left it (the build context).
    pub binary: PathBuf,
    /// Seconds the build took (binary already built by tests/run.sh, base stored).
    pub build_seconds: f64,
}

/// The source label the tests build with: the repository's origin when it has one.
fn source_label() -> String {
    let out = Command::new("git")
        .args(["remote", "get-url", "origin"])
        .current_dir(repo_path(""))
        .output();
    match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        _ => "file://".to_owned() + &repo_path("").display().to_string(),
    }
}

/// Build (once per test run) the sidecar's image: the release binary by
/// `.ci/build-release.sh` with the version docs/operations.md's command computes, then
/// `buildah bud` of the Dockerfile with `BINARY_FROM=prebuilt` on the runtime base.
pub fn sidecar_image() -> &'static SidecarImage {
    static IMAGE: OnceLock<SidecarImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let started = Instant::now();
        // Containers a killed run left behind (this storage is the tests' alone).
        buildah_ok(&["rm", "--all"]);
        let base = base("runtime-base.sh");
        let git = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(repo_path(""))
            .output()
            .expect("git rev-parse: the tests run in a checkout");
        assert!(git.status.success(), "git rev-parse HEAD failed");
        let commit = String::from_utf8_lossy(&git.stdout).trim().to_owned();
        let version = format!(
            "mcp-state-guard {} (commit {commit})",
            env!("CARGO_PKG_VERSION")
        );
        // The build context: the script's output directory and nothing else.
        let context = storage().join("context");
        let _ = std::fs::remove_dir_all(&context);
        let built = Command::new(repo_path(".ci/build-release.sh"))
            .arg(&context)
            .arg(&version)
            .output()
            .expect("run .ci/build-release.sh");
        assert!(
            built.status.success(),
            ".ci/build-release.sh {version:?} failed:\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let source = source_label();
        let _ = buildah_output(&["rmi", "--force", SIDECAR_IMAGE]);
        let dockerfile = repo_path("Dockerfile");
        buildah_ok(&[
            "bud",
            "--isolation",
            "chroot",
            "--pull-never",
            "--quiet",
            "--build-arg",
            "BINARY_FROM=prebuilt",
            "--build-arg",
            &format!("RUNTIME_IMAGE={base}"),
            "--build-arg",
            &format!("VERSION={version}"),
            "--build-arg",
            &format!("STATE_GUARD_COMMIT={commit}"),
            "--build-arg",
            &format!("SOURCE={source}"),
            "--file",
            dockerfile.to_str().unwrap(),
            "--tag",
            SIDECAR_IMAGE,
            context.to_str().unwrap(),
        ]);
        // buildah 1.28 leaves the working container of the stage that only names another
        // (`FROM ${BINARY_FROM} AS binary`) behind; no other container exists yet, since
        // every test waits for this image first. Then the dangling images of earlier runs
        // (one per build, and vfs copies layers whole).
        buildah_ok(&["rm", "--all"]);
        let _ = buildah_output(&["rmi", "--prune"]);
        SidecarImage {
            name: SIDECAR_IMAGE.to_owned(),
            base,
            version,
            commit,
            source,
            binary: context.join("mcp-state-guard"),
            build_seconds: started.elapsed().as_secs_f64(),
        }
    })
}

/// A working container of an image, removed when dropped.
pub struct Container {
    pub name: String,
}

impl Container {
    pub fn of(image: &str) -> Self {
        let name = buildah_ok(&["from", "--pull-never", "--quiet", image])
            .trim()
            .to_owned();
        Self { name }
    }

    /// The container's root filesystem, mounted on the host (vfs: a plain directory).
    pub fn rootfs(&self) -> PathBuf {
        PathBuf::from(buildah_ok(&["mount", &self.name]).trim())
    }

    /// `buildah run --isolation chroot` with `options` (`--volume`, `--env`, `--user`)
    /// and `argv`: a command ready to run or spawn.
    pub fn command(&self, options: &[String], argv: &[&str]) -> Command {
        let mut command = buildah();
        command
            .args(["run", "--isolation", "chroot"])
            .args(options)
            .arg(&self.name)
            .arg("--")
            .args(argv)
            .stdin(Stdio::null());
        command
    }

    /// Run `argv` to its end: (success, stdout + stderr).
    pub fn run(&self, options: &[String], argv: &[&str]) -> (bool, String) {
        let out = self
            .command(options, argv)
            .output()
            .expect("run buildah run");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = buildah_output(&["rm", &self.name]);
    }
}

/// A `--volume` option: `host` at `path` in the container, read-only (as the chart
/// mounts its ConfigMap and Secret).
pub fn volume(host: &Path, path: &str) -> String {
    format!("--volume={}:{path}:ro", host.display())
}

/// The process named `comm` among the descendants of `pid`, once it exists (up to 30 s).
pub fn descendant(pid: u32, comm: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = find_descendant(pid, comm) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "no {comm} process under buildah run ({pid})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The process named `comm` among the descendants of `pid`, if one is running.
pub fn find_descendant(root: u32, comm: &str) -> Option<u32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces, so split at the last ')'.
        let (head, tail) = stat.rsplit_once(')')?;
        let name = head.split_once('(')?.1;
        let ppid = tail.split_whitespace().nth(1)?.parse::<u32>().ok()?;
        parents.push((pid, ppid, name.to_owned()));
    }
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, ppid, name) in &parents {
            if *ppid == parent {
                if name == comm {
                    return Some(*pid);
                }
                frontier.push(*pid);
            }
        }
    }
    None
}

/// A process's real, effective, saved and filesystem uid (`/proc/<pid>/status`).
pub fn uids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace()
        .skip(1)
        .map(|u| u.parse().unwrap())
        .collect()
}

/// A free loopback port (bound and released: the image's process binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
