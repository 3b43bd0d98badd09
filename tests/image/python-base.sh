#!/usr/bin/env bash
# Makes the Python base the stdio image test builds on, in place of python:3.12-slim
# (whose registry this machine cannot reach): Debian 12 from its own packages
# (debootstrap, minbase) with python3 (and `python` naming it), and the pinned MCP SDK
# closure (tests/py/requirements.txt) installed into /usr/local, where Debian's python3
# finds it.
#
#   tests/image/python-base.sh      prints the image name (localhost/...:KEY)
#
# KEY is a hash of this script and the requirements, so the stored base is reused until
# one of them changes (as tests/run.sh reuses its venvs). The SDK's wheels are fetched by
# the venv's pip (STATE_GUARD_TEST_PYTHON, else target/pyvenv), the same CPython minor
# version as Debian 12's, so the binary wheels fit; the script checks that it is.
set -euo pipefail
. "$(dirname "$0")/buildah.sh"

requirements="$repo/tests/py/requirements.txt"
python=${STATE_GUARD_TEST_PYTHON:-$repo/target/pyvenv/bin/python}
suite=bookworm
mirror=http://deb.debian.org/debian
key=$(cat "$0" "$(dirname "$0")/buildah.sh" "$requirements" | sha256sum | cut -c1-16)
name="localhost/mcp-state-guard-python-base:$key"
if have_image "$name"; then
  echo "$name"
  exit 0
fi

work=$(mktemp -d)
ctr=""
cleanup() {
  [ -z "$ctr" ] || bah rm "$ctr" >/dev/null 2>&1 || true
  # debootstrap mounts /proc (and /sys) in the target while it configures packages.
  for m in proc sys; do umount "$work/rootfs/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
root="$work/rootfs"
debootstrap --variant=minbase --include=python3,python-is-python3 "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -30 "$work/debootstrap.log" >&2
  exit 1
}
image_python=$(chroot "$root" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv_python=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$image_python" != "$venv_python" ]; then
  echo "python-base: Debian's python3 is $image_python, the venv's $venv_python: the wheels would not fit" >&2
  exit 1
fi
"$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
  --target "$root/usr/local/lib/python$image_python/dist-packages" -r "$requirements"
chroot "$root" python3 -c 'import mcp.server.stdio, mcp.server.lowlevel' || {
  echo "python-base: the SDK does not import in the image" >&2
  exit 1
}
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

ctr=$(bah from --pull-never scratch)
mnt=$(bah mount "$ctr")
cp -a "$root"/. "$mnt"/
bah umount "$ctr" >/dev/null
bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd python3 "$ctr"
bah commit --quiet --rm "$ctr" "$name" >/dev/null
ctr=""
drop_older "$name"
echo "$name"
