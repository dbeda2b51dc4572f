#!/usr/bin/env bash
# test.sh is `make test`: it installs or starts what the suite needs
# (scripts/ensure-test-deps.sh, scripts/ensure-postgres.sh), runs the whole suite
# against real PostgreSQL with the race detector, and then, passed or failed, leaves
# nothing running and no per-test database behind:
#
#   - the test pooler runs in a directory of this run (PGRUN_PGBOUNCER_DIR) and is
#     stopped at the end;
#   - per-test databases a failed test kept (testdb_..._inst_...) are dropped, unless
#     PGRUN_KEEP_TEST_DBS=1 keeps them for a look with psql; pgtestdb's template
#     databases (testdb_tpl_... without _inst_) stay, as the next run's cache.
#
# Arguments go to go test (default ./...). PGRUN_NO_INSTALL=1 installs nothing and
# says what is missing instead (scripts/lib/install.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$(dirname "$here")"
log() { echo "test: $*" >&2; }
GO=${GO:-go}

scripts/ensure-test-deps.sh
PGRUN_DATABASE_URL=$(scripts/ensure-postgres.sh | tail -n 1)
export PGRUN_DATABASE_URL

# The pooler of this run, reachable by user postgres (pgbouncer runs as it).
pool_parent=$(mktemp -d /tmp/pgrun-test-pooler.XXXXXX)
chmod 755 "$pool_parent"
export PGRUN_PGBOUNCER_DIR=$pool_parent/pgbouncer

cleanup() {
  local pidfile=$PGRUN_PGBOUNCER_DIR/pgbouncer.pid
  if [ -f "$pidfile" ]; then
    kill "$(cat "$pidfile")" 2>/dev/null || true
  fi
  rm -rf "$pool_parent"
  if [ "${PGRUN_KEEP_TEST_DBS:-}" != 1 ]; then
    local db
    for db in $(psql "$PGRUN_DATABASE_URL" -XAtqc \
      "select datname from pg_database where datname like 'testdb\_tpl\_%\_inst\_%'" 2>/dev/null); do
      # datname comes from the catalog and matches the pattern above: safe to quote.
      # Without force: a database still in use (another run's) is left alone.
      psql "$PGRUN_DATABASE_URL" -XAtqc "drop database if exists \"$db\"" >/dev/null 2>&1 ||
        log "left $db: it is in use"
    done
  fi
}
trap cleanup EXIT

[ $# -gt 0 ] || set -- ./...
"$GO" test -race -count=1 "$@"
