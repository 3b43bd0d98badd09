#!/usr/bin/env bash
# Run the official MCP conformance suite's 14 SEP-2322 (`input-required-result-*`) server scenarios
# against one MCP endpoint.
#
#   tests/conformance/run.sh URL OUTDIR
#   tests/conformance/run.sh --install-only
#
# URL     the MCP endpoint, e.g. http://127.0.0.1:8080/mcp (the sidecar, or a server directly)
# OUTDIR  where per-scenario results go (OUTDIR/<scenario>.log plus the suite's checks.json files)
#
# Prints `PASS <scenario>` / `FAIL <scenario>` per scenario and a final `N passed, M failed`;
# exits non-zero if any failed. A scenario passes when the suite exits 0, which ignores WARNING
# checks (SHOULD-level); warnings are listed on stderr so they don't go unnoticed.
#
# The suite (pinned in package.json / package-lock.json next to this script) is installed on first
# use into target/conformance at the repository root, never under tests/. It needs Node >= 20;
# on Node 20 register.mjs supplies the `fs.globSync` its bundle imports (native from Node 22).
# Expected: a plaintext legacy server passes 13/14 (only input-required-result-tampered-state
# fails); mcp-state-guard in front of it must make that 14/14.
set -euo pipefail

install_only=false
if [[ $# -eq 1 && $1 == --install-only ]]; then
  install_only=true
elif [[ $# -ne 2 ]]; then
  echo "usage: $0 URL OUTDIR | $0 --install-only" >&2
  exit 2
else
  url=$1
  outdir=$2
fi

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
install_dir=$(cd -- "$here/../.." && pwd)/target/conformance
cli=$install_dir/node_modules/@modelcontextprotocol/conformance/dist/index.js
version=$(node -p "require('$here/package.json').dependencies['@modelcontextprotocol/conformance']")

scenarios=(
  input-required-result-basic-elicitation
  input-required-result-basic-sampling
  input-required-result-basic-list-roots
  input-required-result-request-state
  input-required-result-multiple-input-requests
  input-required-result-multi-round
  input-required-result-missing-input-response
  input-required-result-non-tool-request
  input-required-result-result-type
  input-required-result-unsupported-methods
  input-required-result-tampered-state
  input-required-result-capability-check
  input-required-result-ignore-extra-params
  input-required-result-validate-input
)

installed_version() {
  node -p "require('$install_dir/node_modules/@modelcontextprotocol/conformance/package.json').version" 2>/dev/null || true
}

# Install (or re-install after a version bump). npm writes to the install dir only; the lock file
# next to this script, when present, makes it reproducible (`npm ci`).
if [[ ! -f $cli || $(installed_version) != "$version" ]]; then
  echo "installing @modelcontextprotocol/conformance@$version into $install_dir" >&2
  mkdir -p "$install_dir"
  cp "$here/package.json" "$install_dir/package.json"
  if [[ -f $here/package-lock.json ]]; then
    cp "$here/package-lock.json" "$install_dir/package-lock.json"
    (cd "$install_dir" && timeout 600 npm ci --no-audit --no-fund --loglevel=error) >&2
  else
    (cd "$install_dir" && timeout 600 npm install --no-audit --no-fund --loglevel=error) >&2
  fi
fi

$install_only && exit 0

mkdir -p "$outdir"
outdir=$(cd -- "$outdir" && pwd)
passed=0
failed=0
for scenario in "${scenarios[@]}"; do
  log=$outdir/$scenario.log
  # The suite's own per-scenario timeout bounds each run; `timeout` is the backstop if the
  # process itself wedges (e.g. a connection that never closes).
  if (cd "$install_dir" && timeout 120 node --import "$here/register.mjs" "$cli" \
        server --url "$url" --scenario "$scenario" --timeout 30000 -o "$outdir") >"$log" 2>&1; then
    echo "PASS $scenario"
    passed=$((passed + 1))
  else
    echo "FAIL $scenario"
    failed=$((failed + 1))
    # Just the failed checks' names and errors; the full report (scenario text too) is in $log.
    sed -n '/=== Failed Checks ===/,$p' "$log" | grep -E '^ +(- |Error:)' | sed 's/^ */    /' >&2 || true
  fi
  if grep -q '^Passed: .* [1-9][0-9]* warnings$' "$log"; then
    echo "  warnings in $scenario (see $log)" >&2
  fi
done

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
