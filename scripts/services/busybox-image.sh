#!/usr/bin/env bash
# busybox-image.sh SOCKET - give the engine behind the unix SOCKET (dockerd or Podman's
# Docker-compatible API) the image localhost/busybox:latest, built from Debian's static busybox,
# with no registry involved: a ~2 MB root filesystem tarball is posted to the engine's
# `POST /images/create?fromSrc=-` (what `docker import` does). Idempotent.
#
# The image holds busybox and its applet links, /etc/passwd and /etc/group with root and
# nobody (65534), and world-writable /tmp and /var/tmp. Its default command is /bin/sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
sock=${1:?usage: busybox-image.sh ENGINE_SOCKET}
image=localhost/busybox
api=http://engine/v1.41

if curl -sf --unix-socket "$sock" "$api/images/$image:latest/json" >/dev/null; then exit 0; fi
need_packages busybox-static

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,var/tmp,proc,sys,dev,root,run}
cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
cat > "$root/etc/passwd" <<'PW'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/sh
PW
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
chmod 1777 "$root/tmp" "$root/var/tmp"
tar --numeric-owner -C "$root" -cf "$work/rootfs.tar" .

# changes=CMD ["/bin/sh"], URL-encoded
curl -sf --unix-socket "$sock" -X POST -H 'Content-Type: application/x-tar' \
  --data-binary @"$work/rootfs.tar" \
  "$api/images/create?fromSrc=-&repo=$image&tag=latest&changes=CMD%20%5B%22%2Fbin%2Fsh%22%5D" >/dev/null \
  || die "the engine at $sock refused the busybox import"
curl -sf --unix-socket "$sock" "$api/images/$image:latest/json" >/dev/null \
  || die "imported busybox but the engine at $sock does not list $image:latest"
say "imported $image:latest into $sock"
