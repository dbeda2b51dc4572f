#!/usr/bin/env bash
# bench-server-cpu.sh: the server's processor time for enqueuing, claiming and
# completing no-op jobs in batches of a given size, read from the backend's own
# /proc/<pid>/stat (user + system ticks), so that the client, the network and other
# processes do not count. Needs the server on this machine.
#
#   scripts/bench-server-cpu.sh TEMPLATE [BATCH] [JOBS]
#
# TEMPLATE is a database migrated by the build under test (runner migrate up); each run
# clones it, so two builds compare by alternating their templates. BATCH (default 20)
# is the jobs per enqueue_batch and per claim_jobs/complete_jobs call, JOBS (default
# 10000) the jobs in all. Prints the milliseconds of processor time per 1,000 jobs for
# the enqueues and for the claims with their completions (one statement each pair).
set -euo pipefail
template=${1:?usage: scripts/bench-server-cpu.sh TEMPLATE [BATCH] [JOBS]}
batch=${2:-20}
jobs=${3:-10000}
host=${PGHOST:-127.0.0.1}
user=${PGUSER:-postgres}
db="cpu_${template}_$$"
calls=$(( (jobs + batch - 1) / batch ))
dir=$(mktemp -d)
trap 'rm -rf "$dir"; psql -h "$host" -U "$user" -qAtc "drop database if exists $db" >/dev/null 2>&1 || true' EXIT

for _ in $(seq "$calls"); do
  echo "select count(*) from pgrun.enqueue_batch(array_fill('noop'::text, array[$batch]));"
done >"$dir/enqueue.sql"
for _ in $(seq "$calls"); do
  echo "with c as materialized (select id, attempt from pgrun.claim_jobs('default', 'cpu', $batch))
        select count(*) from pgrun.complete_jobs((select array_agg(id) from c), (select array_agg(attempt) from c));"
done >"$dir/claim.sql"
# psql reads the backend's ticks through \! with the pid in the environment.
cat >"$dir/run.sql" <<SQL
select pg_backend_pid() as pid \gset
\setenv PID :pid
\o /dev/null
\! awk '{print "t0", \$14 + \$15}' /proc/\$PID/stat
\i $dir/enqueue.sql
\! awk '{print "t1", \$14 + \$15}' /proc/\$PID/stat
\i $dir/claim.sql
\! awk '{print "t2", \$14 + \$15}' /proc/\$PID/stat
\o
select count(*) filter (where status = 'succeeded'), count(*) from pgrun.jobs;
SQL

psql -h "$host" -U "$user" -qAtc "create database $db template $template" >/dev/null
psql -h "$host" -U "$user" -d "$db" -qAtc "vacuum analyze" >/dev/null
tick=$(getconf CLK_TCK)
psql -h "$host" -U "$user" -d "$db" -qAt -v ON_ERROR_STOP=1 -f "$dir/run.sql" |
  awk -v tick="$tick" -v n="$((calls * batch))" -v b="$batch" '
    /^t0/ {a = $2} /^t1/ {e = $2} /^t2/ {c = $2} /\|/ {split($0, r, "|")}
    END {
      if (r[1] != n) { printf "only %s of %d jobs succeeded\n", r[1], n; exit 1 }
      printf "batch %d, %d jobs: enqueue %.1f ms, claim+complete %.1f ms per 1,000 jobs of server time\n",
        b, n, (e - a) * 1000 / tick * 1000 / n, (c - e) * 1000 / tick * 1000 / n
    }'
