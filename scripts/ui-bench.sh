#!/usr/bin/env bash
# ui-bench.sh times every page of the dashboard against 5 million jobs:
#
#   scripts/ui-bench.sh [-benchtime 20x]
#
# The first run creates database pgrun_ui_bench on the server of $PGRUN_DATABASE_URL
# (else scripts/ensure-postgres.sh's), migrates it and fills it with
# tests/testdata/ui_bench_fill.sql (a few minutes; the insert triggers are switched
# off for the load, so the server's user must be a superuser). Later runs reuse it.
# Then it runs BenchmarkUIPages (tests/ui_bench_test.go). Extra arguments go to
# go test. Drop the database when done: psql "$URL" -c 'drop database pgrun_ui_bench'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { echo "ui-bench: $*" >&2; }

server=${PGRUN_DATABASE_URL:-$(scripts/ensure-postgres.sh | tail -n 1)}
re='^(postgres(ql)?://[^/]*)(/[^?]*)?(\?.*)?$'
[[ $server =~ $re ]] || { log "cannot read the URL $server"; exit 1; }
url="${BASH_REMATCH[1]}/pgrun_ui_bench${BASH_REMATCH[4]}"

if ! psql "$server" -XAtqc "select 1 from pg_database where datname = 'pgrun_ui_bench'" | grep -q 1; then
  log "creating pgrun_ui_bench"
  psql "$server" -Xqc 'create database pgrun_ui_bench'
fi
go run ./cmd/runner migrate up --database-url "$url" >&2
if [ "$(psql "$url" -XAtqc 'select count(*) from (select 1 from pgrun.jobs limit 1) x')" = 0 ]; then
  log "filling pgrun_ui_bench with 5,000,000 jobs (a few minutes)"
  time psql "$url" -Xq -v ON_ERROR_STOP=1 -f tests/testdata/ui_bench_fill.sql >/dev/null
fi
PGRUN_UI_BENCH_URL=$url exec go test -run '^$' -bench BenchmarkUIPages -benchtime 20x "$@" ./tests/
