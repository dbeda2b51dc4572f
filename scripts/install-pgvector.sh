#!/usr/bin/env bash
# install-pgvector.sh installs the pgvector extension into the local PostgreSQL 15.
#
# Debian bookworm does not package pgvector, so this builds Debian's own source
# package from the trixie deb-src suite against postgresql-server-dev-15 (with_llvm=no:
# no JIT bitcode, no clang needed) and installs it. Idempotent: if vector.control is
# already there it exits at once. Installing the dev package can upgrade the server
# package, which may stop the server: the script checks that it answers afterwards
# and starts the cluster again if not.
#
# Environment: PG_MAJOR (default 15), PG_CONFIG (default /usr/lib/postgresql/$PG_MAJOR/bin/pg_config).
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
log() { echo "install-pgvector: $*" >&2; }

sharedir() {
  if [ -x "$PG_CONFIG" ]; then "$PG_CONFIG" --sharedir; else echo "/usr/share/postgresql/$PG_MAJOR"; fi
}

if [ -f "$(sharedir)/extension/vector.control" ]; then
  log "pgvector already installed in $(sharedir)/extension"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  log "pgvector is missing and installing it needs root (apt-get); run: sudo $0"
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
src=/etc/apt/sources.list.d/pgrun-trixie-src.sources
if [ ! -f "$src" ]; then
  log "adding Debian trixie source packages ($src)"
  cat >"$src" <<'SOURCES'
# Added by pgrun's scripts/install-pgvector.sh: source packages only, to build pgvector.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi

log "apt-get update"
apt-get update -q >/dev/null
log "installing build dependencies (postgresql-server-dev-$PG_MAJOR, make, gcc, dpkg-dev)"
apt-get install -y -q --no-install-recommends "postgresql-server-dev-$PG_MAJOR" make gcc libc6-dev dpkg-dev >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
log "fetching Debian's pgvector source package"
apt-get source -q pgvector >/dev/null 2>&1 || apt-get source pgvector
dir=$(find . -maxdepth 1 -type d -name 'pgvector-*' | head -n 1)
[ -n "$dir" ] || { log "apt-get source pgvector unpacked nothing"; exit 1; }
cd "$dir"
log "building $(basename "$dir") (with_llvm=no)"
make -s with_llvm=no PG_CONFIG="$PG_CONFIG" >/dev/null
make -s install with_llvm=no PG_CONFIG="$PG_CONFIG" >/dev/null
[ -f "$(sharedir)/extension/vector.control" ] || { log "build finished but vector.control is missing"; exit 1; }
log "installed pgvector $(sed -n "s/^default_version = '\(.*\)'/\1/p" "$(sharedir)/extension/vector.control")"

# The dev package may have upgraded (and stopped) the server: make sure it answers.
if command -v pg_lsclusters >/dev/null 2>&1; then
  pg_lsclusters --no-header 2>/dev/null | while read -r ver name port status _; do
    if [ "$status" != "online" ]; then
      log "starting cluster $ver/$name (port $port) after the package install"
      pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start || log "could not start $ver/$name"
    fi
  done
fi
