#!/usr/bin/env bash
# ensure-postgres.sh makes a usable PostgreSQL with pgvector and prints its URL as the
# last line of stdout (all progress goes to stderr), so callers can write:
#
#   PGRUN_DATABASE_URL=$(scripts/ensure-postgres.sh)
#
# In order it uses:
#   a. $PGRUN_DATABASE_URL, else $DATABASE_URL, if it answers (printed as given);
#   b. a server on 127.0.0.1:5432, user postgres, trust auth;
#   c. the Debian cluster(s) of $PG_MAJOR (pg_lsclusters), started if down, then b again;
#   d. else it installs PostgreSQL $PG_MAJOR with apt if missing (and tries b/c again,
#      since Debian's package creates a cluster), and finally runs a private cluster in
#      ./.pgdata (repo root; must be gitignored) on 127.0.0.1:$PGRUN_PRIVATE_PORT, trust
#      auth, socket inside the data dir, started with pg_ctl as user postgres when run
#      as root.
# Then it makes sure the server offers the "vector" extension, running
# scripts/install-pgvector.sh for a server on this machine (fatal if that fails: the
# tests need it), and checks that the server still answers.
#
# For a local server (b-d) the URL names database pgrun, created if missing, so that
# the demo's tables do not land in "postgres". Fast and quiet when all is in place.
#
# Environment:
#   PGRUN_DATABASE_URL, DATABASE_URL  a server to use if it answers
#   PG_MAJOR                          PostgreSQL major version (default 15)
#   PGRUN_FORCE_PRIVATE=1             skip a-c and go straight to the private cluster
#   PGRUN_PRIVATE_PORT                the private cluster's port (default 54329)
#   PGRUN_PGDATA                      the private cluster's directory (default <repo>/.pgdata)
#   PGRUN_NO_INSTALL=1                install nothing: say what is missing and exit 3
# Stop the private cluster with: runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D .pgdata stop
# (or without runuser when not root).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
PG_MAJOR=${PG_MAJOR:-15}
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PORT=${PGRUN_PRIVATE_PORT:-54329}
DATA=${PGRUN_PGDATA:-$root/.pgdata}
LOCAL_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
log() { echo "ensure-postgres: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

answers() { # URL
  PGCONNECT_TIMEOUT=3 psql "$1" -XAtqc 'select 1' >/dev/null 2>&1
}

# apt_install and PGRUN_NO_INSTALL: scripts/lib/install.sh
. "$here/lib/install.sh"

if ! command -v psql >/dev/null 2>&1; then
  log "installing the PostgreSQL client (postgresql-client-$PG_MAJOR)"
  apt_install "postgresql-client-$PG_MAJOR"
fi

# is_local: whether the URL's server is on this machine (so install-pgvector.sh can help).
is_local() { # URL
  local host
  host=$(psql "$1" -XAtqc "select coalesce(inet_server_addr()::text, 'socket')" 2>/dev/null) || return 1
  case $host in socket | 127.* | ::1 | ::1/128) return 0 ;; esac
  return 1
}

