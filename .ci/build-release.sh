#!/usr/bin/env bash
# Builds the release binary the container image ships, the one way it is built: the
# Dockerfile's build stage runs this script, and so do the tests (tests/cases/helm.rs),
# which then run that binary (--version, check-config on the chart's rendered config).
#
#   .ci/build-release.sh OUT_DIR [EXPECTED_VERSION]
#
# Copies the binary to OUT_DIR. With EXPECTED_VERSION (the image's version label), fails
# unless the binary's `--version` prints exactly that, so a label cannot lie.
set -euo pipefail
out=${1:?usage: build-release.sh OUT_DIR [EXPECTED_VERSION]}
expected=${2:-}
cd "$(dirname "$0")/.."
cargo build --release --locked --bin mcp-state-guard
binary=target/release/mcp-state-guard
actual=$("$binary" --version)
if [ -n "$expected" ] && [ "$actual" != "$expected" ]; then
  echo "build-release: the binary's --version is '$actual', not '$expected'" >&2
  exit 1
fi
mkdir -p "$out"
cp "$binary" "$out/mcp-state-guard"
echo "$actual"
