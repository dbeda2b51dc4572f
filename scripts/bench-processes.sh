#!/usr/bin/env bash
# bench-processes.sh: burn-downs by separate `runner work` processes sharing one
# queue, each with its own Go runtime, pool, listener and maintenance, as a fleet runs.
# `runner bench --runners N` does the same inside one process; this is the real thing.
#
#   scripts/bench-processes.sh                     # 200,000 jobs: 1, 4, 1, 4 processes
#   JOBS=1000000 scripts/bench-processes.sh 1 4
#   POOL=2 scripts/bench-processes.sh 1 4          # pool_max_conns of each process
#   RUNNER_BIN=/tmp/old/runner scripts/bench-processes.sh 1 4   # another build's runner
#   STATS=1 scripts/bench-processes.sh 1 4         # and where the claims' reads went
#
# For each count it (re)creates the database pgrun_procs_bench, enqueues JOBS no-op
# jobs, vacuums, takes a checkpoint, starts the processes (WORKERS slots each, pgx's
# default pool unless POOL is set) and waits until no job is queued or running. The
# rate is read from the jobs themselves: JOBS over the span from the first start to
# the last finish (started_at, finished_at: the database's clock), so the processes'
# start-up is not counted. With STATS=1 it also prints, after each count, the entries
# the claim index returned and the live rows fetched through it (pg_stat_user_indexes)
# and the calls and time of claim_jobs and complete_jobs (pg_stat_user_functions, with
# track_functions = pl on the bench's database), counted from after the vacuum.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${JOBS:-200000}
workers=${WORKERS:-500}
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 4 1 4)
for n in "${counts[@]}"; do
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || { echo "bench-processes: a count of processes is 1 to 64, got '$n'" >&2; exit 2; }
done
[[ $jobs =~ ^[0-9]+$ ]] && [ "$jobs" -ge 1 ] || { echo "bench-processes: JOBS must be a positive number, got '$jobs'" >&2; exit 2; }

server=$(scripts/ensure-postgres.sh </dev/null | tail -n 1)
db=pgrun_procs_bench
url=${server%%\?*}
url="${url%/*}/$db?sslmode=disable"
runner_url=$url # psql refuses pgx's pool_max_conns
[ -z "${POOL:-}" ] || runner_url="$url&pool_max_conns=$POOL"
queue=bench.procs
export PGOPTIONS='-c client_min_messages=warning'

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
  psql "$server" -qc "drop database if exists $db with (force)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
if [ -n "${RUNNER_BIN:-}" ]; then
  cp "$RUNNER_BIN" "$work/runner" # another build, for an A/B comparison
else
  go build -o "$work/runner" ./cmd/runner
fi

for n in "${counts[@]}"; do
  psql "$server" -qc "drop database if exists $db with (force)" -c "create database $db"
  "$work/runner" migrate up --database-url "$url" >/dev/null
  psql "$url" -qAt -c "select pgrun.set_queue('$queue')" >/dev/null
  for ((done = 0; done < jobs; done += 100000)); do
    k=$((jobs - done < 100000 ? jobs - done : 100000))
    psql "$url" -qAtc "select count(*) from pgrun.enqueue_columns(array_fill('noop'::text, array[$k]),
      queues => array_fill('$queue'::text, array[$k]))" >/dev/null
  done
  psql "$url" -qc "vacuum analyze pgrun.jobs" -c "checkpoint"
  if [ -n "${STATS:-}" ]; then
    psql "$url" -qAt -c "alter database $db set track_functions = 'pl'" -c "select pg_stat_reset()" >/dev/null
  fi

  pids=()
  for ((i = 0; i < n; i++)); do
    "$work/runner" work --database-url "$runner_url" --queues "$queue=$workers" --examples \
      --log-level warn --job-log=false --telemetry-interval 0 2>>"$work/runners.log" &
    pids+=($!)
  done
  # Until every job finished (a job that failed is reported below, not waited for
  # for ever). First until the last job enqueued has finished (a look
  # by primary key, twice a second), then until none is left unfinished (a count that
  # reads the table once a second, seldom more than once or twice). The looks stay off
  # the claim index: one from the queue's start steps over the dead entries of every job
  # claimed since the vacuum (a million, late in a million-job run), which cost the
  # server tens of milliseconds a second and, with STATS=1, put as many entries into
  # the claim index's counts as the runners' own claims read. The rate comes from the
  # jobs' own timestamps, not from when this loop notices the end.
  last=$(psql "$url" -qAtc "select max(id) from pgrun.jobs where queue = '$queue'")
  wait_for() { # $1: a query that answers t when done; $2: seconds between looks
    while [ "$(psql "$url" -qAtc "$1")" != t ]; do
      for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || { echo "bench-processes: a runner exited early:" >&2; cat "$work/runners.log" >&2; exit 1; }
      done
      sleep "$2"
    done
  }
  wait_for "select finished_at is not null from pgrun.jobs where id = $last" 0.5
  wait_for "select count(*) = 0 from pgrun.jobs where queue = '$queue' and finished_at is null" 1
  # The runners' own CPU (user and system, in clock ticks) before they stop.
  ticks=0
  for p in "${pids[@]}"; do
    read -r ut st < <(awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null || echo 0 0)
    ticks=$((ticks + ut + st))
  done
  for p in "${pids[@]}"; do kill -TERM "$p"; done
  wait "${pids[@]}" || true
  pids=()
  psql "$url" -qAt -F ' ' -c "select count(*), round(count(*) / extract(epoch from max(finished_at) - min(started_at))),
      count(distinct claimed_by)
    from pgrun.jobs where queue = '$queue' and status = 'succeeded'" |
    while read -r done rate by; do
      [ "$done" = "$jobs" ] || { echo "bench-processes: $done of $jobs jobs succeeded" >&2; exit 1; }
      if [ -n "${STATS:-}" ]; then
        # The processes' statistics reach the shared counters as their sessions end.
        psql "$url" -qAt -F ' ' -c "select 'claim index: ' || idx_tup_read || ' entries read, ' || idx_tup_fetch
            || ' live rows fetched' from pg_stat_user_indexes where indexrelname = 'jobs_claim_idx'" \
          -c "select funcname || ': ' || calls || ' calls, ' || round((total_time / 1000)::numeric, 1) || ' s in all, '
            || round((self_time / 1000)::numeric, 1) || ' s in itself' from pg_stat_user_functions
            where schemaname = 'pgrun' and funcname in ('claim_jobs', 'complete_jobs') order by funcname"
      fi
      echo "processes $n: $rate jobs/s ($jobs jobs, $workers slots each${POOL:+, pool $POOL}; $by runners ran jobs;" \
        "runners' CPU $((ticks * 1000000 / $(getconf CLK_TCK) / jobs)) µs per job)"
    done
done
