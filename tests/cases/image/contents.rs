//! What the image is: the binary the build script built, with labels that match it,
//! run as non-root; no shell and nothing runnable but the sidecar, the loader and the
//! libraries; the entrypoint and command the chart relies on; its size kept in check.

use super::{NONROOT, chart_defaults};
use crate::support::image::{Container, SidecarImage, buildah_ok, inspect, sidecar_image};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

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
