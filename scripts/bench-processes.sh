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
#   ENGINE=river scripts/bench-processes.sh 1 4    # River's processes (bench/cmd/riverwork)
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
#
# Each line also gives the host's busy processor time over the burn-down (from the
# start of the processes to their end, /proc/stat) per job: what the machine spent on a
# job, server included, a figure the machine's changing speed moves less than the rate.
#
# ENGINE=river runs the same burn-down with River instead (its own module, bench/):
# `riverwork -seed` inserts the jobs with InsertMany, then N `riverwork` processes work
# the default queue at the settings bench/ gives River (2,000 workers each unless
# WORKERS is set, River's `river bench` fetch settings), and the rate comes from
# River's own timestamps (attempted_at, finalized_at). So what extra processes cost
# on this machine can be told apart from what they cost pgrun.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs=${JOBS:-200000}
engine=${ENGINE:-pgrun}
[[ $engine == pgrun || $engine == river ]] || { echo "bench-processes: ENGINE is pgrun or river, got '$engine'" >&2; exit 2; }
workers=${WORKERS:-$([ "$engine" = river ] && echo 2000 || echo 500)}
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1 4 1 4)
for n in "${counts[@]}"; do
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || { echo "bench-processes: a count of processes is 1 to 64, got '$n'" >&2; exit 2; }
done
[[ $jobs =~ ^[0-9]+$ ]] && [ "$jobs" -ge 1 ] || { echo "bench-processes: JOBS must be a positive number, got '$jobs'" >&2; exit 2; }
[[ $workers =~ ^[0-9]+$ ]] && [ "$workers" -ge 1 ] || { echo "bench-processes: WORKERS must be a positive number, got '$workers'" >&2; exit 2; }

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
if [ "$engine" = river ]; then
  (cd bench && go build -o "$work/riverwork" ./cmd/riverwork)
elif [ -n "${RUNNER_BIN:-}" ]; then
  cp "$RUNNER_BIN" "$work/runner" # another build, for an A/B comparison
else
  go build -o "$work/runner" ./cmd/runner
fi

# busy_ticks prints the host's busy processor time so far, in clock ticks.
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
# wait_for polls until $1 answers t, every $2 seconds, and stops the bench if one of
# the processes exited.
wait_for() {
  while [ "$(psql "$url" -qAtc "$1")" != t ]; do
    for p in "${pids[@]}"; do
      kill -0 "$p" 2>/dev/null || { echo "bench-processes: a process exited early:" >&2; cat "$work/runners.log" >&2; exit 1; }
    done
    sleep "$2"
  done
}
# host_us prints the busy time since $1 (ticks) per job, in microseconds.
host_us() { echo $(( ($(busy_ticks) - $1) * 1000000 / $(getconf CLK_TCK) / jobs )); }

# river_round runs River's burn-down by $1 processes.
river_round() {
  "$work/riverwork" -database-url "$url" -seed "$jobs"
  psql "$url" -qc "vacuum analyze river_job" -c "checkpoint"
  local before
  before=$(busy_ticks)
  pids=()
  for ((i = 0; i < $1; i++)); do
    "$work/riverwork" -database-url "$url" -workers "$workers" 2>>"$work/runners.log" &
    pids+=($!)
  done
  local last
  last=$(psql "$url" -qAtc "select max(id) from river_job")
  wait_for "select finalized_at is not null from river_job where id = $last" 0.5
  wait_for "select count(*) = 0 from river_job where finalized_at is null" 1
  local host
  host=$(host_us "$before")
  for p in "${pids[@]}"; do kill -TERM "$p"; done
  wait "${pids[@]}" || true
  pids=()
  psql "$url" -qAt -F ' ' -c "select count(*), round(count(*) / extract(epoch from max(finalized_at) - min(attempted_at)))
    from river_job where state = 'completed'" |
    while read -r done rate; do
      [ "$done" = "$jobs" ] || { echo "bench-processes: $done of $jobs River jobs completed" >&2; exit 1; }
      echo "river processes $1: $rate jobs/s ($jobs jobs, $workers workers each; host CPU $host µs per job)"
    done
}

for n in "${counts[@]}"; do
  psql "$server" -qc "drop database if exists $db with (force)" -c "create database $db"
  if [ "$engine" = river ]; then
    river_round "$n"
    continue
  fi
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

  before=$(busy_ticks)
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
  wait_for "select finished_at is not null from pgrun.jobs where id = $last" 0.5
  wait_for "select count(*) = 0 from pgrun.jobs where queue = '$queue' and finished_at is null" 1
  host=$(host_us "$before")
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
        "runners' CPU $((ticks * 1000000 / $(getconf CLK_TCK) / jobs)) µs per job, host CPU $host µs per job)"
    done
done
