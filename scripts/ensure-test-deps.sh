#!/usr/bin/env bash
# ensure-test-deps.sh installs what the test suite needs beyond Go and PostgreSQL
# (scripts/ensure-postgres.sh makes that): the one list `make test` (scripts/test.sh)
# and CI (.ci/run) share, so a fresh machine passes the README's test command.
#
#   gcc, libc6-dev     go test -race builds with cgo
#   postgresql-client  psql, for the scripts and the README's psql session
#   python3-psycopg    the Python example worker in the conformance suite
#   pgbouncer          the pooler tests (scripts/ensure-pgbouncer.sh starts one)
#   tmux               runner top, tested in a real terminal
#   nodejs, npm        the Node example, then its packages (npm ci in examples/node-enqueue)
#   chromium           the dashboard's browser tests (scripts/ensure-chromium.sh)
#
# Fast and quiet when everything is there. PGRUN_NO_INSTALL=1 installs nothing: it
# lists everything that is missing, with the commands that install it, and exits 3.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
log() { echo "ensure-test-deps: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
. "$here/lib/install.sh"

missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
# Debian's python3 sees Debian's psycopg (a python3 earlier on PATH may not).
/usr/bin/python3 -c 'import psycopg' >/dev/null 2>&1 || missing+=(python3-psycopg)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
[ -x "${PGRUN_CHROMIUM:-/usr/bin/chromium}" ] || missing+=(chromium fonts-dejavu-core)
node=$root/examples/node-enqueue
npm_stale() { [ ! -f "$node/node_modules/.package-lock.json" ] || [ "$node/package-lock.json" -nt "$node/node_modules/.package-lock.json" ]; }

if [ "${PGRUN_NO_INSTALL:-}" = 1 ]; then
  todo=()
  [ ${#missing[@]} -eq 0 ] || todo+=("sudo apt-get install ${missing[*]}")
  npm_stale && todo+=("npm ci --prefix examples/node-enqueue")
  if [ ${#todo[@]} -gt 0 ]; then
    log "missing, and not installed (PGRUN_NO_INSTALL=1):"
    for t in "${todo[@]}"; do log "  $t"; done
    exit 3
  fi
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} (apt-get)"
  apt_install "${missing[@]}"
fi
if npm_stale; then
  log "installing the Node example's packages (npm ci in examples/node-enqueue)"
  npm ci --prefix "$node" --no-audit --no-fund --loglevel=error >/dev/null
fi
