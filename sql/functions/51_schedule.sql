-- 51_schedule.sql: cron schedules evaluated in SQL, fired by maintain() exactly once
-- per slot however many runners call it, with no pg_cron.

-- Cron limits (docs/sql-api.md, "Limits"). An expression is checked against them
-- before it is split or expanded, so a hostile one (a field listing 400,000 values)
-- is refused at once with 22023 instead of running for seconds on every fire.
--   max_cron_chars   256 characters in the whole expression; a real five-field
--                    expression is well under 100
--   max_cron_parts   60 comma-separated parts in one field: one per minute of an
--                    hour, the longest list a field can usefully hold
create or replace function pgrun.max_cron_chars()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 256 $$;

create or replace function pgrun.max_cron_parts()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 60 $$;

-- cron_field parses one cron field into the sorted values it allows in [lo, hi]:
-- "*", "5", "1-5", "*/15", "10-50/10", "5/15" (5, 20, ...), lists of those, and names
-- (jan..dec, sun..sat) where names is given (names[1] stands for lo). Raises 22023
-- naming the field (what) when it is not valid, longer than max_cron_chars()
-- characters or has more than max_cron_parts() comma-separated parts; both bounds are
-- checked before anything is split.
create or replace function pgrun.cron_field(field text, lo integer, hi integer, what text, names text[] default null)
returns integer[]
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
declare
  part   text;
  rng    text;
  step   integer;
  a      integer;
  b      integer;
  vals   integer[] := '{}';
  ends   text[];
begin
  if field is null or field = '' then
    raise exception 'cron % field is empty', what
      using errcode = '22023', hint = 'Write * for every value, or a value, range, step or list such as 0-30/5.';
  end if;
  if length(field) > pgrun.max_cron_chars() then
    raise exception 'cron % field is % characters, over the limit of % characters', what, length(field), pgrun.max_cron_chars()
      using errcode = '22023', hint = 'Use a range or a step instead of a long list, such as 0-30 or */5.';
  end if;
  -- Count the commas without splitting: the parts bound holds before any array exists.
  if length(field) - length(replace(field, ',', '')) + 1 > pgrun.max_cron_parts() then
    raise exception 'cron % field has % comma-separated parts, over the limit of % parts', what,
      length(field) - length(replace(field, ',', '')) + 1, pgrun.max_cron_parts()
      using errcode = '22023', hint = 'Use a range or a step instead of a long list, such as 0-30 or */5.';
  end if;
  foreach part in array string_to_array(lower(field), ',') loop
    step := 1;
    rng := part;
    if part like '%/%' then
      rng := split_part(part, '/', 1);
      -- At most 9 digits, so the cast cannot overflow integer.
      if split_part(part, '/', 2) !~ '^[0-9]{1,9}$' or split_part(part, '/', 2)::integer < 1 then
        raise exception 'cron % field % has a bad step', what, quote_literal(field)
          using errcode = '22023', hint = 'Write a step of 1 or more after the slash, such as */15 or 10-50/10.';
      end if;
      step := split_part(part, '/', 2)::integer;
    end if;
    if rng = '*' then
      a := lo; b := hi;
    else
      ends := string_to_array(rng, '-');
      if cardinality(ends) > 2 then
        raise exception 'cron % field % is not valid', what, quote_literal(field)
          using errcode = '22023', hint = 'Write *, a value, a range a-b, a step */n or a-b/n, or a comma-separated list of those.';
      end if;
      for i in 1 .. cardinality(ends) loop
        if ends[i] ~ '^[0-9]{1,9}$' then
          null;
        elsif ends[i] ~ '^[0-9]+$' then  -- too many digits to be in range (or to cast)
          raise exception 'cron % field % is out of range %-%', what, quote_literal(field), lo, hi
            using errcode = '22023', hint = format('Use values from %s to %s.', lo, hi);
        elsif names is not null and array_position(names, ends[i]) is not null then
          ends[i] := (array_position(names, ends[i]) - 1 + lo)::text;
        else
          raise exception 'cron % field % has unknown value %', what, quote_literal(field), quote_literal(ends[i])
            using errcode = '22023', hint = case when names is null then format('Use numbers from %s to %s.', lo, hi)
                                                 else format('Use numbers from %s to %s or names %s to %s.', lo, hi, names[1], names[cardinality(names)]) end;
        end if;
      end loop;
      a := ends[1]::integer;
      b := case when cardinality(ends) = 2 then ends[2]::integer when part like '%/%' then hi else a end;
    end if;
    if a < lo or b > hi or a > b then
      raise exception 'cron % field % is out of range %-%', what, quote_literal(field), lo, hi
        using errcode = '22023', hint = format('Use values from %s to %s, the lower end first.', lo, hi);
    end if;
    vals := vals || array(select generate_series(a, b, step));
  end loop;
  return array(select distinct v from unnest(vals) v order by v);
end;
$$;

