-- 03_bounds.sql: the bounds of the intervals the API stores, and the check that
-- enforces them. 72_bounds.sql lists every bound of the API (input_bounds()).

-- The bounds of the intervals the API stores: no stored value may make a later
-- claim or maintenance step fail (a timeout of a million years overflowed every
-- claim's deadline of its queue). Bodies bound when created, inlined as constants
-- (as max_json_bytes). input_bounds() lists every bound of the API.
--   max_wait       366 days: a job's timeout and unique window, a retry delay, a
--                  queue's default timeout, backoff and rate period
--   max_lease      1 day: a claim's lease, a queue's default lease (a dead worker's
--                  jobs come back within a lease: longer is an outage of its own)
--   max_cadence    1 hour: a worker's heartbeat cadence (it is judged dead after three)
--   max_retention  100 years: how long a queue keeps finished jobs
create or replace function pgrun.max_wait()
returns interval
language sql
immutable
parallel safe
return interval '366 days';

create or replace function pgrun.max_lease()
returns interval
language sql
immutable
parallel safe
return interval '1 day';

create or replace function pgrun.max_cadence()
returns interval
language sql
immutable
parallel safe
return interval '1 hour';

create or replace function pgrun.max_retention()
returns interval
language sql
immutable
parallel safe
return interval '100 years';

-- check_interval raises 22023 naming what and d unless d is NULL or within bounds: at
-- most high, and at least low (low NULL: above zero). Returns d.
create or replace function pgrun.check_interval(what text, d interval, high interval, low interval default null)
returns interval
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if d is not null and (d > high or d < low or (low is null and d <= interval '0')) then
    raise exception '% % is out of bounds', what, d
      using errcode = '22023',
            hint = case when low is null then format('Pass an interval above 0 and at most %s, or NULL for the default.', high)
                        else format('Pass an interval from %s to %s, or NULL for the default.', low, high) end;
  end if;
  return d;
end;
$$;
