-- progress.sql: what a running handler reports while it works: progress, beats (signs
-- of life for the stall rule) and events for the audit log.

-- set_progress sets a job's progress (current of total; total NULL keeps the old
-- total) and counts as a sign of life. Returns false if the job is not running or
-- waiting.
create or replace function pgrun.set_progress(
  id       bigint,
  current  bigint,
  total    bigint default null
)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
begin
  if current is null or current < 0 or (total is not null and total < 0) then
    raise exception 'progress % of % is not valid', coalesce(current::text, 'NULL'), coalesce(total::text, 'NULL')
      using errcode = '22023', hint = 'Pass current >= 0 and total >= 0 (or NULL to keep the total).';
  end if;
  update pgrun.jobs j
  set progress_current = current, progress_total = coalesce(total, j.progress_total),
      heartbeat_at = pgrun.clock()
  where j.id = set_progress.id and j.status in ('running', 'waiting');
  return found;
end;
$$;

-- beat records a sign of life from running jobs (the stall rule in maintain() spares
-- a job past its timeout that beat recently). Returns the ids that are running.
create or replace function pgrun.beat(ids bigint[])
returns setof bigint
language sql
set search_path = pgrun, pg_catalog
as $$
  update pgrun.jobs j set heartbeat_at = pgrun.clock()
  where j.id = any (ids) and j.status = 'running'
  returning j.id
$$;

-- emit appends a handler or operator event to a job's audit log and, if the job is
-- running, counts as a sign of life. Returns the event id; raises P0002 for an
-- unknown job and 22023 for a bad event name or level.
create or replace function pgrun.emit(
  job_id   bigint,
  event    text,
  fields   jsonb default '{}',
  level    text default 'info',
  message  text default null
)
returns bigint
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
begin
  if event is null or event !~ '^[A-Za-z][A-Za-z0-9_.:-]{0,127}$' then
    raise exception 'event name % is not valid', coalesce(quote_literal(event), 'NULL')
      using errcode = '22023', hint = 'Use a dotted name such as ''batch.done'' (letters, digits, _ . : -).';
  end if;
  if level is null or level not in ('debug', 'info', 'warn', 'error') then
    raise exception 'event level % is not valid', coalesce(quote_literal(level), 'NULL')
      using errcode = '22023', hint = 'Use debug, info, warn or error.';
  end if;
  if fields is not null and jsonb_typeof(fields) <> 'object' then
    raise exception 'event fields must be a JSON object, got %', jsonb_typeof(fields)
      using errcode = '22023', hint = 'Pass an object such as {"rows": 10}.';
  end if;
  update pgrun.jobs j set heartbeat_at = pgrun.clock()
  where j.id = emit.job_id and j.status = 'running';
  if not found then
    perform 1 from pgrun.jobs j where j.id = emit.job_id;
    if not found then
      perform pgrun.job_not_found(emit.job_id);
    end if;
  end if;
  return pgrun.add_event(job_id, event, level, message, fields);
end;
$$;
