#!/usr/bin/env bash
# Install the pinned TypeScript MCP SDK v2 (package.json / package-lock.json next to this
# script) into target/ts at the repository root, never under tests/. Skipped when the
# installed lock file already equals the pinned one.
#
#   tests/ts/install.sh
#
# The peers (legacy_server.mjs, client_flows.mjs) are run in place from tests/ts with
# `node --import tests/ts/register.mjs ...`, which resolves their package imports from
# target/ts/node_modules. Needs Node >= 20 and npm.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
install_dir=$(cd -- "$here/../.." && pwd)/target/ts

if cmp -s "$here/package-lock.json" "$install_dir/node_modules/.package-lock.pinned" 2>/dev/null; then
  exit 0
fi
echo "installing the TypeScript MCP SDK (pinned) into $install_dir" >&2
mkdir -p "$install_dir"
cp "$here/package.json" "$here/package-lock.json" "$install_dir/"
(cd "$install_dir" && timeout 600 npm ci --no-audit --no-fund --loglevel=error) >&2
# npm ci replaces node_modules wholesale, so a stamp inside it can never outlive the
# install it describes.
cp "$here/package-lock.json" "$install_dir/node_modules/.package-lock.pinned"
