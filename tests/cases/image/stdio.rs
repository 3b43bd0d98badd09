//! The stdio image of docs/stdio.md: its lines applied to a Python base made from Debian's
//! packages, built, and run as the chart runs it, serving a stdio server's round trip.

use super::{
    CONFIG_DIR, KEYS_DIR, NONROOT, Started, chart_cases, round_trip, signal, strs, until_ok,
};
use crate::support::image::{
    self, Container, buildah_ok, descendant, free_port, inspect, sidecar_image, uids, volume,
};
use crate::support::python::repo_path;
use serde_json::json;
use std::os::unix::fs::{PermissionsExt, chown};
use std::time::{Duration, Instant};

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