-- cron_next returns the first instant after after at which expr fires, evaluated in
-- time zone tz. expr is five fields (minute hour day-of-month month day-of-week;
-- day of month and day of week match either when both are restricted, as in cron),
-- a macro (@hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually) or
-- @every INTERVAL (slots aligned to the Unix epoch, such as "@every 30s"). Raises
-- 22023 naming the expression if it is not valid or never fires, and before any
-- parsing if it is longer than max_cron_chars() characters or a field has more than
-- max_cron_parts() comma-separated parts.
create or replace function pgrun.cron_next(expr text, after timestamptz, tz text default 'UTC')
returns timestamptz
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  e       text;
  f       text[];
  every   interval;
  secs    double precision;
  mins    integer[];
  hours   integer[];
  doms    integer[];
  months  integer[];
  dows    integer[];
  loc     timestamp;
  d       date;
  cand    timestamp;
  h       integer;
  m       integer;
begin
  if expr is null then
    raise exception 'cron expression NULL is not valid'
      using errcode = '22023', hint = 'Write minute hour day-of-month month day-of-week, such as */15 9-17 * * mon-fri, or @hourly, @daily, @every 30s.';
  end if;
  if length(expr) > pgrun.max_cron_chars() then
    raise exception 'cron expression % is % characters, over the limit of % characters',
      quote_literal(left(expr, 32) || '...'), length(expr), pgrun.max_cron_chars()
      using errcode = '22023', hint = 'Use ranges and steps instead of long lists, such as */15 9-17 * * mon-fri.';
  end if;
  e := lower(trim(expr));
  if e like '@every %' then
    begin
      every := substr(e, 8)::interval;
    exception when others then
      raise exception 'cron expression % has a bad interval', quote_literal(expr)
        using errcode = '22023', hint = 'Write @every 30s, @every 5 minutes, @every 2h.';
    end;
    secs := extract(epoch from every);
    if secs < 1 then
      raise exception 'cron expression % must repeat every second or more', quote_literal(expr)
        using errcode = '22023', hint = 'Write @every 30s, @every 5 minutes, @every 2h.';
    end if;
    return to_timestamp((floor(extract(epoch from after) / secs) + 1) * secs);
  end if;
  e := case e
    when '@hourly' then '0 * * * *'
    when '@daily' then '0 0 * * *'
    when '@midnight' then '0 0 * * *'
    when '@weekly' then '0 0 * * 0'
    when '@monthly' then '0 0 1 * *'
    when '@yearly' then '0 0 1 1 *'
    when '@annually' then '0 0 1 1 *'
    else e end;
  f := regexp_split_to_array(e, '\s+');
  if cardinality(f) <> 5 then
    raise exception 'cron expression % does not have five fields', quote_literal(expr)
      using errcode = '22023', hint = 'Write minute hour day-of-month month day-of-week, such as */15 9-17 * * mon-fri, or @hourly, @daily, @every 30s.';
  end if;
  mins := pgrun.cron_field(f[1], 0, 59, 'minute');
  hours := pgrun.cron_field(f[2], 0, 23, 'hour');
  doms := pgrun.cron_field(f[3], 1, 31, 'day-of-month');
  months := pgrun.cron_field(f[4], 1, 12, 'month',
    array['jan','feb','mar','apr','may','jun','jul','aug','sep','oct','nov','dec']);
  dows := pgrun.cron_field(f[5], 0, 7, 'day-of-week', array['sun','mon','tue','wed','thu','fri','sat']);
  if 7 = any (dows) then
    dows := array(select distinct v from unnest(dows || 0) v where v <> 7 order by v);
  end if;

  loc := date_trunc('minute', after at time zone tz) + interval '1 minute';
  d := loc::date;
  for i in 0 .. 366 * 8 loop
    if extract(month from d)::integer = any (months) and (
         case
           when f[3] = '*' and f[5] = '*' then true
           when f[3] = '*' then extract(dow from d)::integer = any (dows)
           when f[5] = '*' then extract(day from d)::integer = any (doms)
           else extract(day from d)::integer = any (doms) or extract(dow from d)::integer = any (dows)
         end) then
      foreach h in array hours loop
        foreach m in array mins loop
          cand := d + make_interval(hours => h, mins => m);
          if cand >= loc then
            return cand at time zone tz;
          end if;
        end loop;
      end loop;
    end if;
    d := d + 1;
  end loop;
  raise exception 'cron expression % never fires', quote_literal(expr)
    using errcode = '22023', hint = 'Check day-of-month against month (there is no 30 February).';
end;
$$;

-- set_schedule creates or replaces schedule name: enqueue a kind job with args into
-- queue whenever cron fires in timezone. The next fire time is computed from now;
-- last_fire_at is kept. Returns the schedule.
create or replace function pgrun.set_schedule(
  name      text,
  cron      text,
  kind      text,
  args      jsonb default '{}',
  queue     text default 'default',
  timezone  text default 'UTC',
  enabled   boolean default true
)
returns pgrun.schedules
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  s     pgrun.schedules;
  nxt   timestamptz;
