#!/usr/bin/env bash
# claim-path-bench.sh: the database side of one claim and one report, per call, with
# one client and no runner (pgbench). It creates (again) the database pgrun_claim_bench,
# migrates it, fills a queue and prints each statement's latency for claims and
# completions of 1, 50 and 500 jobs, and for a claim on an empty queue. It shows what
# a call costs apart from its rows (planning, function entry, the statement trigger).
#
#   scripts/claim-path-bench.sh            # 300 rounds of 1 and 50, 60 of 500
#   ROUNDS=1000 scripts/claim-path-bench.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
server=$(scripts/ensure-postgres.sh </dev/null | tail -n 1)
db=pgrun_claim_bench
url=${server%%\?*}
url="${url%/*}/$db?sslmode=disable"
rounds=${ROUNDS:-300}
export PGOPTIONS='-c client_min_messages=warning'
psql "$server" -qc "drop database if exists $db with (force)" -c "create database $db"
go run ./cmd/runner migrate up --database-url "$url" >/dev/null
psql "$url" -qc "select pgrun.set_queue('q')" -c "select pgrun.set_queue('empty')" >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"; psql "$server" -qc "drop database if exists $db with (force)"' EXIT
for n in 1 50 500; do
  cat >"$work/c$n.sql" <<EOF
select array_agg(id) ids, array_agg(attempt) atts from pgrun.claim_jobs('q', 'w', $n) \gset
select count(*) from pgrun.complete_jobs(':ids'::bigint[], ':atts'::int[], null, 'w');
EOF
done
cat >"$work/empty.sql" <<'EOF'
select 1;
select count(*) from pgrun.claim_jobs('empty', 'w', 1);
EOF

fill() { # jobs
  psql "$url" -qAtc "select count(*) from pgrun.enqueue_columns(array_fill('noop'::text, array[$1]),
    queues => array_fill('q'::text, array[$1]))" >/dev/null
  psql "$url" -qc "vacuum analyze pgrun.jobs"
}
run() { # script rounds
  pgbench -n -r -f "$work/$1.sql" -t "$2" "$url" 2>&1 |
    awk -v s="$1" '/^tps/ {tps=$3} /claim_jobs|complete_jobs|select 1;/ {lat = lat sprintf("  %s ms %s", $1, ($0 ~ /claim_jobs/ ? "claim" : ($0 ~ /complete/ ? "complete" : "select 1")))} END {printf "%-6s rounds/s %7.1f%s\n", s, tps, lat}'
}
fill $((rounds * 51 + 60 * 500 + 1000))
run c1 "$rounds"
run c50 "$rounds"
run c500 60
run empty "$rounds"
