#!/usr/bin/env bash
# Builds the release binary the container image ships, the one way it is built: the
# Dockerfile's build stage runs this script, and so do the tests (tests/cases/helm.rs,
# tests/support/image.rs), which then run that binary (--version, check-config on the
# chart's rendered config, the image).
#
#   .ci/build-release.sh OUT_DIR [EXPECTED_VERSION]
#
# Copies the binary to OUT_DIR. With EXPECTED_VERSION (the image's version label), fails
# unless the binary's `--version` prints exactly that, so a label cannot lie.
#
# The build is profile-guided (docs/performance.md, "The shipped build"):
#   1. the sidecar is built instrumented (-Cprofile-generate), with the release profile
#      the shipped build has (LTO in one unit: a profile names a function by the unit it
#      was compiled in, so one taken from a differently split build misses most of them);
#   2. the performance harness is built (the dev profile: the test build shares its
#      dependencies) and runs its training workload through that binary (`harness
#      --train`: the harness's rows, JSON and SSE, single use, a JWT principal, the stdio
#      upstream), each sidecar stopped with SIGTERM so that it writes its profile;
#   3. the profiles are merged with llvm-profdata (rustup's llvm-tools component, added
#      when missing);
#   4. the shipped binary is built with -Cprofile-use on the merged profile.
# Steps 1-3 run once per source: the profile is kept under target/pgo by a key of the
# sources, the lock file, this script and the compiler, so running the script again is a
# no-op. The instrumented build's target directory is target/pgo/generate, the shipped
# build's target/pgo/use (a plain `cargo build --release` in target/release is left
# alone). STATE_GUARD_PGO=off builds without a profile (a builder that cannot add
# llvm-tools); the binary is the same code, slower by the figures in docs/performance.md.
set -euo pipefail
out=${1:?usage: build-release.sh OUT_DIR [EXPECTED_VERSION]}
expected=${2:-}
cd "$(dirname "$0")/.."

log() { printf 'build-release: %s\n' "$*" >&2; }

pgo=${STATE_GUARD_PGO:-on}
target_dir=target/pgo/use
# The caller's own flags (a target CPU, say) go into every build, and into the key.
rustflags=${RUSTFLAGS:-}
if [ "$pgo" = on ]; then
  # One build at a time: the tests may call this script from two threads at once.
  mkdir -p target/pgo
  exec 9>target/pgo/.lock
  flock 9
  host=$(rustc -vV | sed -n 's/^host: //p')
  profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
  key=$( (rustc -vV; echo "$rustflags"
    find Cargo.toml Cargo.lock src benches/harness .ci/build-release.sh -type f | LC_ALL=C sort |
    xargs sha256sum) | sha256sum | cut -c1-16)
  profile="$PWD/target/pgo/profiles/$key.profdata"
  if [ ! -s "$profile" ]; then
    if [ ! -x "$profdata" ]; then
      log "adding rustup's llvm-tools component (llvm-profdata)"
      rustup component add llvm-tools >&2
    fi
    generate="$PWD/target/pgo/generate"
    runs="$generate/runs"
    rm -rf "$runs"
    mkdir -p "$runs/sidecar"
    log "1/4 the sidecar, instrumented"
    # Build scripts and proc macros run instrumented too: their profiles go apart, to a
    # directory that stays the same (the flags are part of what cargo keeps built).
    RUSTFLAGS="$rustflags -Cprofile-generate=$generate/build-profiles" cargo build \
      --release --locked --bin mcp-state-guard --target-dir "$generate" >&2
    log "2/4 the harness, and its training workload through the instrumented sidecar"
    harness=$(cargo build --locked --bench harness --message-format=json-render-diagnostics |
      sed -n 's/.*"executable":"\([^"]*\/harness-[^"]*\)".*/\1/p' | tail -1)
    [ -x "$harness" ] || { log "the harness was not built"; exit 1; }
    "$harness" --train "$generate/release/mcp-state-guard" --profiles "$runs/sidecar" >&2
    log "3/4 the profiles merged"
    mkdir -p "$(dirname "$profile")"
    "$profdata" merge -o "$profile.partial" "$runs"/sidecar/*.profraw
    rm -f "$(dirname "$profile")"/*.profdata
    mv "$profile.partial" "$profile"
    rm -rf "$runs"
  fi
  rustflags="$rustflags -Cprofile-use=$profile"
  log "4/4 the shipped binary, with the profile $profile"
fi
RUSTFLAGS="$rustflags" cargo build --release --locked --bin mcp-state-guard --target-dir "$target_dir"
binary=$target_dir/release/mcp-state-guard
actual=$("$binary" --version)
if [ -n "$expected" ] && [ "$actual" != "$expected" ]; then
  echo "build-release: the binary's --version is '$actual', not '$expected'" >&2
  exit 1
fi
mkdir -p "$out"
cp "$binary" "$out/mcp-state-guard"
echo "$actual"