# The private cluster (d). Run as root, initdb and the server run as user postgres.
as_owner() { if is_root; then runuser -u postgres -- "$@"; else "$@"; fi; }
PRIVATE_URL="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
private_running() { [ -f "$DATA/postmaster.pid" ] && as_owner "$PG_BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }
start_private() {
  [ -f "$DATA/PG_VERSION" ] || return 1
  private_running && return 0
  log "starting the private cluster in $DATA on 127.0.0.1:$PORT"
  # unix socket paths are limited to 107 bytes: the socket goes in the data dir if it fits.
  local sockdir=$DATA
  [ $((${#DATA} + 20)) -le 100 ] || sockdir=/tmp
  as_owner "$PG_BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$sockdir" start >/dev/null ||
    { tail -n 20 "$DATA/server.log" >&2 || true; die "could not start the private cluster; see $DATA/server.log"; }
}

# finish installs pgvector if the server lacks it, checks the server still answers, and
# prints the URL to use. "own" marks a local server of ours: its URL is switched to
# database pgrun (created if missing).
finish() { # URL [own]
  local url=$1 has
  has=$(psql "$url" -XAtqc "select count(*) from pg_available_extensions where name = 'vector'")
  if [ "$has" != 1 ]; then
    if [ "${2:-}" = own ] || is_local "$url"; then
      log "the server lacks pgvector; running scripts/install-pgvector.sh"
      PG_MAJOR=$PG_MAJOR "$here/install-pgvector.sh" || die "installing pgvector failed (the tests need it)"
      if ! answers "$url"; then
        log "the server stopped answering after the pgvector install; starting it again"
        if [ "$url" = "$PRIVATE_URL" ]; then start_private; else start_debian_clusters || true; fi
        wait_answers "$url" || die "PostgreSQL at $url does not answer after the pgvector install"
      fi
      has=$(psql "$url" -XAtqc "select count(*) from pg_available_extensions where name = 'vector'")
      [ "$has" = 1 ] || die "pgvector was installed but the server at $url does not offer it (another PostgreSQL version?)"
    else
      die "the server at $url does not offer the vector extension (pgvector) and is not on this machine; install pgvector there"
    fi
  fi
  if [ "${2:-}" = own ]; then
    if [ "$(psql "$url" -XAtqc "select count(*) from pg_database where datname = 'pgrun'")" = 0 ]; then
      log "creating database pgrun"
      psql "$url" -XAtqc 'create database pgrun' >/dev/null 2>&1 ||
        [ "$(psql "$url" -XAtqc "select count(*) from pg_database where datname = 'pgrun'")" = 1 ] ||
        die "could not create database pgrun"
    fi
    url=${url/\/postgres\?/\/pgrun?}
  fi
  echo "$url"
  exit 0
}

wait_answers() { # URL: up to 10 s
  local i
  for i in $(seq 1 50); do
    answers "$1" && return 0
    [ "$i" -lt 50 ] && sleep 0.2
  done
  return 1
}

# start_debian_clusters starts the Debian clusters of $PG_MAJOR that are down; it fails
# if there is none.
start_debian_clusters() {
  command -v pg_lsclusters >/dev/null 2>&1 || return 1
  local found=1 ver name status
  while read -r ver name _ status _; do
    [ "$ver" = "$PG_MAJOR" ] || continue
    found=0
    if [ "$status" != online ]; then
      log "starting Debian cluster $ver/$name"
      pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start >&2 || log "could not start $ver/$name"
    fi
  done < <(pg_lsclusters --no-header 2>/dev/null)
  return $found
}

try_local() {
  answers "$LOCAL_URL" && finish "$LOCAL_URL" own
  if start_debian_clusters; then
    wait_answers "$LOCAL_URL" && finish "$LOCAL_URL" own
    log "the Debian cluster does not answer on 127.0.0.1:5432"
  fi
  return 0
}

if [ "${PGRUN_FORCE_PRIVATE:-}" != 1 ]; then
  for url in "${PGRUN_DATABASE_URL:-}" "${DATABASE_URL:-}"; do
    if [ -n "$url" ]; then
      answers "$url" && finish "$url"
      log "the configured URL ($url) does not answer; trying the local server"
    fi
  done
  try_local
fi

# d. Install PostgreSQL if it is missing; Debian's package creates and starts a cluster,
# so try that first.
if [ ! -x "$PG_BIN/initdb" ]; then
  log "installing PostgreSQL $PG_MAJOR (postgresql-$PG_MAJOR, postgresql-contrib)"
  apt_install "postgresql-$PG_MAJOR" "postgresql-client-$PG_MAJOR" postgresql-contrib
  [ -x "$PG_BIN/initdb" ] || die "PostgreSQL $PG_MAJOR installed but $PG_BIN/initdb is missing"
  [ "${PGRUN_FORCE_PRIVATE:-}" = 1 ] || try_local
fi

if is_root; then
  id postgres >/dev/null 2>&1 || die "user postgres is missing (it comes with Debian's postgresql-common)"
fi
if [ ! -f "$DATA/PG_VERSION" ]; then
  mkdir -p "$DATA"
  if is_root; then
    chown postgres:postgres "$DATA"
    if ! runuser -u postgres -- test -w "$DATA"; then
      # A parent directory is closed to user postgres (a clone under /root, say).
      [ -z "${PGRUN_PGDATA:-}" ] || die "user postgres cannot reach PGRUN_PGDATA=$DATA"
      rmdir "$DATA" 2>/dev/null || true
      DATA=/var/tmp/pgrun-pgdata-$(printf %s "$root" | cksum | cut -d' ' -f1)
      log "user postgres cannot reach $root; using $DATA instead"
      mkdir -p "$DATA"
      chown postgres:postgres "$DATA"
    fi
  fi
  chmod 700 "$DATA"
fi
if [ ! -f "$DATA/PG_VERSION" ]; then
  log "creating a private cluster in $DATA (PostgreSQL $PG_MAJOR, trust auth)"
  out=$(mktemp)
  if ! as_owner "$PG_BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$out" 2>&1; then
    cat "$out" >&2
    rm -f "$out"
    die "initdb failed"
  fi
  rm -f "$out"
elif [ "$(cat "$DATA/PG_VERSION")" != "$PG_MAJOR" ]; then
  die "$DATA holds a PostgreSQL $(cat "$DATA/PG_VERSION") cluster, not $PG_MAJOR; remove it (rm -rf $DATA) to start afresh"
fi
start_private
wait_answers "$PRIVATE_URL" || die "the private cluster does not answer on 127.0.0.1:$PORT; see $DATA/server.log"
finish "$PRIVATE_URL" own
