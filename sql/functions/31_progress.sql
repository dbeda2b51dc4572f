-- 31_progress.sql: what a running handler reports while it works: progress, beats (signs
-- of life for the stall rule) and events for the audit log.

-- set_progress sets a job's progress (current of total; total NULL keeps the old
-- total) and counts as a sign of life. worker and claim_id are the claim's (the
-- worker id it was claimed with and the token claim_jobs returned): required of every
-- session but the engine's (check_claim), and the job must be running or waiting
-- under them. Returns false, changing nothing, if it is not.
create or replace function pgrun.set_progress(
  id        bigint,
  current   bigint,
  total     bigint default null,
  worker    text default null,
  claim_id  uuid default null
)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
begin
  perform pgrun.check_claim(worker, claim_id is not null);
  if current is null or current < 0 or (total is not null and total < 0) then
    raise exception 'progress % of % is not valid', coalesce(current::text, 'NULL'), coalesce(total::text, 'NULL')
      using errcode = '22023', hint = 'Pass current >= 0 and total >= 0 (or NULL to keep the total).';
  end if;
  update pgrun.jobs j
  set progress_current = current, progress_total = coalesce(total, j.progress_total),
      heartbeat_at = pgrun.clock()
  where j.id = set_progress.id and j.status in ('running', 'waiting')
    and (set_progress.worker is null or j.claimed_by = set_progress.worker)
    and (set_progress.claim_id is null or j.claim_id = set_progress.claim_id);
  return found;
end;
$$;

-- beat records a sign of life from running jobs (the stall rule in maintain() spares
-- a job past its timeout that beat recently): ids, each running under worker and
-- under one of claim_ids (the tokens of the claims; both required of every session
-- but the engine's, check_claim). At most 10,000 ids a call. Returns the ids that
-- are running under those claims.
create or replace function pgrun.beat(
  ids        bigint[],
  worker     text default null,
  claim_ids  uuid[] default null
)
returns setof bigint
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
begin
  perform pgrun.check_claim(worker, claim_ids is not null);
  if cardinality(ids) > 10000 or cardinality(claim_ids) > 10000 then
    raise exception 'beat got % ids and % claim ids, over the limit of 10000', cardinality(ids), cardinality(claim_ids)
      using errcode = '22023', hint = 'Send at most 10000 beats per call.';
  end if;
  return query
  update pgrun.jobs j set heartbeat_at = pgrun.clock()
  where j.id = any (ids) and j.status = 'running'
    and (beat.worker is null or j.claimed_by = beat.worker)
    and (beat.claim_ids is null or j.claim_id = any (beat.claim_ids))
  returning j.id;
end;
$$;

-- emit appends a handler or operator event to a job's audit log and, if the job is
-- running, counts as a sign of life. level is debug, info, warn (also spelled
-- warning, stored as warn) or error; fields is a JSON object of at most
-- max_json_bytes(). Two fields report progress as well: _progress_current and
-- _progress_total (non-negative integers) set progress_current and progress_total of
-- a running job as set_progress does (a missing one keeps its value), in the same
-- UPDATE that records the sign of life; they stay in the stored fields. Returns the
-- event id; raises P0002 for an unknown job and 22023 for a bad event name, level,
-- fields or progress value, before anything is written. worker and claim_id are the
-- claim's, required of every session but the engine's (check_claim): a handler's
-- event is appended only while its job is running under that claim, and NULL is
-- returned, with nothing written, once it is not (a stale handler, a lost lease).
-- The engine's session may leave both NULL and annotate any job.
create or replace function pgrun.emit(
  job_id    bigint,
  event     text,
  fields    jsonb default '{}',
  level     text default 'info',
  message   text default null,
  worker    text default null,
  claim_id  uuid default null
)
returns bigint
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_level    text := case when emit.level = 'warning' then 'warn' else emit.level end;
  v_current  bigint;
  v_total    bigint;
  k          text;
  v          jsonb;
  n          numeric;
begin
  perform pgrun.check_claim(worker, claim_id is not null);
  if event is null or event !~ '^[A-Za-z][A-Za-z0-9_.:-]{0,127}$' then
    raise exception 'event name % is not valid', coalesce(quote_literal(event), 'NULL')
      using errcode = '22023', hint = 'Use a dotted name such as ''batch.done'' (letters, digits, _ . : -).';
  end if;
  if v_level is null or v_level not in ('debug', 'info', 'warn', 'error') then
    raise exception 'event level % is not valid', coalesce(quote_literal(level), 'NULL')
      using errcode = '22023', hint = 'Use debug, info, warn (or warning) or error.';
  end if;
  if fields is not null and jsonb_typeof(fields) <> 'object' then
    raise exception 'event fields must be a JSON object, got %', jsonb_typeof(fields)
      using errcode = '22023', hint = 'Pass an object such as {"rows": 10}.';
  end if;
  perform pgrun.check_json_size('event fields', fields);
  foreach k in array array['_progress_current', '_progress_total'] loop
    continue when fields is null or not fields ? k;
    v := fields -> k;
    n := case when jsonb_typeof(v) = 'number' then (v #>> '{}')::numeric end;
    if n is null or n < 0 or n <> trunc(n) or n > 9223372036854775807 then
      raise exception 'event field % is %, not a non-negative integer', k, v
        using errcode = '22023',
              hint = 'Report progress as {"_progress_current": 3, "_progress_total": 10}; leave a key out to keep its value.';
    end if;
    if k = '_progress_current' then
      v_current := n;
    else
      v_total := n;
    end if;
  end loop;
  update pgrun.jobs j
  set heartbeat_at = pgrun.clock(),
      progress_current = coalesce(v_current, j.progress_current),
      progress_total = coalesce(v_total, j.progress_total)
  where j.id = emit.job_id and j.status = 'running'
    and (emit.worker is null or j.claimed_by = emit.worker)
    and (emit.claim_id is null or j.claim_id = emit.claim_id);
  if not found then
    perform 1 from pgrun.jobs j where j.id = emit.job_id;
    if not found then
      perform pgrun.job_not_found(emit.job_id);
    end if;
    if worker is not null or claim_id is not null then
      return null; -- not running under that claim: a stale handler's event
    end if;
  end if;
  return pgrun.add_event(job_id, event, v_level, message, fields);
end;
$$;
