-- 70_stats.sql: queue_stats' numbers, in time that does not grow with the backlog.
--
-- Counting every queued row of a queue holding a million costs a second; an operator's
-- dashboard asks every few seconds. So each number is counted exactly up to
-- stats_exact_limit() rows and estimated beyond it, and the row says which:
--   * queued, scheduled, running, pending, waiting and unhandled over the limit come
--     from one TABLESAMPLE SYSTEM pass over about 20,000 rows of pgrun.jobs (pages
--     picked at random), scaled up. Pages hold rows inserted together, so the error
--     is larger than a row sample's: expect some ±10% on a count of 100,000 and better
--     as counts grow; a count under the limit is never estimated. The pages are the
--     same at each call (REPEATABLE), so that they stay in shared buffers rather than
--     some 850 others being read in at each refresh of a dashboard (beside 5 million
--     jobs the sample took 5 ms instead of 10, docs/benchmarks-log.md, 2026-11-27),
--     and the same rows give the same estimate.
--   * oldest_queued_age is exact: the oldest due job is found per priority level
--     (a loose index scan over the claim index), not by reading the backlog.
--   * the finished counts (the last minute's here, any span's in finished_counts) go
--     by the finished index in time order; past the limit they are extrapolated from
--     the part of the span the first rows cover.
-- Time is the engine's clock (pgrun.clock()), as for every rule that reads it.

-- stats_exact_limit is how many rows queue_counts counts exactly per number.
create or replace function pgrun.stats_exact_limit()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 10000 $$;

-- kind_handled is the one rule behind queue_stats.unhandled: a live worker serving
-- queue q has a handler for kind (or serves any kind) as of at.
create or replace function pgrun.kind_handled(q text, kind text, at timestamptz)
returns boolean
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select exists (select 1 from pgrun.workers w
                 where pgrun.worker_alive(w, at) and q = any (w.queues)
                   and (w.kinds is null or kind = any (w.kinds)))
$$;

