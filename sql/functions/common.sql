-- common.sql: the clock seam, input checks, backoff and the event writer shared by
-- every other file. Applied first (files are applied in name order).

-- clock is the engine's notion of "now": the transaction's now(), unless the session
-- sets pgrun.now (tests and simulations do: SET pgrun.now = '2030-01-01 00:00Z').
-- Every time-dependent rule reads it, so schedules, backoff and leases can be tested
-- against explicit instants instead of sleeps.
create or replace function pgrun.clock()
returns timestamptz
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select coalesce(nullif(current_setting('pgrun.now', true), '')::timestamptz, now())
$$;

-- check_queue_name raises 22023 unless q is a valid queue name; returns q.
create or replace function pgrun.check_queue_name(q text)
returns text
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if q is null or q !~ '^[a-z][a-z0-9_.-]{0,62}$' then
    raise exception 'queue name % is not valid', coalesce(quote_literal(q), 'NULL')
      using errcode = '22023',
            hint = 'Use 1 to 63 characters from a-z, 0-9, _, - and . starting with a letter.';
  end if;
  return q;
end;
$$;

-- check_kind raises 22023 unless k is a valid job kind; returns k.
create or replace function pgrun.check_kind(k text)
returns text
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if k is null or k !~ '^[A-Za-z][A-Za-z0-9_.:/-]{0,127}$' then
    raise exception 'job kind % is not valid', coalesce(quote_literal(k), 'NULL')
      using errcode = '22023',
            hint = 'Use 1 to 128 characters from letters, digits, _ . : / - starting with a letter.';
  end if;
  return k;
end;
$$;

-- check_positive_interval raises 22023 unless d is NULL or a positive interval.
create or replace function pgrun.check_positive_interval(what text, d interval)
returns interval
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if d is not null and d <= interval '0' then
    raise exception '% % is not positive', what, d
      using errcode = '22023',
            hint = format('Pass a positive interval such as ''30 seconds'', or NULL for the default %s.', what);
  end if;
  return d;
end;
$$;

-- backoff is the delay before retry number failures (1 = first retry): exponential from
-- base, capped at cap, with "equal jitter" (uniform in [d/2, d]) so that a burst of
-- failures does not come back as a burst.
create or replace function pgrun.backoff(
  failures integer,
  base interval default interval '1 second',
  cap interval default interval '1 hour'
)
returns interval
language sql
volatile
set search_path = pgrun, pg_catalog
as $$
  select d / 2 + d / 2 * random()
  from (select least(cap, base * power(2, least(greatest(failures, 1) - 1, 30))) as d) s
$$;

-- job_not_found raises P0002 naming the id. Functions that take a job id from an
-- operator call it when the id does not exist at all.
create or replace function pgrun.job_not_found(job_id bigint)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  raise exception 'job % does not exist', coalesce(job_id::text, 'NULL')
    using errcode = 'P0002',
          hint = 'Check the id with: SELECT id, kind, status FROM pgrun.jobs ORDER BY id DESC LIMIT 20;';
end;
$$;

-- add_event appends one row to the audit log and returns its id.
create or replace function pgrun.add_event(
  job_id bigint,
  event text,
  level text default 'info',
  message text default null,
  fields jsonb default '{}'
)
returns bigint
language sql
set search_path = pgrun, pg_catalog
as $$
  insert into pgrun.job_events (job_id, at, event, level, message, fields)
  values (job_id, pgrun.clock(), event, level, message, coalesce(fields, '{}'))
  returning id
$$;
