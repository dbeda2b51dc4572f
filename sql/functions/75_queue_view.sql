-- 75_queue_view.sql: what one queue's page of the dashboard (ui/page_queue.go) and
-- `runner queue show` read of its flow control beyond queue_stats' numbers: the keys
-- using their per-key limits now, and the sequences that hold jobs. Each reads a bounded
-- number of index entries whatever the backlog (a million queued jobs, 10,000
-- sequences), so that a page refreshed every second costs the same on a busy queue as
-- on an idle one; what they leave out, they say (a count that stops at its cap, and a
-- row more than asked for).

-- queue_view_held_cap is how many held jobs queue_sequences counts per sequence, and
-- how many queued jobs queue_keys counts per key: the page needs "over a thousand",
-- not the exact backlog of each.
create or replace function pgrun.queue_view_held_cap()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 1000 $$;

-- check_queue_view_rows raises 22023 unless max_rows is 1 to 1000 (the rows a call of
-- queue_keys or queue_sequences returns).
create or replace function pgrun.check_queue_view_rows(max_rows integer)
returns void
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if max_rows is null or max_rows < 1 or max_rows > 1000 then
    raise exception 'max_rows % is not valid', coalesce(max_rows::text, 'NULL')
      using errcode = '22023', hint = 'List 1 to 1000 rows per call.';
  end if;
end;
$$;

-- queue_keys lists the concurrency keys of queue that use its per-key limits now (a
-- job of the queue running with the key, or the key's rate window open), at most
-- max_rows (1 to 1000) of them: those that may start nothing more first (room 0), then
-- the busiest. Each row: the key; its running jobs (in any queue, as the claim counts
-- them for concurrency_limit, key_limits) and the queue's concurrency_limit; the claims
-- in its current rate window, the queue's key_rate_limit and when the window ends;
-- room, how many more of its jobs may start now (key_limits); its queued jobs in
-- the queue, counted up to queue_view_held_cap() (queued_more past it); and keys_in_use,
-- how many keys use the limits now (the same on every row; counted up to
-- stats_exact_limit() from each source, as queue_stats' keys_running and key_windows
-- are). No rows for a queue without per-key limits, or an unknown one. The keys are
-- every tenant's: in the tenant mode only an administrator may list them (42501
-- otherwise). Runs as the engine (it reads the rate windows). Reads at most
-- stats_exact_limit() running jobs and open windows, by index, and the queued jobs of
-- the keys it returns.
create or replace function pgrun.queue_keys(queue text, max_rows integer default 20)
returns table (key text, running bigint, concurrency_limit integer, window_count integer, key_rate_limit integer,
               window_ends timestamptz, room integer, queued bigint, queued_more boolean, keys_in_use bigint)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  cap      constant integer := pgrun.stats_exact_limit();
  held_cap constant integer := pgrun.queue_view_held_cap();
  v_now    timestamptz := pgrun.clock();
  v_period interval;
  q        pgrun.queues;
begin
  perform pgrun.check_queue_name(queue);
  perform pgrun.check_queue_view_rows(max_rows);
  if pgrun.tenant_mode() and not pgrun.sees_all() then
    raise exception 'the keys of queue % are every tenant''s', quote_literal(queue)
      using errcode = '42501', hint = 'List them as a member of pgrun_admin.';
  end if;
  select * into q from pgrun.queues x where x.name = queue_keys.queue;
  if not found or (q.concurrency_limit is null and q.key_rate_limit is null) then
    return;
  end if;
  v_period := pgrun.rate_period(q.key_rate_period);
  return query
  with keys as (
    -- As queue_counts finds them: the keys of the queue's running jobs, and those
    -- with a window open now (by key_rate_windows_start_idx: the windows that ended
    -- are not read).
    select r.concurrency_key as k
    from (select j.concurrency_key from pgrun.jobs j
          where q.concurrency_limit is not null and j.status = 'running' and j.concurrency_key is not null
            and j.queue = q.name
          limit cap) r
    union
    select w.key
    from (select w.key from pgrun.key_rate_windows w
          where q.key_rate_limit is not null and w.queue = q.name and w.window_start > v_now - v_period
            and w.window_start > '-infinity' -- key_rate_windows_start_idx's predicate (0029)
          limit cap) w
  ),
  use as (
    select k.k, coalesce(r.n, 0) as running, w.count as window_count,
           w.window_start + v_period as window_ends, count(*) over () as keys_in_use, m.room
    from keys k
    -- The room as the claim decides it (and queue_counts' keys_at_limit counts it).
    left join pgrun.key_limits(q, array(select x.k from keys x), v_now) m on m.key = k.k
    left join (select j.concurrency_key, count(*) as n from pgrun.jobs j
               where q.concurrency_limit is not null and j.status = 'running'
                 and j.concurrency_key = any (array(select x.k from keys x))
               group by j.concurrency_key) r on r.concurrency_key = k.k
    left join pgrun.key_rate_windows w
      on q.key_rate_limit is not null and w.queue = q.name and w.key = k.k and w.window_start > v_now - v_period
  ),
  ranked as (
    select u.* from use u
    order by u.room, u.running desc, u.window_count desc nulls last, u.k
    limit max_rows
  )
  select r.k, r.running, q.concurrency_limit, r.window_count, q.key_rate_limit,
         case when r.window_count is not null then r.window_ends end,
         r.room, least(c.n, held_cap)::bigint, c.n > held_cap, r.keys_in_use
  from ranked r
  -- By jobs_fair_key_idx, at most held_cap + 1 entries a key (the key's slot bounded
  -- as a range and the key checked on the row, as a lookup of one key's jobs is
  -- written: docs/architecture.md, 38_claim_keys.sql; with an equality, in a queue
  -- whose statistics saw one big key, a sequential scan a key).
  cross join lateral (select count(*) as n
                      from (select 1 from pgrun.jobs x
                            where hashtextextended(x.queue, 0) = hashtextextended(q.name, 0)
                              and hashtextextended(x.concurrency_key, 0) >= hashtextextended(r.k, 0)
                              and hashtextextended(x.concurrency_key, 0) <= hashtextextended(r.k, 0)
                              and x.status = 'queued' and x.queue = q.name and x.concurrency_key = r.k
                            limit held_cap + 1) x) c
  order by r.room, r.running desc, r.window_count desc nulls last, r.k;
end;
$$;

-- queue_sequences lists the sequences of queue that hold jobs, at most max_rows (1 to
-- 1000) of them: those stopped by a job that failed for good first, then the others,
-- each part in key order. Ask for one row more than you show to learn whether there are
-- more. Each row: the sequence's key and tenant; its head (or the failed job that holds
-- it) and that job's status; the jobs it holds, counted up to queue_view_held_cap()
-- (held_more past it), and the first of them; why that one waits
-- (sequence_hold_reason); and stopped, whether a failure holds it. In the tenant mode,
-- the caller's tenant's only (as sequences). Unlike sequences, which groups every held
-- job of the queue to put the longest sequences first, it walks the keys of
-- jobs_sequence_held_idx one probe each (a skip scan) and stops after what it returns,
-- looking at most at stats_exact_limit() keys and as many holds: its cost is the
-- rows asked for, not the backlog, where sequences reads every held job of the queue
-- (docs/ui.md, "Speed"). Runs as the engine.
create or replace function pgrun.queue_sequences(queue text, max_rows integer default 20)
returns table (sequence_key text, tenant text, head_id bigint, head_status text, held bigint, held_more boolean,
               first_held bigint, reason text, stopped boolean)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  scan     constant integer := pgrun.stats_exact_limit();
  held_cap constant integer := pgrun.queue_view_held_cap();
  v_all    boolean := not pgrun.tenant_mode() or pgrun.sees_all();
  v_tenant text := pgrun.caller_tenant();
  q        text := pgrun.check_queue_name(queue_sequences.queue);