-- finished_counts counts, per queue, the jobs that ended (succeeded, failed, cancelled)
-- within span before the engine's clock: queue_stats' last minute, and `runner status`
-- and `runner top`'s last 10 seconds. It reads at most 4 * stats_exact_limit() rows of
-- the finished index, oldest first; past that the counts are scaled by span over the
-- part of it those rows cover, and estimated is true on every row. A queue with no
-- ending in the span has no row. Like queue_counts it runs as the engine (numbers of
-- every tenant's jobs, never a payload). A span that is NULL or not positive raises
-- 22023.
create or replace function pgrun.finished_counts(span interval)
returns table (queue text, succeeded bigint, failed bigint, cancelled bigint, estimated boolean)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  cap     constant integer := 4 * pgrun.stats_exact_limit();
  v_since timestamptz;
begin
  if span is null or span <= interval '0' then
    raise exception 'span % is not valid', coalesce(span::text, 'NULL')
      using errcode = '22023', hint = 'Pass a positive interval such as ''10 seconds'' or ''1 minute''.';
  end if;
  v_since := pgrun.clock() - span;
  return query
  with recent as (
    select j.queue, j.status, j.finished_at from pgrun.jobs j
    where j.finished_at > v_since
    order by j.finished_at
    limit cap + 1
  ),
  scale as (
    select case when count(*) > cap and max(r.finished_at) > v_since
                then extract(epoch from span) / greatest(extract(epoch from max(r.finished_at) - v_since), 0.001)
                else 1 end::float8 as f
    from recent r
  )
  select r.queue,
         round(count(*) filter (where r.status = 'succeeded') * s.f)::bigint,
         round(count(*) filter (where r.status = 'failed') * s.f)::bigint,
         round(count(*) filter (where r.status = 'cancelled') * s.f)::bigint,
         s.f <> 1
  from recent r, scale s
  group by r.queue, s.f;
end;
$$;

-- queue_counts' result grew in version 8 (flow control per key). A function's result
-- type cannot change in place, so an older queue_counts goes first, with the view that
-- reads it (80_views.sql makes the view again).
do $$
begin
  if exists (select 1 from pg_proc p where p.oid = to_regprocedure('pgrun.queue_counts()')
             and pg_get_function_result(p.oid) not like '%keys_at_limit%') then
    drop view if exists pgrun.queue_stats;
    drop function pgrun.queue_counts();
  end if;
end;
$$;

-- queue_counts returns one row per queue for the queue_stats view (see above);
-- estimated is true if any number of the row is an estimate. It runs as the engine:
-- the counts are of every tenant's jobs, and carry no payload. Beside the counts, flow
-- control per key (38_claim_keys.sql), each counted exactly up to stats_exact_limit():
--   held            pending jobs held by their sequence (36_sequences.sql: each has a
--                   sequence_hold_reason)
--   fair_by         the queue's fairness key (NULL: one global order)
--   concurrency_limit, keys_running   the per-key limit, and the concurrency keys with
--                   jobs of the queue running now
--   key_rate_limit, key_rate_period, key_windows   the per-key rate, and the keys with a
--                   rate window open now
--   keys_at_limit   keys that may start nothing more now: at their concurrency limit or
--                   with their rate window full (key_limits)
--   priority_aging  the queue's aging (NULL: none)
create or replace function pgrun.queue_counts()
returns table (queue text, paused boolean, queued bigint, scheduled bigint, running bigint,
               pending bigint, waiting bigint, oldest_queued_age interval, succeeded_1m bigint,
               failed_1m bigint, cancelled_1m bigint, unhandled bigint, estimated boolean,
               held bigint, fair_by text, concurrency_limit integer, keys_running bigint,
               key_rate_limit integer, key_rate_period interval, key_windows bigint, keys_at_limit bigint,
               priority_aging interval)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_sample jsonb;            -- {queue: {queued, due, running, ...}} of the sample, once taken
  v_finished jsonb;          -- {queue: {succeeded, failed, cancelled}} of the last minute
  v_fin_est boolean;         -- whether those are estimates (finished_counts)
  cap      constant integer := pgrun.stats_exact_limit();
  v_now    timestamptz := pgrun.clock();
  q        pgrun.queues;
  v_all    bigint;
  v_due    bigint;
  v_run    bigint;
  v_pend   bigint;
  v_wait   bigint;
  v_unh    bigint;
  v_est    boolean;
  v_scale  double precision;   -- rows of pgrun.jobs per sampled row
  v_s      jsonb;              -- this queue's part of v_sample
  -- Running jobs by queue from one pass (see below), or NULL past run_cap of them.
  run_cap  constant integer := 10 * pgrun.stats_exact_limit();
  v_runs   jsonb;
  v_nrun   bigint;
begin
  -- The last minute's endings, all queues at once (finished_counts, bounded).
  select coalesce(jsonb_object_agg(f.queue, jsonb_build_object('succeeded', f.succeeded, 'failed', f.failed,
                                                                'cancelled', f.cancelled)), '{}'),
         coalesce(bool_or(f.estimated), false)
  into v_finished, v_fin_est
  from pgrun.finished_counts(interval '1 minute') f;

  -- Running jobs, all queues in one pass of the running index while they number at
  -- most run_cap. The running index is not by queue, so a count of one queue walks
  -- the running jobs of every queue: counted queue by queue, 22 queues beside 40,000
  -- running jobs took 320-400 ms. Past run_cap, queue by queue as before (each count
  -- stops one past the limit, so a busy queue costs at most that).
  select coalesce(jsonb_object_agg(r.queue, r.n), '{}'), coalesce(sum(r.n), 0) into v_runs, v_nrun
  from (select x.queue, count(*) as n
        from (select j.queue from pgrun.jobs j where j.status = 'running'
              order by least(j.lease_expires_at, j.deadline_at) limit run_cap + 1) x
        group by x.queue) r;
  if v_nrun > run_cap then
    v_runs := null;
  end if;

  for q in select * from pgrun.queues x order by x.name loop
    v_est := v_fin_est;
    -- Exact while small: each scan stops one row past the limit.
    select count(*), count(*) filter (where x.run_at <= v_now)
    into v_all, v_due
    -- (In the claim index's order, so that the scan is that index's and never the
    -- table's, whatever the statistics say about how many rows are queued.)
    from (select j.run_at from pgrun.jobs j
          where j.queue = q.name and j.status = 'queued'
          order by j.priority, j.run_at, j.id limit cap + 1) x;
    if v_runs is not null then
      v_run := least(coalesce((v_runs ->> q.name)::bigint, 0), cap + 1);
    else
      select count(*) into v_run
      from (select 1 from pgrun.jobs j where j.status = 'running' and j.queue = q.name
            order by least(j.lease_expires_at, j.deadline_at) limit cap + 1) x;
    end if;
    select count(*) filter (where x.status = 'pending'), count(*) filter (where x.status = 'waiting')
    into v_pend, v_wait
    from (select j.status from pgrun.jobs j
          where j.queue = q.name and j.status in ('pending', 'waiting') limit cap + 1) x;
    -- Unhandled: due jobs of kinds no live worker serving the queue handles.
    if v_all <= cap then
      select sum(k.n)::bigint into v_unh
      from (select j.kind, count(*) as n from pgrun.jobs j
            where j.queue = q.name and j.status = 'queued' and j.run_at <= v_now
            group by j.kind) k
      where not pgrun.kind_handled(q.name, k.kind, v_now);
    end if;

    if v_all > cap or v_run > cap or v_pend + v_wait > cap then
      v_est := true;
      if v_scale is null then
        -- One sample for all queues, taken the first time a queue needs it.
        select greatest(c.reltuples, 1) / 20000.0 into v_scale from pg_class c where c.oid = 'pgrun.jobs'::regclass;
        v_scale := greatest(v_scale, 1);
        -- The percentage is computed here, never a caller's value; TABLESAMPLE takes
        -- an expression, so no SQL is built.
        select coalesce(jsonb_object_agg(g.queue, to_jsonb(g) - 'queue'), '{}')
        into v_sample
        from (select x.queue,
                     round(coalesce(sum(x.n) filter (where x.status = 'queued'), 0) * v_scale) as queued,
                     round(coalesce(sum(x.n) filter (where x.status = 'queued' and x.due), 0) * v_scale) as due,
                     round(coalesce(sum(x.n) filter (where x.status = 'running'), 0) * v_scale) as running,
                     round(coalesce(sum(x.n) filter (where x.status = 'pending'), 0) * v_scale) as pending,
                     round(coalesce(sum(x.n) filter (where x.status = 'waiting'), 0) * v_scale) as waiting,
                     round(coalesce(sum(x.n) filter (where x.status = 'queued' and x.due
                                                       and not pgrun.kind_handled(x.queue, x.kind, v_now)), 0)
                           * v_scale) as unhandled
              from (select j.queue, j.status, j.run_at <= v_now as due, j.kind, count(*) as n
                    from pgrun.jobs j tablesample system (least(100, 100 / v_scale)) repeatable (0)
                    where pgrun.is_active(j.status)
                    group by 1, 2, 3, 4) x
              group by x.queue) g;
      end if;
      v_s := coalesce(v_sample -> q.name, '{}');
      if v_all > cap then
        v_due := coalesce((v_s ->> 'due')::bigint, 0);
        v_all := greatest(coalesce((v_s ->> 'queued')::bigint, 0), cap + 1);
        v_unh := coalesce((v_s ->> 'unhandled')::bigint, 0);
      end if;
      if v_run > cap then
        v_run := greatest(coalesce((v_s ->> 'running')::bigint, 0), cap + 1);
      end if;
      if v_pend + v_wait > cap then
        v_pend := coalesce((v_s ->> 'pending')::bigint, 0);
        v_wait := coalesce((v_s ->> 'waiting')::bigint, 0);
      end if;
    end if;

    queue := q.name;
    paused := q.paused;
    queued := v_due;
    scheduled := greatest(v_all - v_due, 0);
    running := v_run;
    pending := v_pend;
    waiting := v_wait;
    unhandled := coalesce(v_unh, 0);
    -- The oldest due job: the head of each priority level's run_at order.
    with recursive levels(p) as (
      select min(j.priority) from pgrun.jobs j where j.queue = q.name and j.status = 'queued'
      union all
      select (select min(j.priority) from pgrun.jobs j
              where j.queue = q.name and j.status = 'queued' and j.priority > l.p)
      from levels l where l.p is not null
    )
    select v_now - min(h.run_at) into oldest_queued_age
    from levels l,
         lateral (select j.run_at from pgrun.jobs j
                  where j.queue = q.name and j.status = 'queued' and j.priority = l.p
                  order by j.run_at limit 1) h
    where l.p is not null and h.run_at <= v_now;
    succeeded_1m := coalesce((v_finished -> q.name ->> 'succeeded')::bigint, 0);
    failed_1m := coalesce((v_finished -> q.name ->> 'failed')::bigint, 0);
    cancelled_1m := coalesce((v_finished -> q.name ->> 'cancelled')::bigint, 0);
    -- Flow control per key. Every pending job of a sequence is held by it (its
    -- sequence_hold_reason is never NULL), so they are counted off the held index
    -- without asking each why: past the limit the count stops there, estimated.
    held := 0;
    if v_pend > 0 then
      select count(*) into held
      from (select 1 from pgrun.jobs j
            where j.queue = q.name and j.status = 'pending' and j.sequence_key is not null
            order by j.sequence_key, j.id limit cap + 1) x;
      v_est := v_est or held > cap;
    end if;
    estimated := v_est;
    fair_by := q.fair_by;
    concurrency_limit := q.concurrency_limit;
    key_rate_limit := q.key_rate_limit;
    key_rate_period := q.key_rate_period;
    priority_aging := q.priority_aging;
    keys_running := null;
    key_windows := null;
    keys_at_limit := null;
    if q.concurrency_limit is not null or q.key_rate_limit is not null then
      with keys as (
        select distinct r.concurrency_key as k
        from (select j.concurrency_key from pgrun.jobs j
              where j.status = 'running' and j.concurrency_key is not null and j.queue = q.name
                and q.concurrency_limit is not null
              limit cap + 1) r
        union
        select w.key from pgrun.key_rate_windows w
        where w.queue = q.name and w.window_start + pgrun.rate_period(q.key_rate_period) > v_now
      )
      select count(*) filter (where exists (select 1 from pgrun.jobs j
                                            where j.status = 'running' and j.concurrency_key = k.k
                                              and j.queue = q.name)),
             count(*) filter (where exists (select 1 from pgrun.key_rate_windows w
                                            where w.queue = q.name and w.key = k.k
                                              and w.window_start + pgrun.rate_period(q.key_rate_period) > v_now)),
             (select count(*) from pgrun.key_limits(q, array(select x.k from keys x), v_now) r where r.room = 0)
      into keys_running, key_windows, keys_at_limit
      from keys k;
      if q.concurrency_limit is null then
        keys_running := null;
      end if;
      if q.key_rate_limit is null then
        key_windows := null;
      end if;
    end if;
    return next;
  end loop;
end;
$$;

-- job_blocker says why job id, queued or pending, is not being claimed now: every
-- reason that holds, joined by '; ', or NULL when nothing holds it (it is claimable,
-- and waits only for the jobs ahead of it in its queue's order, or it is not queued
-- or pending at all). The reasons, each as the claim decides it:
--   held by its sequence (36_sequences.sql's sequence_hold_reason), or waiting for its
--   dependencies or parent (other pending jobs);
--   not due until its run_at;
--   the queue paused; no live worker serving the queue, none with a handler for its
--   kind, or every live worker's host set to drain or off for it (worker control); no
--   live worker that may serve its required model;
--   max_running reached (n/n); the queue's rate window full until it ends;
--   its concurrency key at its limit (n/n running); its key's rate window full until
--   it ends.
-- Time is the engine's clock. Raises P0002 for an unknown id (and, in the tenant mode,
-- for another tenant's job), as job_timeline does. Runs as the engine (it reads the
-- workers), saying nothing of other jobs but counts.
create or replace function pgrun.job_blocker(id bigint)
returns text
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  j       pgrun.jobs;
  q       pgrun.queues;
  v_now   timestamptz := pgrun.clock();
  v_why   text[] := '{}';
  v_n     bigint;
  v_seq   text;
  v_live  integer;
  v_kind  integer;
  v_open  integer;
  v_until timestamptz;
begin
  select * into j from pgrun.jobs x where x.id = job_blocker.id;
  if not found or not pgrun.may_touch(j.tenant) then
    perform pgrun.job_not_found(job_blocker.id);
  end if;
  if j.status = 'pending' then
    v_seq := pgrun.sequence_hold_reason(j);
    if v_seq is not null then
      return 'held by its sequence: ' || v_seq;
    end if;
    if j.deps_remaining > 0 then
      return format('pending: waits for %s workflow dependencies to finish', j.deps_remaining);
    end if;
    return 'pending: waits to be released by its workflow or parent';
  end if;
  if j.status <> 'queued' then
    return null;
  end if;
  select * into q from pgrun.queues x where x.name = j.queue;
  if j.run_at > v_now then
    v_why := v_why || format('not due until %s', j.run_at);
  end if;
  if q.paused then
    v_why := v_why || format('queue %s is paused (resume_queue)', j.queue);
  end if;
  -- Who could claim it: live running workers serving the queue, those with a handler
  -- for its kind, and those whose host an operator left on for the queue.
  select count(*),
         count(*) filter (where w.kinds is null or j.kind = any (w.kinds)),
         count(*) filter (where (w.kinds is null or j.kind = any (w.kinds))
                            and not exists (select 1 from pgrun.worker_control c
                                            where c.host = w.host and c.queue in (j.queue, '*') and c.mode <> 'on'))
  into v_live, v_kind, v_open
  from pgrun.workers w
  where pgrun.worker_alive(w, v_now) and w.state = 'running' and j.queue = any (w.queues);
  if v_live = 0 then
    v_why := v_why || format('no live worker serves queue %s', j.queue);
  elsif v_kind = 0 then
    v_why := v_why || format('no live worker serving queue %s handles kind %s', j.queue, j.kind);
  elsif v_open = 0 then
    v_why := v_why || format('every live worker serving queue %s is set to drain or off for it (worker control)', j.queue);
  end if;
  if j.model_required and v_live > 0
     and not exists (select 1 from pgrun.workers w
                     where pgrun.worker_alive(w, v_now) and w.state = 'running' and j.queue = any (w.queues)
                       and (j.model = any (coalesce(w.models, '{}')) or j.model = any (coalesce(w.servable, '{}')))) then
    v_why := v_why || format('no live worker serving queue %s may load model %s', j.queue, j.model);
  end if;
  if q.max_running is not null then
    select count(*) into v_n from pgrun.jobs r where r.status = 'running' and r.queue = j.queue;
    if v_n >= q.max_running then
      v_why := v_why || format('max_running reached (%s/%s)', v_n, q.max_running);
    end if;
  end if;
  if q.rate_limit is not null and q.rate_window_start + pgrun.rate_period(q.rate_period) > v_now
     and q.rate_window_count >= q.rate_limit then
    v_why := v_why || format('the queue''s rate window is full (%s/%s) until %s', q.rate_window_count, q.rate_limit,
                             q.rate_window_start + pgrun.rate_period(q.rate_period));
  end if;
  if j.concurrency_key is not null and q.concurrency_limit is not null then
    select count(*) into v_n from pgrun.jobs r where r.status = 'running' and r.concurrency_key = j.concurrency_key;
    if v_n >= q.concurrency_limit then
      v_why := v_why || format('concurrency key %s is at its limit (%s/%s running)', j.concurrency_key, v_n,
                               q.concurrency_limit);
    end if;
  end if;
  if j.concurrency_key is not null and q.key_rate_limit is not null then
    select w.count, w.window_start + pgrun.rate_period(q.key_rate_period) into v_n, v_until
    from pgrun.key_rate_windows w
    where w.queue = j.queue and w.key = j.concurrency_key
      and w.window_start + pgrun.rate_period(q.key_rate_period) > v_now;
    if v_n >= q.key_rate_limit then
      v_why := v_why || format('the rate window of key %s is full (%s/%s) until %s', j.concurrency_key, v_n,
                               q.key_rate_limit, v_until);
    end if;
  end if;
  if cardinality(v_why) = 0 then
    return null;
  end if;
  return array_to_string(v_why, '; ');
end;
$$;
