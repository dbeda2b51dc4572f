#!/usr/bin/env bash
# flow-cpu-bench.sh: the database's processor time per job of a burn-down (claims of
# 100 and their complete_jobs, one client, no runner) in a queue with each flow
# control per key against the same queue with none, read from the server process's
# own scheduler clock (/proc/self/schedstat), so that the figure holds on a busy
# machine where a burn-down's wall time does not. Each case fills its queue with
# 100,000 no-op jobs over 1,000 keys (and tenants; fair_key_10: 10 keys), priorities
# 0-2, as BenchmarkFairnessBurnDown does, and burns ROUNDS claims of 100 of it; the
# plain queue's claims resume after the last job they took, as a runner's do
# (claim_jobs' after_*). Cases run in turn, REPEAT times; it prints each case's
# microseconds a job and its ratio to the plain queue (none / case: the share of the
# plain rate a server-bound burn-down keeps). VACUUM=1 vacuums pgrun.jobs after every
# 50 rounds, as autovacuum would on a server that has it (this one may not: the
# claims then step over the dead entries of everything claimed so far).
#
#   scripts/flow-cpu-bench.sh              # 300 rounds (30,000 jobs) a case, 3 times
#   ROUNDS=500 REPEAT=5 VACUUM=1 scripts/flow-cpu-bench.sh
#   CASES="plain key_rate" scripts/flow-cpu-bench.sh   # some cases only (plain first)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
server=$(scripts/ensure-postgres.sh </dev/null | tail -n 1)
db=pgrun_flow_bench
url=${server%%\?*}
url="${url%/*}/$db?sslmode=disable"
rounds=${ROUNDS:-300}
repeat=${REPEAT:-3}
chunk=$rounds
[ "${VACUUM:-0}" = 1 ] && chunk=50
export PGOPTIONS='-c client_min_messages=warning'
psql "$server" -qc "drop database if exists $db with (force)" -c "create database $db"
trap 'psql "$server" -qc "drop database if exists $db with (force)"' EXIT
go run ./cmd/runner migrate up --database-url "$url" >/dev/null

# burn(queue, rounds): burns rounds claims of 100 and returns the server's processor
# time (ns) they and their completions took, and the jobs they claimed.
psql "$url" -q <<'SQL'
create function public.cpu_ns() returns bigint language sql
as $f$ select split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint $f$;
create procedure public.burn(q text, rounds int, inout spent bigint default 0, inout got bigint default 0)
language plpgsql as $$
declare
  t0 bigint;
  ids bigint[]; atts int[]; cls uuid[];
  ap smallint; ar timestamptz; ai bigint;
  resume boolean := q = 'plain';
begin
  for i in 1..rounds loop
    t0 := public.cpu_ns();
    select array_agg(j.id order by j.priority, j.run_at, j.id), array_agg(j.attempt order by j.priority, j.run_at, j.id),
           array_agg(j.claim_id order by j.priority, j.run_at, j.id),
           (array_agg(j.priority order by j.priority desc, j.run_at desc, j.id desc))[1],
           (array_agg(j.run_at order by j.priority desc, j.run_at desc, j.id desc))[1],
           (array_agg(j.id order by j.priority desc, j.run_at desc, j.id desc))[1]
    into ids, atts, cls, ap, ar, ai
    from pgrun.claim_jobs(q, 'w', 100, after_priority => case when resume then ap end,
                          after_run_at => case when resume then ar end, after_id => case when resume then ai end) j;
    commit;
    exit when ids is null;
    perform pgrun.complete_jobs(ids, atts, null, 'w', cls);
    commit;
    spent := spent + public.cpu_ns() - t0;
    got := got + cardinality(ids);
  end loop;
end $$;
SQL

cases=${CASES:-"plain fair_key fair_tenant fair_key_10 key_rate aging"}
settings() {
  case $1 in
    plain) echo "" ;;
    fair_key|fair_key_10) echo ", fair_by => 'concurrency_key'" ;;
    fair_tenant) echo ", fair_by => 'tenant'" ;;
    key_rate) echo ", key_rate_limit => 1000000, key_rate_period => '1 second'" ;;
    aging) echo ", priority_aging => '1 minute'" ;;
  esac
}
declare -A results
for r in $(seq "$repeat"); do
  for c in $cases; do
    keys=1000
    [ "$c" = fair_key_10 ] && keys=10
    psql "$url" -qc "delete from pgrun.jobs where queue = '$c'" \
      -c "select pgrun.set_queue('$c'$(settings "$c"))" \
      -c "insert into pgrun.jobs (kind, queue, concurrency_key, tenant, priority)
          select 'noop', '$c', 'k' || (i % $keys), 't' || (i % $keys), i % 3 from generate_series(1, 100000) i" \
      -c "vacuum analyze pgrun.jobs" >/dev/null
    spent=0 got=0 done=0
    while [ "$done" -lt "$rounds" ]; do
      IFS='|' read -r s g < <(psql "$url" -qAtc "call public.burn('$c', $chunk)")
      spent=$((spent + s)) got=$((got + g)) done=$((done + chunk))
      [ "$chunk" -lt "$rounds" ] && psql "$url" -qc "vacuum pgrun.jobs"
    done
    us=$(awk -v s="$spent" -v g="$got" 'BEGIN {printf "%.1f", s / 1000 / (g > 0 ? g : 1)}')
    results[$c]="${results[$c]:-} $us"
    echo "round $r $c: $us us/job" >&2
  done
done
for c in $cases; do
  med=$(tr ' ' '\n' <<<"${results[$c]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  results[$c.med]=$med
done
for c in $cases; do
  printf '%-12s %6s us/job (runs:%s)  ratio %s\n' "$c" "${results[$c.med]}" "${results[$c]}" \
    "$(awk -v a="${results[plain.med]}" -v b="${results[$c.med]}" 'BEGIN {printf "%.2f", a / b}')"
done
