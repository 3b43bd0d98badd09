#!/usr/bin/env bash
# Builds the performance harness profile-guided, as .ci/build-release.sh builds the
# shipped sidecar, so that its floor (D, `--role-bare-proxy`) is measured built the same
# way as B and B/D stays a ratio of like builds (docs/performance.md, "The shipped
# build"):
#   1. the harness built instrumented (-Cprofile-generate, the bench profile: LTO in one
#      unit, as the sidecar's release profile);
#   2. `harness --train-floor`: the JSON and SSE first calls and retries through the
#      floor, which writes its profile on SIGTERM (the harness's own processes, the
#      trainer and the upstream, write theirs apart, unused);
#   3. the floor's profiles merged (llvm-profdata from rustup's llvm-tools);
#   4. the harness built with -Cprofile-use on them; copied to OUT.
#
#   benches/harness/floor-pgo.sh OUT
#   HARNESS_SIDECAR_BIN=target/pgo/use/release/mcp-state-guard HARNESS_BARE_BIN=OUT \
#     cargo bench --bench harness
set -euo pipefail
out=${1:?usage: floor-pgo.sh OUT}
out=$(realpath -m "$out")
cd "$(dirname "$0")/../.."

log() { printf 'floor-pgo: %s\n' "$*" >&2; }
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
[ -x "$profdata" ] || rustup component add llvm-tools >&2

# The harness's executable, built with RUSTFLAGS=$1 in the target directory $2.
build() {
  RUSTFLAGS="$1" cargo bench --locked --bench harness --no-run --target-dir "$2" \
    --message-format=json-render-diagnostics |
    sed -n 's/.*"executable":"\([^"]*\/harness-[^"]*\)".*/\1/p' | tail -1
}

runs=$PWD/target/pgo/floor-runs
rm -rf "$runs"
mkdir -p "$runs/build" "$runs/floor" "$runs/harness"
log "1/4 the harness, instrumented"
instrumented=$(build "-Cprofile-generate=$runs/build" target/pgo/floor-generate)
log "2/4 the floor's training workload"
LLVM_PROFILE_FILE="$runs/harness/%p-%m.profraw" "$instrumented" --train-floor \
  --profiles "$runs/floor" >&2
log "3/4 the profiles merged"
"$profdata" merge -o "$runs/floor.profdata" "$runs"/floor/*.profraw
log "4/4 the harness, with the floor's profile"
optimized=$(build "-Cprofile-use=$runs/floor.profdata" target/pgo/floor-use)
mkdir -p "$(dirname "$out")"
cp "$optimized" "$out"
log "built $out"
