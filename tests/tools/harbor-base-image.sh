#!/usr/bin/env bash
# A Debian bookworm base image for Harbor trials on a machine that can reach no container registry:
# the rootfs is built with debootstrap from Debian's own packages and imported into podman as
# localhost/sweep-harbor-base:bookworm. Prints the image reference pinned by digest, which
# `sweep export --base-image` takes (podman resolves a digest-pinned FROM from local storage).
#
# Cached: the rootfs tarball is kept in CACHE (default .cache/harbor-base) under a name that
# carries the package list; a second run only re-imports it when podman lost the image.
set -euo pipefail
CACHE="${1:-.cache/harbor-base}"
PACKAGES="python3,python3-venv,git,ca-certificates"
TAG="localhost/sweep-harbor-base:bookworm"
KEY=$(printf '%s' "bookworm $PACKAGES" | sha256sum | cut -c1-16)
TARBALL="$CACHE/rootfs-$KEY.tar"
mkdir -p "$CACHE"

if [ ! -s "$TARBALL" ]; then
    root="$CACHE/rootfs-$KEY.tmp"
    rm -rf "$root"
    debootstrap --variant=minbase --include="$PACKAGES" bookworm "$root" http://deb.debian.org/debian >&2
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$TARBALL.tmp" .
    mv -f "$TARBALL.tmp" "$TARBALL"
    rm -rf "$root"
fi

if [ "$(podman image inspect --format '{{.Labels.sweep_rootfs}}' "$TAG" 2>/dev/null || true)" != "$KEY" ]; then
    podman import --change "LABEL sweep_rootfs=$KEY" --change "CMD [\"/bin/bash\"]" "$TARBALL" "$TAG" >&2
fi
digest=$(podman image inspect --format '{{.Digest}}' "$TAG")
echo "$TAG@$digest"
