# Sourced by the image scripts: buildah without a daemon, as the tests run it. Storage
# lives under target/buildah (vfs: no overlay mount, no fuse), so it goes with the rest of
# target/ and never touches the machine's own container storage. tests/support/image.rs
# passes the same options.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
buildah_root="$repo/target/buildah"
bah() {
  buildah --root "$buildah_root/storage" --runroot "$buildah_root/run" --storage-driver vfs "$@"
}
# An image name already in that storage?
have_image() { bah inspect --type image "$1" >/dev/null 2>&1; }
# Remove the other tags of an image's repository (bases made under an older key).
drop_older() {
  local repository=${1%:*}
  # grep finds nothing on a fresh store (no older image): not a failure under pipefail.
  bah images --format '{{.Name}}:{{.Tag}}' | { grep "^$repository:" || true; } |
    { grep -vxF "$1" || true; } |
    while read -r old; do bah rmi "$old" >/dev/null 2>&1 || true; done
}
