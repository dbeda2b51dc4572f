-- 74_rollups.sql: per-minute rollups of finished jobs (migration 0022), and what the
-- dashboard reads from them: job_series (throughput, failures, wait and run
-- percentiles over a span) and typical_run_times; error_groups (failures by group)
-- and the count behind error_minutes are in 05_errors.sql.
--
-- rollup_minutes, a maintain() step, counts each closed minute once, through the
-- finished index (the failures through their own index), into job_minutes and
-- error_minutes, and each closed quarter hour into job_quarters and error_quarters
-- (with the totals over every queue and kind, job_minute_totals and
-- job_quarter_totals, for the charts of everything);
-- the readers add the minutes not rolled up yet, counted live from pgrun.jobs (at
-- most live_row_cap() rows, newest first), so their answers reach the present. A job
-- is counted in the minute of its finished_at, once it has ended succeeded, failed or
-- cancelled (skipped jobs never ran and are not counted). An ending is in the rollups
-- only if it is still in pgrun.jobs when its minute is rolled up, rollup_settle()
-- after the minute closes: the succeeded jobs of an ephemeral queue (deleted as they
-- complete) and jobs pruned within that time are not; nor is an ending committed more
-- than rollup_settle() after its transaction began (finished_at is the transaction's
-- time, in a minute already rolled up).
--
-- Histograms (wait_hist, run_hist) are log-scale, merged exactly to a bucket: see
-- 74_histograms.sql.

-- count_minutes counts the jobs that ended (succeeded, failed, cancelled) in
-- [t0, t1) by minute, queue and kind, as job_minutes holds them: rollup_minutes'
-- count, and the readers' live one. With max_rows it reads at most that many jobs,
-- newest first, and the oldest minute it reaches is then not complete. Reads the
-- finished index. Granted to nobody.
create or replace function pgrun.count_minutes(t0 timestamptz, t1 timestamptz, max_rows integer default null)
returns table (minute timestamptz, queue text, kind text, succeeded integer, failed integer, cancelled integer,
               wait_hist integer[], run_hist integer[], complete boolean)
language sql
stable
set search_path = pgrun, pg_catalog
-- Planned without the range's size (SQL function parameters): grouping by sorting
-- 120,000 rows spilled to disk, at three times the time of a hash.
set enable_sort = off
as $$
  -- One pass: the jobs by minute, queue, kind, status and both histogram buckets
  -- (a few hundred groups a minute however many jobs), then the rows from those.
  with g as materialized (
    select date_bin('1 minute', j.finished_at, timestamptz '1970-01-01 00:00Z') as minute, j.queue, j.kind, j.status,
           pgrun.hist_bucket(greatest(date_part('epoch', j.started_at - j.run_at), 0) * 1000) as wb,
           pgrun.hist_bucket(greatest(date_part('epoch', j.finished_at - j.started_at), 0) * 1000) as rb,
           count(*) as n, min(j.finished_at) as oldest
    from (select x.finished_at, x.queue, x.kind, x.status, x.run_at, x.started_at
          from pgrun.jobs x
          where x.finished_at >= t0 and x.finished_at < t1 and x.status in ('succeeded', 'failed', 'cancelled')
          order by x.finished_at desc
          limit max_rows) j
    group by 1, 2, 3, 4, 5, 6
  ),
  cut as (
    select case when sum(g.n) >= max_rows then date_bin('1 minute', min(g.oldest), timestamptz '1970-01-01 00:00Z') end as at
    from g
  ),
  counts as (
    select g.minute, g.queue, g.kind,
           coalesce(sum(g.n) filter (where g.status = 'succeeded'), 0)::integer as succeeded,
           coalesce(sum(g.n) filter (where g.status = 'failed'), 0)::integer as failed,
           coalesce(sum(g.n) filter (where g.status = 'cancelled'), 0)::integer as cancelled
    from g group by g.minute, g.queue, g.kind
  ),
  waits as (
    select x.minute, x.queue, x.kind, pgrun.counts_at(array_agg(x.i), array_agg(x.n)) as h
    from (select g.minute, g.queue, g.kind, g.wb as i, sum(g.n)::bigint as n from g where g.wb is not null
          group by g.minute, g.queue, g.kind, g.wb) x
    group by x.minute, x.queue, x.kind
  ),
  runs as (
    select x.minute, x.queue, x.kind, pgrun.counts_at(array_agg(x.i), array_agg(x.n)) as h
    from (select g.minute, g.queue, g.kind, g.rb as i, sum(g.n)::bigint as n from g where g.rb is not null
          group by g.minute, g.queue, g.kind, g.rb) x
    group by x.minute, x.queue, x.kind
  )
  select c.minute, c.queue, c.kind, c.succeeded, c.failed, c.cancelled,
         coalesce(w.h, '{}'), coalesce(r.h, '{}'), c.minute is distinct from (select cut.at from cut)
  from counts c
  left join waits w on (w.minute, w.queue, w.kind) = (c.minute, c.queue, c.kind)
  left join runs r on (r.minute, r.queue, r.kind) = (c.minute, c.queue, c.kind)