begin
  perform pgrun.check_queue_view_rows(max_rows);
  return query
  with recursive stopped as (
    -- The sequences a failure holds (sequence_holds_key_idx, in key order), those
    -- that hold a job still; a hold whose job was retried or cancelled is not one.
    select d.sequence_key as k, d.tenant as t
    from (select d.sequence_key, d.tenant, d.job_id from pgrun.sequence_holds d
          where d.queue = q order by d.sequence_key, d.tenant limit scan) d
    join pgrun.jobs f on f.id = d.job_id and f.status = 'failed'
    where (v_all or d.tenant = v_tenant)
      and exists (select 1 from pgrun.jobs x
                  where x.queue = q and x.sequence_key = d.sequence_key and x.status = 'pending'
                    and x.tenant is not distinct from d.tenant)
    order by d.sequence_key, d.tenant
    limit max_rows
  ),
  -- The keys with held jobs, one index probe each, at most scan of them.
  keys(k, n) as (
    select (select x.sequence_key from pgrun.jobs x
            where x.queue = q and x.sequence_key is not null and x.status = 'pending'
            order by x.sequence_key limit 1), 1
    union all
    select (select x.sequence_key from pgrun.jobs x
            where x.queue = q and x.sequence_key > s.k and x.status = 'pending'
            order by x.sequence_key limit 1), s.n + 1
    from keys s
    where s.k is not null and s.n < scan
  ),
  picked as (
    select s.k, s.t, true as stopped from stopped s
    union all
    (select h.k, h.t, false
     from keys s
     cross join lateral (select distinct x.tenant as t, s.k
                         from (select x.tenant from pgrun.jobs x
                               where x.queue = q and x.sequence_key >= s.k
                                 and x.sequence_key <= s.k and x.status = 'pending'
                                 and (v_all or x.tenant = v_tenant)
                               order by x.queue, x.sequence_key, x.id limit held_cap + 1) x) h
     where s.k is not null
       and not exists (select 1 from stopped z where z.k = h.k and z.t is not distinct from h.t)
     limit max_rows)
  ),
  shown as (
    select p.* from picked p order by p.stopped desc, p.k, p.t limit max_rows
  )
  select s.k, s.t, b.id, b.status::text, least(c.n, held_cap)::bigint, c.n > held_cap, c.first,
         pgrun.sequence_hold_reason(f), s.stopped
  from shown s
  -- By jobs_sequence_held_idx: at most held_cap + 1 held jobs a sequence (bounded and
  -- ordered as sequences_promote, 36_sequences.sql, reads them, which says why).
  cross join lateral (select count(*) as n, min(x.id) as first
                      from (select x.id from pgrun.jobs x
                            where x.queue = q and x.sequence_key >= s.k
                              and x.sequence_key <= s.k and x.status = 'pending'
                              and x.tenant is not distinct from s.t
                            order by x.queue, x.sequence_key, x.id limit held_cap + 1) x) c
  join pgrun.jobs f on f.id = c.first
  left join lateral pgrun.sequence_blocker(q, s.k, s.t) b on true
  order by s.stopped desc, s.k, s.t;
end;
$$;