begin
  if name is null or name !~ '^[a-z][a-z0-9_.:-]{0,62}$' then
    raise exception 'schedule name % is not valid', coalesce(quote_literal(name), 'NULL')
      using errcode = '22023', hint = 'Use 1 to 63 characters from a-z, 0-9, _ . : - starting with a letter.';
  end if;
  perform pgrun.check_kind(kind);
  perform pgrun.check_queue_name(queue);
  if args is null or jsonb_typeof(args) <> 'object' then
    raise exception 'args of schedule % must be a JSON object', name
      using errcode = '22023', hint = 'Pass an object such as {"report": "daily"}.';
  end if;
  if timezone is null or not exists (select 1 from pg_timezone_names z where z.name = set_schedule.timezone) then
    raise exception 'time zone % is not known', coalesce(quote_literal(timezone), 'NULL')
      using errcode = '22023', hint = 'Use a name from pg_timezone_names, such as UTC or Europe/Berlin.';
  end if;
  nxt := pgrun.cron_next(cron, pgrun.clock(), timezone);
  insert into pgrun.schedules as x (name, cron, kind, args, queue, timezone, enabled, next_fire_at)
  values (set_schedule.name, set_schedule.cron, set_schedule.kind, set_schedule.args, set_schedule.queue,
          set_schedule.timezone, coalesce(set_schedule.enabled, true), nxt)
  on conflict (name) do update
    set cron = excluded.cron, kind = excluded.kind, args = excluded.args, queue = excluded.queue,
        timezone = excluded.timezone, enabled = excluded.enabled, next_fire_at = excluded.next_fire_at,
        updated_at = now()
  returning * into s;
  return s;
end;
$$;

-- drop_schedule removes schedule name; raises P0002 if there is none.
create or replace function pgrun.drop_schedule(name text)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
begin
  delete from pgrun.schedules s where s.name = drop_schedule.name;
  if not found then
    raise exception 'schedule % does not exist', coalesce(quote_literal(name), 'NULL')
      using errcode = 'P0002', hint = 'List them with: SELECT name, cron, next_fire_at FROM pgrun.schedules;';
  end if;
end;
$$;

-- pause_schedule stops schedule name from firing and keeps everything else (cron,
-- kind, args, queue, time zone, last fire); pausing a paused schedule changes
-- nothing. Returns the schedule; raises P0002 if there is none.
create or replace function pgrun.pause_schedule(name text)
returns pgrun.schedules
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  s pgrun.schedules;
begin
  update pgrun.schedules x
  set enabled = false,
      updated_at = case when x.enabled then now() else x.updated_at end
  where x.name = pause_schedule.name
  returning x.* into s;
  if not found then
    raise exception 'schedule % does not exist', coalesce(quote_literal(name), 'NULL')
      using errcode = 'P0002', hint = 'List them with: SELECT name, cron, enabled, next_fire_at FROM pgrun.schedules;';
  end if;
  return s;
end;
$$;

-- resume_schedule lets paused schedule name fire again from its next slot after
-- pgrun.clock(): the slots missed while it was paused do not fire, not even once.
-- Resuming a schedule that is not paused changes nothing (a slot already due still
-- fires). Returns the schedule; raises P0002 if there is none.
create or replace function pgrun.resume_schedule(name text)
returns pgrun.schedules
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  s pgrun.schedules;
begin
  select * into s from pgrun.schedules x where x.name = resume_schedule.name for update;
  if not found then
    raise exception 'schedule % does not exist', coalesce(quote_literal(name), 'NULL')
      using errcode = 'P0002', hint = 'List them with: SELECT name, cron, enabled, next_fire_at FROM pgrun.schedules;';
  end if;
  if s.enabled then
    return s;
  end if;
  update pgrun.schedules x
  set enabled = true, next_fire_at = pgrun.cron_next(s.cron, pgrun.clock(), s.timezone), updated_at = now()
  where x.name = s.name
  returning x.* into s;
  return s;
end;
$$;

-- fire_schedules enqueues one job for each enabled schedule that is due and moves its
-- next fire time past now: after downtime the missed slots fire once, not as a storm.
-- Rows are locked (SKIP LOCKED) and maintain() is serialised, so a slot fires once.
-- Returns how many fired.
create or replace function pgrun.fire_schedules(batch integer default 100)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now  timestamptz := pgrun.clock();
  s      pgrun.schedules;
  j      pgrun.jobs;
  fired  integer := 0;
begin
  for s in
    select * from pgrun.schedules
    where enabled and next_fire_at <= v_now
    order by next_fire_at
    limit batch
    for update skip locked
  loop
    j := pgrun.enqueue_job(s.kind, s.args, queue => s.queue,
      unique_key => format('schedule:%s:%s', s.name, extract(epoch from s.next_fire_at)::bigint),
      meta => jsonb_build_object('schedule', s.name, 'slot', s.next_fire_at));
    update pgrun.schedules
    set last_fire_at = s.next_fire_at, last_job_id = j.id,
        next_fire_at = pgrun.cron_next(s.cron, v_now, s.timezone)
    where name = s.name;
    fired := fired + 1;
  end loop;
  return fired;
end;
$$;