$$;

-- rollup_series merges the rollups of [t0, t1) into buckets of bucket (date_bin from
-- the Unix epoch; NULL: one bucket at t0), per queue and kind, or per queue, per kind
-- or all together (group_by NULL, 'queue', 'kind', 'all'; the columns not grouped by
-- are NULL), for queue and kind when given. It reads job_quarters for [t0, qw),
-- job_minutes for [qw, w) and counts [w, t1) live (count_minutes, at most
-- live_row_cap() rows): qw and w are quarter and minute boundaries, t0 <= qw <= w or
-- qw = t0, and t0 is on a quarter boundary where quarters are read. All together
-- with no queue or kind chosen, it reads their totals instead (job_quarter_totals,
-- job_minute_totals: a row a quarter or minute, not one per queue and kind). The
-- histograms
-- are the 32 sums, NULL where no row reached (hist_trim makes them a histogram,
-- hist_summary reads them). partial is true for a bucket that ends after now or
-- holds a live minute the cap cut short. Granted to nobody.
create or replace function pgrun.rollup_series(
  t0          timestamptz,
  t1          timestamptz,
  bucket      interval,
  only_queue  text,
  only_kind   text,
  group_by    text,
  now         timestamptz,
  w           timestamptz,
  qw          timestamptz
)
returns table (at timestamptz, queue text, kind text, succeeded bigint, failed bigint, cancelled bigint,
               wait_hist bigint[], run_hist bigint[], partial boolean)
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  -- (Which tables is decided once per call: the planner makes each side's test of
  -- the arguments a one-time filter, and the side not taken reads nothing.)
  with pieces as (
    select q.quarter as t, q.queue, q.kind, q.succeeded, q.failed, q.cancelled, q.wait_hist, q.run_hist, true as complete
    from pgrun.job_quarters q
    where q.quarter >= t0 and q.quarter < least(qw, t1)
      and (rollup_series.only_queue is null or q.queue = rollup_series.only_queue)
      and (rollup_series.only_kind is null or q.kind = rollup_series.only_kind)
      and not (rollup_series.group_by is not distinct from 'all' and rollup_series.only_queue is null
               and rollup_series.only_kind is null)
    union all
    select q.quarter, null, null, q.succeeded, q.failed, q.cancelled, q.wait_hist, q.run_hist, true
    from pgrun.job_quarter_totals q
    where q.quarter >= t0 and q.quarter < least(qw, t1)
      and rollup_series.group_by is not distinct from 'all' and rollup_series.only_queue is null
      and rollup_series.only_kind is null
    union all
    select m.minute, m.queue, m.kind, m.succeeded, m.failed, m.cancelled, m.wait_hist, m.run_hist, true
    from pgrun.job_minutes m
    where m.minute >= greatest(t0, qw) and m.minute < least(w, t1)
      and (rollup_series.only_queue is null or m.queue = rollup_series.only_queue)
      and (rollup_series.only_kind is null or m.kind = rollup_series.only_kind)
      and not (rollup_series.group_by is not distinct from 'all' and rollup_series.only_queue is null
               and rollup_series.only_kind is null)
    union all
    select m.minute, null, null, m.succeeded, m.failed, m.cancelled, m.wait_hist, m.run_hist, true
    from pgrun.job_minute_totals m
    where m.minute >= greatest(t0, qw) and m.minute < least(w, t1)
      and rollup_series.group_by is not distinct from 'all' and rollup_series.only_queue is null
      and rollup_series.only_kind is null
    union all
    select l.minute, l.queue, l.kind, l.succeeded, l.failed, l.cancelled, l.wait_hist, l.run_hist, l.complete
    from pgrun.count_minutes(greatest(t0, w), t1, pgrun.live_row_cap()) l
    where w < t1
      and (rollup_series.only_queue is null or l.queue = rollup_series.only_queue)
      and (rollup_series.only_kind is null or l.kind = rollup_series.only_kind)
  ),
  p as (
    select coalesce(date_bin(bucket, x.t, timestamptz '1970-01-01 00:00Z'), t0) as at,
           case when group_by in ('kind', 'all') then null else x.queue end as queue,
           case when group_by in ('queue', 'all') then null else x.kind end as kind,
           x.succeeded, x.failed, x.cancelled, x.wait_hist, x.run_hist, x.complete
    from pieces x
  )
  select p.at, p.queue, p.kind, sum(p.succeeded), sum(p.failed), sum(p.cancelled),
         array[
           sum(p.wait_hist[1]), sum(p.wait_hist[2]), sum(p.wait_hist[3]), sum(p.wait_hist[4]),
           sum(p.wait_hist[5]), sum(p.wait_hist[6]), sum(p.wait_hist[7]), sum(p.wait_hist[8]),
           sum(p.wait_hist[9]), sum(p.wait_hist[10]), sum(p.wait_hist[11]), sum(p.wait_hist[12]),
           sum(p.wait_hist[13]), sum(p.wait_hist[14]), sum(p.wait_hist[15]), sum(p.wait_hist[16]),
           sum(p.wait_hist[17]), sum(p.wait_hist[18]), sum(p.wait_hist[19]), sum(p.wait_hist[20]),
           sum(p.wait_hist[21]), sum(p.wait_hist[22]), sum(p.wait_hist[23]), sum(p.wait_hist[24]),
           sum(p.wait_hist[25]), sum(p.wait_hist[26]), sum(p.wait_hist[27]), sum(p.wait_hist[28]),
           sum(p.wait_hist[29]), sum(p.wait_hist[30]), sum(p.wait_hist[31]), sum(p.wait_hist[32])],
         array[
           sum(p.run_hist[1]), sum(p.run_hist[2]), sum(p.run_hist[3]), sum(p.run_hist[4]),
           sum(p.run_hist[5]), sum(p.run_hist[6]), sum(p.run_hist[7]), sum(p.run_hist[8]),
           sum(p.run_hist[9]), sum(p.run_hist[10]), sum(p.run_hist[11]), sum(p.run_hist[12]),
           sum(p.run_hist[13]), sum(p.run_hist[14]), sum(p.run_hist[15]), sum(p.run_hist[16]),
           sum(p.run_hist[17]), sum(p.run_hist[18]), sum(p.run_hist[19]), sum(p.run_hist[20]),
           sum(p.run_hist[21]), sum(p.run_hist[22]), sum(p.run_hist[23]), sum(p.run_hist[24]),
           sum(p.run_hist[25]), sum(p.run_hist[26]), sum(p.run_hist[27]), sum(p.run_hist[28]),
           sum(p.run_hist[29]), sum(p.run_hist[30]), sum(p.run_hist[31]), sum(p.run_hist[32])],
         not bool_and(p.complete) or p.at + coalesce(bucket, t1 - t0) > rollup_series.now
  from p
  group by p.at, p.queue, p.kind
