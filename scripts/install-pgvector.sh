#!/usr/bin/env bash
# install-pgvector.sh installs the pgvector extension ("vector") into the local
# PostgreSQL (15 by default).
#
# Debian bookworm does not package pgvector, so this builds Debian's own source
# package from the trixie deb-src suite (same mirror as the machine's other Debian
# sources) against postgresql-server-dev-$PG_MAJOR, with with_llvm=no (no JIT bitcode),
# and installs it with `make install`.
#
# Idempotent: if vector.control and vector.so are already installed it prints one line
# and exits at once. Installing the dev package can upgrade the server package, which
# may stop the server: afterwards every cluster of $PG_MAJOR that does not answer is
# started again with pg_ctlcluster.
#
# Progress goes to stderr, one line per step, prefixed "install-pgvector:".
#
# Environment:
#   PG_MAJOR                 PostgreSQL major version (default 15)
#   PG_CONFIG                pg_config to build against (default /usr/lib/postgresql/$PG_MAJOR/bin/pg_config)
#   PGRUN_PGVECTOR_FORCE=1   build and install even if pgvector is already there
set -euo pipefail

PG_MAJOR=${PG_MAJOR:-15}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
log() { echo "install-pgvector: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

sharedir() {
  if [ -x "$PG_CONFIG" ]; then "$PG_CONFIG" --sharedir; else echo "/usr/share/postgresql/$PG_MAJOR"; fi
}
pkglibdir() {
  if [ -x "$PG_CONFIG" ]; then "$PG_CONFIG" --pkglibdir; else echo "/usr/lib/postgresql/$PG_MAJOR/lib"; fi
}
installed() { [ -f "$(sharedir)/extension/vector.control" ] && [ -f "$(pkglibdir)/vector.so" ]; }
installed_version() { sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$(sharedir)/extension/vector.control"; }

if [ "${PGRUN_PGVECTOR_FORCE:-}" != 1 ] && installed; then
  log "pgvector $(installed_version) already installed for PostgreSQL $PG_MAJOR"
  exit 0
fi
. "$(dirname "${BASH_SOURCE[0]}")/lib/install.sh" # may_install, PGRUN_NO_INSTALL
may_install "pgvector for PostgreSQL $PG_MAJOR" "sudo $0 (a Debian source list, postgresql-server-dev-$PG_MAJOR and a compiler; the build goes into the server's extension directory)"
[ "$(id -u)" -eq 0 ] || die "pgvector is missing and installing it needs root (apt-get, make install); run: sudo $0"
command -v apt-get >/dev/null 2>&1 || die "pgvector is missing and this is not a Debian-like system (no apt-get); install pgvector for PostgreSQL $PG_MAJOR by hand"

# One install at a time (two callers racing would fight over dpkg's lock and the files).
lock=/run/lock/pgrun-install-pgvector.lock
[ -d /run/lock ] || lock=/tmp/pgrun-install-pgvector.lock
exec 9>"$lock"
flock 9
if [ "${PGRUN_PGVECTOR_FORCE:-}" != 1 ] && installed; then
  log "pgvector $(installed_version) was installed meanwhile"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
work=$(mktemp -d /tmp/pgrun-pgvector.XXXXXX)
trap 'rm -rf "$work"' EXIT
# run quietly, but show the command's output if it fails.
run() { # description command...
  local what=$1; shift
  if ! "$@" >"$work/out.log" 2>&1; then
    tail -n 40 "$work/out.log" >&2
    die "$what failed: $*"
  fi
}

# The Debian mirror the machine already uses for its main archive (deb822 .sources or
# one-line .list), so that the trixie source packages come from the same host.
mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    case $f in */pgrun-trixie-src.sources) continue ;; esac
    # URIs lines of stanzas that are Debian's main archive (not -security, not third party).
    uri=$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' "$f" |
      grep -E '/debian/?$' | grep -v -- '-security' | head -n 1 || true)
    [ -n "$uri" ] && { echo "${uri%/}"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1 == "deb" || $1 == "deb-src" { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|ftp|file|mirror):/) { print $i; break } }' "$f" |
      grep -E '/debian/?$' | grep -v -- '-security' | head -n 1 || true)
    [ -n "$uri" ] && { echo "${uri%/}"; return; }
  done
  echo "http://deb.debian.org/debian"
}

src=/etc/apt/sources.list.d/pgrun-trixie-src.sources
if [ ! -f "$src" ]; then
  m=$(mirror)
  log "adding Debian trixie source packages from $m ($src)"
  cat >"$src" <<SOURCES
# Added by pgrun's scripts/install-pgvector.sh: source packages only (deb-src), to
# build pgvector, which bookworm does not package. Safe to remove afterwards.
Types: deb-src
URIs: $m
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi

log "apt-get update"
run "apt-get update" apt-get update -q
server_before=$(dpkg-query -W -f='${Version}' "postgresql-$PG_MAJOR" 2>/dev/null || true)
log "installing build dependencies (postgresql-server-dev-$PG_MAJOR, make, gcc, dpkg-dev)"
run "installing the build dependencies" \
  apt-get install -y -q --no-install-recommends "postgresql-server-dev-$PG_MAJOR" make gcc libc6-dev dpkg-dev
server_after=$(dpkg-query -W -f='${Version}' "postgresql-$PG_MAJOR" 2>/dev/null || true)
if [ "$server_before" != "$server_after" ]; then
  log "note: postgresql-$PG_MAJOR went from ${server_before:-none} to ${server_after:-none} with the dev package"
fi

cd "$work"
log "fetching Debian's pgvector source package (trixie)"
# APT::Sandbox::User=root: the temp dir is root's, so _apt could not write to it.
run "apt-get source pgvector" apt-get source -q -o APT::Sandbox::User=root pgvector
dir=$(find . -maxdepth 1 -type d -name 'pgvector-*' | head -n 1)
[ -n "$dir" ] || die "apt-get source pgvector unpacked nothing"
cd "$dir"
log "building ${dir#./} against $("$PG_CONFIG" --version) (with_llvm=no)"
run "make" make -j"$(nproc)" with_llvm=no PG_CONFIG="$PG_CONFIG"
run "make install" make install with_llvm=no PG_CONFIG="$PG_CONFIG"
installed || die "the build finished but vector.control or vector.so is missing"
log "installed pgvector $(installed_version) into $(sharedir)/extension and $(pkglibdir)"

# The dev package may have upgraded (and stopped) the server: make sure every cluster of
# this major version answers, and start those that do not.
if command -v pg_lsclusters >/dev/null 2>&1; then
  while read -r ver name port _status _; do
    [ "$ver" = "$PG_MAJOR" ] || continue
    if ! pg_isready -q -h 127.0.0.1 -p "$port" && ! pg_isready -q -p "$port"; then
      log "cluster $ver/$name (port $port) does not answer after the package install; starting it"
      pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start >&2 ||
        die "could not start cluster $ver/$name; see /var/log/postgresql/postgresql-$ver-$name.log"
    fi
  done < <(pg_lsclusters --no-header 2>/dev/null)
fi
