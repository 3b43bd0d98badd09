#!/usr/bin/env bash
# Makes the runtime base the tests put under the Dockerfile's runtime stage in place of
# gcr.io/distroless/cc-debian12:nonroot (whose registry this machine cannot reach): what
# that image holds and the sidecar needs, unpacked from Debian 12's own packages, with
# no shell and no package manager, and the `nonroot` user 65532.
#
#   tests/image/runtime-base.sh      prints the image name (localhost/...:KEY)
#
# KEY is a hash of this script and the exact package files apt would fetch, so a Debian
# security update (or an edit here) makes a new base and anything else reuses the stored
# one. Packages: glibc (libc6), libgcc (libgcc-s1), CA certificates, tzdata, base-files
# (os-release), netbase (/etc/services, /etc/protocols). Maintainer scripts do not run
# (`dpkg-deb -x`), so what they would make is made here: the CA bundle, passwd/group.
set -euo pipefail
. "$(dirname "$0")/buildah.sh"

packages=(base-files netbase tzdata ca-certificates libc6 libgcc-s1)
uris=$(cd /tmp && apt-get download --print-uris "${packages[@]}" 2>/dev/null) || {
  # A machine whose package lists were never fetched.
  apt-get update -qq
  uris=$(cd /tmp && apt-get download --print-uris "${packages[@]}")
}
[ "$(wc -l <<<"$uris")" -eq "${#packages[@]}" ] || { printf 'runtime-base: apt-get cannot resolve %s:\n%s\n' "${packages[*]}" "$uris" >&2; exit 1; }
key=$( { cat "$0" "$(dirname "$0")/buildah.sh"; cut -d' ' -f2,4 <<<"$uris"; } | sha256sum | cut -c1-16)
name="localhost/mcp-state-guard-runtime-base:$key"
if have_image "$name"; then
  echo "$name"
  exit 0
fi

work=$(mktemp -d)
ctr=""
cleanup() {
  [ -z "$ctr" ] || bah rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/debs" "$work/rootfs"
(cd "$work/debs" && apt-get -o APT::Sandbox::User=root download -qq "${packages[@]}" >&2)
root="$work/rootfs"
mkdir -p "$root/var/lib/dpkg/status.d"
for deb in "$work"/debs/*.deb; do
  dpkg-deb -x "$deb" "$root"
  # What each package is, where scanners (Trivy, Grype, Syft) look on distroless: one
  # status file per package, since there is no dpkg database.
  package=$(dpkg-deb -f "$deb" Package)
  { echo "Package: $package"; echo "Status: install ok installed"
    dpkg-deb -f "$deb" | grep -v '^Package:'; } >"$root/var/lib/dpkg/status.d/$package"
done

# What dpkg's maintainer scripts would have made. The CA bundle as update-ca-certificates
# writes it (every certificate of the Mozilla set, in name order).
mkdir -p "$root/etc/ssl/certs"
find "$root/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | xargs cat >"$root/etc/ssl/certs/ca-certificates.crt"
ln -sfn /usr/share/zoneinfo/Etc/UTC "$root/etc/localtime"
# distroless's users: root, nobody and nonroot, none with a login shell (there is none).
cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
GROUP
cat >"$root/etc/nsswitch.conf" <<'NSS'
passwd: files
group: files
shadow: files
hosts: files dns
networks: files
protocols: files
services: files
NSS
install -d -m 0700 "$root/root"
install -d -m 0700 -o 65532 -g 65532 "$root/home/nonroot"
install -d -m 1777 "$root/tmp"

# No shell, no package manager, no maintainer tooling: ca-certificates' updater is a
# shell script, and nothing here could run it. Documentation except the licences goes.
rm -f "$root/usr/sbin/update-ca-certificates"
rm -rf "$root/etc/update-motd.d" "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/lintian" "$root/usr/share/bug" \
  "$root/etc/ca-certificates" "$root/usr/share/ca-certificates" "$root/etc/ssl/certs"/*.pem
find "$root/usr/share/doc" -type f ! -name copyright -delete
# Nothing runnable is left but the dynamic loader and the libraries.
runnable=$(find "$root" -type f -perm /111 ! -name '*.so' ! -name '*.so.*')
if [ -n "$runnable" ]; then
  echo "runtime-base: the rootfs holds programs: $runnable" >&2
  exit 1
fi

ctr=$(bah from --pull-never scratch)
mnt=$(bah mount "$ctr")
cp -a "$root"/. "$mnt"/
bah umount "$ctr" >/dev/null
# The configuration distroless :nonroot carries.
bah config \
  --user 65532:65532 --workingdir /home/nonroot \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --label org.opencontainers.image.description="distroless cc-debian12:nonroot equivalent from Debian packages: ${packages[*]}" \
  "$ctr"
bah commit --quiet --rm "$ctr" "$name" >/dev/null
ctr=""
drop_older "$name"
echo "$name"