$$;

-- rollup_minutes rolls up the closed minutes after the watermark
-- (pgrun.rollup_watermark): a minute is closed rollup_settle() after it ends, as of
-- now. Each minute's endings are counted again from pgrun.jobs (count_minutes,
-- count_errors) and written over its rows, so rolling a minute up twice leaves the
-- same rows; each minute is also summed over every queue and kind into
-- job_minute_totals, and each quarter hour whose last minute it rolls up into
-- job_quarters, job_quarter_totals and error_quarters. Each call counts at most max_rollup_minutes()
-- minutes from the first one with endings (empty minutes before and after are passed
-- over at no cost): a catch-up goes in steps, the first call (no watermark) from the
-- oldest ending but at most 7 days back. It then deletes up to 10,000 rows of each
-- rollup table older than rollup_retention(). Takes the watermark's row lock with
-- SKIP LOCKED: a call while another runs returns 0. Returns how many minutes the
-- watermark moved on (0: up to date). A maintain() step (every round by default),
-- callable alone. A now that is NULL or not finite raises 22023.
create or replace function pgrun.rollup_minutes(now timestamptz default now())
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now     constant timestamptz := rollup_minutes.now;
  origin    constant timestamptz := timestamptz '1970-01-01 00:00Z';
  v_closed  timestamptz;
  v_w       timestamptz;
  v_first   timestamptz;
  v_to      timestamptz;
  v_q0      timestamptz;
  v_q1      timestamptz;
  v_cut     timestamptz;
