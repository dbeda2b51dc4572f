-- 05_errors.sql: failures by group. error_group is how messages are grouped;
-- count_errors counts a span's failures by minute and group, as rollup_minutes
-- (74_rollups.sql) writes them into pgrun.error_minutes; error_groups is what the
-- dashboard's errors page reads. With the rollups' bounds and settings (retention,
-- settle time, caps). Early, so that the bulk filter (52_bulk.sql), the bounds table
-- (72_bounds.sql) and 74_rollups.sql can use them: a SQL body is checked when it is
-- created.

-- error_group is the normalised error message that groups failures on the errors
-- page and in the bulk filter's error_group key: two failures are one group when
-- their messages differ only in the ids, numbers and quoted values they carry. In
-- order:
--   1. whitespace runs become one space, and the ends are trimmed;
--   2. a quoted string, '...' or "...", not inside a word (so the apostrophes of
--      "can't" stay), becomes '…';
--   3. a UUID becomes <uuid>;
--   4. a run of 8 or more hex digits with at least one letter a-f, optionally after
--      0x, not inside a word (a _ or - around it is fine), becomes <hex>;
--   5. every run of digits becomes N, except a number of exactly 3 digits that
--      begins the message or follows a space and is followed by a space: a status
--      code, so that "smtp 421 try later" and "smtp 550 mailbox unavailable" stay
--      two groups (and "took 250 ms" and "took 300 ms" too, the price of that rule);
--   6. the result is cut at 200 characters.
-- Case is kept. NULL, or a message of whitespace only, gives NULL. A body bound when
-- created (RETURN, no SET clause), as the shared rules are (01_common.sql), so that
-- job_matches inlines it. (chr(1) marks the kept codes between steps 5's two passes;
-- it is taken out again.)
create or replace function pgrun.error_group(message text)
returns text
language sql
immutable
parallel safe
return nullif(left(replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
  btrim(regexp_replace(message, '\s+', ' ', 'g')),
  '(?<![[:alnum:]])''[^'']*''(?![[:alnum:]])|(?<![[:alnum:]])"[^"]*"(?![[:alnum:]])', '''…''', 'g'),
  '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<uuid>', 'g'),
  '(?<![[:alnum:]])(0x)?(?=[0-9]*[a-fA-F])[0-9a-fA-F]{8,}(?![[:alnum:]])', '<hex>', 'g'),
  '(^| )([0-9]{3})(?= )', '\1' || chr(1) || '\2', 'g'),
  '(?<![0-9' || chr(1) || '])[0-9]+', 'N', 'g'),
  chr(1), ''), 200), '');

-- rollup_retention is how long the per-minute rollups (job_minutes, error_minutes)
-- are kept, and so the longest span job_series, error_groups and typical_run_times
-- answer for: a week's chart and the day before it. rollup_minutes deletes older rows.
create or replace function pgrun.rollup_retention()
returns interval
language sql
immutable
parallel safe
return interval '8 days';

-- rollup_settle is how long after a minute closes rollup_minutes waits before it
-- counts it: a transaction that ends a job stamps finished_at with its start, and
-- commits a little later.
create or replace function pgrun.rollup_settle()
returns interval
language sql
immutable
parallel safe
return interval '10 seconds';

-- max_rollup_minutes is the most minutes one rollup_minutes call counts, from the
-- first with endings (runs of empty minutes are passed over): at 2,000 endings a
-- second, under a second of work (docs/operations.md, "Rollups"), so that a catch-up
-- after downtime goes in steps that never hold a maintain() round for long.
create or replace function pgrun.max_rollup_minutes()
returns integer
language sql
immutable
parallel safe
return 5;

-- live_row_cap is the most rows of pgrun.jobs a reader counts live (the minutes not
-- rolled up yet), newest first. Past it the oldest live minute read is partial and
-- older live minutes are left out; it binds only above some 300 endings a second, or
-- while rollups lag behind.
create or replace function pgrun.live_row_cap()
returns integer
language sql
immutable
parallel safe
return 20000;

-- max_series_buckets is the most buckets job_series returns per queue and kind: a
-- chart of 2,000 points is wider than any screen.
create or replace function pgrun.max_series_buckets()
returns integer
language sql
immutable
parallel safe
return 2000;

-- max_error_groups is the most groups error_groups returns in one call.
create or replace function pgrun.max_error_groups()
returns integer
language sql
immutable
parallel safe
return 500;

-- live_failure_cap is the most failures error_groups groups live (the minutes not
-- rolled up yet), newest first: grouping a message costs about 12 us.
create or replace function pgrun.live_failure_cap()
returns integer
language sql
immutable
parallel safe
return 5000;

-- max_error_groups_a_minute is the most error groups error_minutes keeps per minute,
-- queue and kind; the rest are counted together as the group '<other groups>', so
-- that messages no rule folds (a user name in each) cannot grow the table without end.
create or replace function pgrun.max_error_groups_a_minute()
returns integer
language sql
immutable
parallel safe
return 50;

