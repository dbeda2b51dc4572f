#!/usr/bin/env bash
# ensure-postgres.sh makes a usable PostgreSQL and prints its URL as the last line of
# stdout (progress goes to stderr), so callers can write:
#
#   export PGRUN_DATABASE_URL=$(scripts/ensure-postgres.sh)
#
# In order it uses: $PGRUN_DATABASE_URL or $DATABASE_URL if it answers; a server on
# 127.0.0.1:5432 (user postgres, trust auth); the Debian cluster, started if it is
# down; else it installs PostgreSQL $PG_MAJOR with apt if missing and runs a private
# cluster under ./.pgdata on 127.0.0.1:$PGRUN_PRIVATE_PORT. Then it makes sure pgvector
# is installed (scripts/install-pgvector.sh). On a local server the URL names database
# pgrun, created if missing. Fast and quiet when all is in place.
#
# Environment: PGRUN_DATABASE_URL / DATABASE_URL, PG_MAJOR (15), PGRUN_PRIVATE_PORT
# (54329), PGRUN_FORCE_PRIVATE=1 to skip straight to the private cluster.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
PG_MAJOR=${PG_MAJOR:-15}
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PORT=${PGRUN_PRIVATE_PORT:-54329}
LOCAL_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
log() { echo "ensure-postgres: $*" >&2; }

answers() { # URL
  command -v psql >/dev/null 2>&1 || return 1
  PGCONNECT_TIMEOUT=3 psql "$1" -XAtqc 'select 1' >/dev/null 2>&1
}

need_psql() {
  if ! command -v psql >/dev/null 2>&1; then
    log "installing the PostgreSQL client"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null && apt-get install -y -q "postgresql-client-$PG_MAJOR" >/dev/null
  fi
}

# with_pgvector installs pgvector if needed, checks the server still answers, and
# prints the URL to use. A local server's URL names database pgrun (created here if
# missing) so that the demo's tables do not land in "postgres"; a URL the caller gave
# is printed as given.
with_pgvector() { # URL [own]
  "$here/install-pgvector.sh" >&2
  if ! answers "$1"; then
    log "the server stopped answering after the pgvector install; starting it again"
    start_debian_cluster || true
    answers "$1" || { log "PostgreSQL at $1 does not answer"; exit 1; }
  fi
  local url=$1
  if [ "${2:-}" = own ]; then
    if [ "$(psql "$1" -XAtqc "select count(*) from pg_database where datname = 'pgrun'")" = 0 ]; then
      log "creating database pgrun"
      psql "$1" -XAtqc 'create database pgrun' >/dev/null
    fi
    url=${1/\/postgres\?/\/pgrun?}
  fi
  echo "$url"
  exit 0
}

start_debian_cluster() {
  command -v pg_lsclusters >/dev/null 2>&1 || return 1
  local found=1
  while read -r ver name _port status _; do
    [ "$ver" = "$PG_MAJOR" ] || continue
    found=0
    if [ "$status" != "online" ]; then
      log "starting Debian cluster $ver/$name"
      pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start >&2 || return 1
    fi
  done < <(pg_lsclusters --no-header 2>/dev/null)
  return $found
}

need_psql
if [ "${PGRUN_FORCE_PRIVATE:-}" != 1 ]; then
  for url in "${PGRUN_DATABASE_URL:-}" "${DATABASE_URL:-}"; do
    if [ -n "$url" ]; then
      answers "$url" && with_pgvector "$url"
      log "the configured URL does not answer; trying the local server"
    fi
  done
  answers "$LOCAL_URL" && with_pgvector "$LOCAL_URL" own
  if start_debian_cluster; then
    for _ in $(seq 1 50); do answers "$LOCAL_URL" && with_pgvector "$LOCAL_URL" own; sleep 0.2; done
    log "the Debian cluster started but does not answer on 127.0.0.1:5432; using a private cluster"
  fi
fi

# A private cluster under ./.pgdata.
if [ ! -x "$PG_BIN/initdb" ]; then
  log "installing PostgreSQL $PG_MAJOR"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q "postgresql-$PG_MAJOR" "postgresql-client-$PG_MAJOR" >/dev/null
fi
data=$root/.pgdata
url="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
as_owner() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if [ ! -f "$data/PG_VERSION" ]; then
  log "creating a private cluster in $data"
  mkdir -p "$data"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$data"
  chmod 700 "$data"
  as_owner "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 >/dev/null
fi
if ! answers "$url"; then
  log "starting the private cluster on 127.0.0.1:$PORT"
  as_owner "$PG_BIN/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -c unix_socket_directories=$data" start >&2
fi
answers "$url" || { log "the private cluster does not answer; see $data/server.log"; exit 1; }
with_pgvector "$url" own