begin
  if v_now is null or not isfinite(v_now) then
    raise exception 'rollup time % is not valid', coalesce(v_now::text, 'NULL')
      using errcode = '22023', hint = 'Pass a finite time, or leave now out for the transaction''s time.';
  end if;
  v_closed := date_bin('1 minute', v_now - pgrun.rollup_settle(), origin);
  -- Most rounds find nothing new closed: a plain read, no row lock (which would
  -- write the row's page every round).
  if (select r.through from pgrun.rollup_watermark r) >= v_closed then
    return 0;
  end if;
  select r.through into v_w from pgrun.rollup_watermark r for update skip locked;
  if not found then
    if not exists (select 1 from pgrun.rollup_watermark) then
      insert into pgrun.rollup_watermark (one, through) values (true, null) on conflict do nothing;
    end if;
    return 0;
  end if;
  v_w := greatest(coalesce(v_w, '-infinity'), v_closed - interval '7 days');
  if v_w >= v_closed then
    return 0; -- up to date, or the clock went back
  end if;
  select date_bin('1 minute', min(j.finished_at), origin) into v_first
  from pgrun.jobs j where j.finished_at >= v_w and j.finished_at < v_closed;
  v_to := least(v_closed, v_first + pgrun.max_rollup_minutes() * interval '1 minute');
  -- Past the last ending there is nothing to count: straight to the closed edge.
  if v_to is null or not exists (select 1 from pgrun.jobs j where j.finished_at >= v_to and j.finished_at < v_closed) then
    v_to := v_closed;
  end if;

  with fresh as materialized (select * from pgrun.count_minutes(v_w, v_to)),
  stale as (
    delete from pgrun.job_minutes m
    where m.minute >= v_w and m.minute < v_to
      and not exists (select 1 from fresh f where (f.minute, f.queue, f.kind) = (m.minute, m.queue, m.kind))
  )
  insert into pgrun.job_minutes as m (minute, queue, kind, succeeded, failed, cancelled, wait_hist, run_hist)
  select f.minute, f.queue, f.kind, f.succeeded, f.failed, f.cancelled, f.wait_hist, f.run_hist from fresh f
  on conflict (minute, queue, kind) do update
  set succeeded = excluded.succeeded, failed = excluded.failed, cancelled = excluded.cancelled,
      wait_hist = excluded.wait_hist, run_hist = excluded.run_hist;

  -- The same minutes summed over every queue and kind, written afresh (a few dozen
  -- rows a minute: hist_add's call per row costs nothing here).
  delete from pgrun.job_minute_totals t where t.minute >= v_w and t.minute < v_to;
  insert into pgrun.job_minute_totals (minute, succeeded, failed, cancelled, wait_hist, run_hist)
  select m.minute, sum(m.succeeded), sum(m.failed), sum(m.cancelled), pgrun.hist_add(m.wait_hist),
         pgrun.hist_add(m.run_hist)
  from pgrun.job_minutes m where m.minute >= v_w and m.minute < v_to group by m.minute;

  with fresh as materialized (select * from pgrun.count_errors(v_w, v_to)),
  stale as (
    delete from pgrun.error_minutes e
    where e.minute >= v_w and e.minute < v_to
      and not exists (select 1 from fresh f
                      where (f.minute, f.queue, f.kind, f.error_group) = (e.minute, e.queue, e.kind, e.error_group))
  )
  insert into pgrun.error_minutes as e (minute, queue, kind, error_group, n, sample, first_at, last_at)
  select f.minute, f.queue, f.kind, f.error_group, f.n, f.sample, f.first_at, f.last_at from fresh f
  on conflict (minute, queue, kind, error_group) do update
  set n = excluded.n, sample = excluded.sample, first_at = excluded.first_at, last_at = excluded.last_at;

  -- The quarter hours this call completes: from the one that holds the old
  -- watermark to the last that ends by the new one.
  v_q0 := date_bin('15 minutes', v_w, origin);
  v_q1 := date_bin('15 minutes', v_to, origin);
  if v_q0 < v_q1 then
    with fresh as materialized (
      select * from pgrun.rollup_series(v_q0, v_q1, interval '15 minutes', null, null, null, v_now, v_q1, v_q0)
    ),
    stale as (
      delete from pgrun.job_quarters q
      where q.quarter >= v_q0 and q.quarter < v_q1
        and not exists (select 1 from fresh f where (f.at, f.queue, f.kind) = (q.quarter, q.queue, q.kind))
    )
    insert into pgrun.job_quarters as q (quarter, queue, kind, succeeded, failed, cancelled, wait_hist, run_hist)
    select f.at, f.queue, f.kind, f.succeeded, f.failed, f.cancelled, pgrun.hist_trim(f.wait_hist),
           pgrun.hist_trim(f.run_hist)
    from fresh f
    on conflict (quarter, queue, kind) do update
    set succeeded = excluded.succeeded, failed = excluded.failed, cancelled = excluded.cancelled,
        wait_hist = excluded.wait_hist, run_hist = excluded.run_hist;

    delete from pgrun.job_quarter_totals q where q.quarter >= v_q0 and q.quarter < v_q1;
    insert into pgrun.job_quarter_totals (quarter, succeeded, failed, cancelled, wait_hist, run_hist)
    select date_bin('15 minutes', t.minute, origin), sum(t.succeeded), sum(t.failed), sum(t.cancelled),
           pgrun.hist_add(t.wait_hist), pgrun.hist_add(t.run_hist)
    from pgrun.job_minute_totals t where t.minute >= v_q0 and t.minute < v_q1 group by 1;
  end if;

  if v_q0 < v_q1 then
    with fresh as materialized (
      select date_bin('15 minutes', e.minute, origin) as quarter, e.queue, e.kind, e.error_group, sum(e.n)::integer as n,
             min(e.sample) as sample, min(e.first_at) as first_at, max(e.last_at) as last_at
      from pgrun.error_minutes e
      where e.minute >= v_q0 and e.minute < v_q1
      group by 1, 2, 3, 4
    ),
    stale as (
      delete from pgrun.error_quarters q
      where q.quarter >= v_q0 and q.quarter < v_q1
        and not exists (select 1 from fresh f
                        where (f.quarter, f.queue, f.kind, f.error_group) = (q.quarter, q.queue, q.kind, q.error_group))
    )
    insert into pgrun.error_quarters as q (quarter, queue, kind, error_group, n, sample, first_at, last_at)
    select f.quarter, f.queue, f.kind, f.error_group, f.n, f.sample, f.first_at, f.last_at from fresh f
    on conflict (quarter, queue, kind, error_group) do update
    set n = excluded.n, sample = excluded.sample, first_at = excluded.first_at, last_at = excluded.last_at;
  end if;

  update pgrun.rollup_watermark set through = v_to;

  v_cut := v_now - pgrun.rollup_retention();
  delete from pgrun.job_minutes m
  where m.ctid = any (array(select x.ctid from pgrun.job_minutes x where x.minute < v_cut limit 10000));
  delete from pgrun.job_quarters q
  where q.ctid = any (array(select x.ctid from pgrun.job_quarters x where x.quarter < v_cut limit 10000));
  delete from pgrun.job_minute_totals m
  where m.ctid = any (array(select x.ctid from pgrun.job_minute_totals x where x.minute < v_cut limit 10000));
  delete from pgrun.job_quarter_totals q
  where q.ctid = any (array(select x.ctid from pgrun.job_quarter_totals x where x.quarter < v_cut limit 10000));
  delete from pgrun.error_minutes e
  where e.ctid = any (array(select x.ctid from pgrun.error_minutes x where x.minute < v_cut limit 10000));
  delete from pgrun.error_quarters q
  where q.ctid = any (array(select x.ctid from pgrun.error_quarters x where x.quarter < v_cut limit 10000));
  return (extract(epoch from v_to - v_w) / 60)::integer;
end;
$$;

-- check_rollup_span raises 22023 unless since is above 0 and at most
-- rollup_retention(), the span the rollups keep.
create or replace function pgrun.check_rollup_span(since interval)
returns void
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if since is null or since <= interval '0' or since > pgrun.rollup_retention() then
    raise exception 'since % is out of bounds', coalesce(since::text, 'NULL')
      using errcode = '22023',
            hint = format('Pass a span above 0 and at most %s (the rollups'' retention), such as ''24 hours''.',
                          pgrun.rollup_retention());
  end if;
end;
$$;

-- rollup_through is where the rollups end and the live count begins: the watermark,
-- or at for none yet (everything is counted live).
create or replace function pgrun.rollup_through(at timestamptz)
returns timestamptz
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select coalesce((select r.through from pgrun.rollup_watermark r), at)
$$;

-- job_series is throughput, failures and wait and run times over the last since (at
-- most rollup_retention()) in buckets of bucket (whole minutes, 1 minute to 1 day;
-- at most max_series_buckets() of them), for queue and kind when given (NULL: all).
-- A row per bucket that had endings, and per queue and kind in it; group_by 'queue',
-- 'kind' or 'all' sums the kinds, the queues or both instead (the columns summed
-- over are NULL), so that percentiles are of the merged histograms. at is the
-- bucket's start: buckets are aligned on the Unix epoch (date_bin), the first is the
-- one that holds now - since, and the last holds now. succeeded, failed, cancelled:
-- the jobs that ended so in the bucket; wait (run_at to start, at least 0) and run
-- (start to end) times in seconds, p50 and p95 of wait_n and run_n jobs (the ended
-- jobs that had started), exact to a histogram bucket (see the top of this file).
-- partial: the bucket is not over yet, or the live count's cap cut it short. Reads
-- job_quarters where bucket is a multiple of 15 minutes, job_minutes, and counts the
-- minutes not rolled up yet live. Runs as the engine: counts of every tenant's jobs.
--   select * from pgrun.job_series('24 hours', '15 minutes', group_by => 'queue');
create or replace function pgrun.job_series(
  since       interval,
  bucket      interval,
  only_queue  text default null,
  only_kind   text default null,
  group_by    text default null
)
returns table (at timestamptz, queue text, kind text, succeeded bigint, failed bigint, cancelled bigint,
               wait_n bigint, wait_p50 float8, wait_p95 float8, run_n bigint, run_p50 float8, run_p95 float8,
               partial boolean)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  origin   constant timestamptz := timestamptz '1970-01-01 00:00Z';
  v_now    timestamptz := pgrun.clock();
  v_start  timestamptz;
  v_w      timestamptz;
  v_qw     timestamptz;
begin
  perform pgrun.check_rollup_span(since);
  if bucket is null or bucket < interval '1 minute' or bucket > interval '1 day'
     or extract(epoch from bucket) % 60 <> 0 then
    raise exception 'bucket % is out of bounds', coalesce(bucket::text, 'NULL')
      using errcode = '22023', hint = 'Pass whole minutes from 1 minute to 1 day, such as ''15 minutes''.';
  end if;
  if ceil(extract(epoch from since) / extract(epoch from bucket)) + 1 > pgrun.max_series_buckets() then
    raise exception 'since % in buckets of % is over % buckets', since, bucket, pgrun.max_series_buckets()
      using errcode = '22023', hint = 'Pass a larger bucket: a chart needs no more points than it has pixels.';
  end if;
  if only_queue is not null then
    perform pgrun.check_queue_name(only_queue);
  end if;
  if only_kind is not null then
    perform pgrun.check_kind(only_kind);
  end if;
  if group_by is not null and group_by not in ('queue', 'kind', 'all') then
    raise exception 'group_by % is not valid', quote_literal(group_by)
      using errcode = '22023', hint = 'Pass NULL (by queue and kind), ''queue'', ''kind'' or ''all''.';
  end if;
  v_start := date_bin(bucket, v_now - since, origin);
  v_w := greatest(pgrun.rollup_through(v_start), v_start);
  v_qw := case when extract(epoch from bucket) % 900 = 0 then date_bin('15 minutes', v_w, origin) else v_start end;
  return query
  select s.at, s.queue, s.kind, s.succeeded, s.failed, s.cancelled, w.n, w.p50, w.p95, r.n, r.p50, r.p95, s.partial
  from pgrun.rollup_series(v_start, v_now, bucket, only_queue, only_kind, group_by, v_now, v_w, v_qw) s
  cross join lateral pgrun.hist_summary(s.wait_hist) w
  cross join lateral pgrun.hist_summary(s.run_hist) r
  order by s.at, s.queue, s.kind;
end;
$$;

-- typical_run_times is, per queue and kind, how long the jobs that ended over the
-- last since (at most rollup_retention(); from the start of its quarter hour) ran:
-- n jobs, the p50 and p95 of their run times in seconds (exact to a histogram
-- bucket). The dashboard flags a running job past its kind's p95. Runs as the engine.
create or replace function pgrun.typical_run_times(since interval default interval '24 hours')
returns table (queue text, kind text, n bigint, p50 float8, p95 float8)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  origin   constant timestamptz := timestamptz '1970-01-01 00:00Z';
  v_now    timestamptz := pgrun.clock();
  v_start  timestamptz;
  v_w      timestamptz;
begin
  perform pgrun.check_rollup_span(since);
  v_start := date_bin('15 minutes', v_now - since, origin);
  v_w := greatest(pgrun.rollup_through(v_start), v_start);
  return query
  select s.queue, s.kind, r.n, r.p50, r.p95
  from pgrun.rollup_series(v_start, v_now, null, null, null, null, v_now, v_w,
                           date_bin('15 minutes', v_w, origin)) s
  cross join lateral pgrun.hist_summary(s.run_hist) r
  where r.n > 0
  order by s.queue, s.kind;
end;
$$;