-- count_errors counts the jobs that ended failed in [t0, t1) by minute, queue, kind
-- and error group (error_group of the message; '' for none), with a sample message
-- (at most 300 characters) and the first and last failure's time, as error_minutes
-- holds them: at most max_error_groups_a_minute() groups per minute, queue and kind,
-- the rest as '<other groups>'. Reads the index of failures by time; with max_rows,
-- at most that many failures, newest first. Granted to nobody.
create or replace function pgrun.count_errors(t0 timestamptz, t1 timestamptz, max_rows integer default null)
returns table (minute timestamptz, queue text, kind text, error_group text, n integer, sample text,
               first_at timestamptz, last_at timestamptz)
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  with f as (
    select j.finished_at, j.queue, j.kind, j.error
    from pgrun.jobs j
    where j.status = 'failed' and j.finished_at >= t0 and j.finished_at < t1
    order by j.finished_at desc
    limit max_rows
  ),
  g as (
    select date_bin('1 minute', f.finished_at, timestamptz '1970-01-01 00:00Z') as minute, f.queue, f.kind,
           coalesce(pgrun.error_group(f.error ->> 'message'), '') as error_group,
           count(*)::integer as n, left(min(f.error ->> 'message'), 300) as sample,
           min(f.finished_at) as first_at, max(f.finished_at) as last_at
    from f
    group by 1, 2, 3, 4
  ),
  ranked as (
    select g.*, row_number() over (partition by g.minute, g.queue, g.kind order by g.n desc, g.error_group) as rank
    from g
  )
  select r.minute, r.queue, r.kind, r.error_group, r.n, r.sample, r.first_at, r.last_at
  from ranked r where r.rank <= pgrun.max_error_groups_a_minute()
  union all
  select r.minute, r.queue, r.kind, '<other groups>', sum(r.n)::integer, min(r.sample), min(r.first_at), max(r.last_at)
  from ranked r where r.rank > pgrun.max_error_groups_a_minute()
  group by r.minute, r.queue, r.kind
$$;

-- error_groups is the failures of the last since (at most rollup_retention()) by
-- queue, kind and error group (error_group; NULL for failures with no message), most
-- first, at most max_groups (1 to max_error_groups()): n failures, first_seen and
-- last_seen (the first and last failure's time), sample (one of its messages, at most
-- 300 characters) and spark, the failures in each of 24 equal slices of the span,
-- oldest first (a rolled-up minute or quarter hour counts in the slice its start is
-- in; spark sums to n). The group's failed jobs are the bulk filter {"queue", "kind",
-- "states": ["failed"], "error_group"} (52_bulk.sql), while they stay failed. Reads
-- error_quarters (for a span of 6 hours or more) and error_minutes, and counts the
-- minutes not rolled up yet live. Runs as the engine: every tenant's failures,
-- messages included, so it is granted to the admin role alone.
create or replace function pgrun.error_groups(since interval, max_groups integer default 50)
returns table (queue text, kind text, error_group text, sample text, n bigint, first_seen timestamptz,
               last_seen timestamptz, spark integer[])
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
  v_qa     timestamptz;
  v_qb     timestamptz;
begin
  perform pgrun.check_rollup_span(since);
  if max_groups is null or max_groups not between 1 and pgrun.max_error_groups() then
    raise exception 'max_groups % is out of bounds', coalesce(max_groups::text, 'NULL')
      using errcode = '22023', hint = format('Pass 1 to %s groups.', pgrun.max_error_groups());
  end if;
  v_start := v_now - since;
  v_w := greatest(pgrun.rollup_through(v_start), v_start);
  -- Whole quarter hours from error_quarters over 6 hours or more (a slice is then a
  -- quarter or longer), minutes around them.
  v_qa := case when since >= interval '6 hours'
               then date_bin('15 minutes', v_start - interval '1 microsecond', origin) + interval '15 minutes'
               else v_start end;
  v_qb := case when since >= interval '6 hours' then greatest(v_qa, date_bin('15 minutes', v_w, origin)) else v_qa end;
  return query
  with hits as (
    select q.quarter as minute, q.queue, q.kind, q.error_group, q.n, q.sample, q.first_at, q.last_at
    from pgrun.error_quarters q
    where q.quarter >= v_qa and q.quarter < v_qb
    union all
    -- The minutes before the first whole quarter and after the last, as two index
    -- ranges: one range with the quarters' minutes filtered out read every minute of
    -- the span (69,000 rows over 7 days, 300-1,000 ms).
    select e.minute, e.queue, e.kind, e.error_group, e.n, e.sample, e.first_at, e.last_at
    from pgrun.error_minutes e
    where e.minute >= date_bin('1 minute', v_start, origin) and e.minute < least(v_qa, v_w, v_now)
    union all
    select e.minute, e.queue, e.kind, e.error_group, e.n, e.sample, e.first_at, e.last_at
    from pgrun.error_minutes e
    where e.minute >= greatest(v_qb, date_bin('1 minute', v_start, origin)) and e.minute < least(v_w, v_now)
    union all
    select l.minute, l.queue, l.kind, l.error_group, l.n, l.sample, l.first_at, l.last_at
    from pgrun.count_errors(v_w, v_now, pgrun.live_failure_cap()) l
    where v_w < v_now
  ),
  slices as (
    select r.queue, r.kind, r.error_group,
           least(greatest(floor(extract(epoch from r.minute - v_start) * 24 / extract(epoch from since)), 0), 23)::integer + 1 as i,
           sum(r.n)::bigint as n, min(r.first_at) as first_at, max(r.last_at) as last_at, min(r.sample) as sample
    from hits r
    group by 1, 2, 3, 4
  )
  select s.queue, s.kind, nullif(s.error_group, ''), min(s.sample), sum(s.n)::bigint, min(s.first_at), max(s.last_at),
         pgrun.counts_at(array_agg(s.i), array_agg(s.n), 24)
  from slices s
  group by s.queue, s.kind, s.error_group
  order by 5 desc, 7 desc, 1, 2, 3
  limit max_groups;
end;
$$;
