-- 35_durable.sql: durable execution (docs/durable.md). A job is the unit of
-- durability; what its handler has done is recorded by step name in job_steps, under
-- the job's current claim, and read back on every later attempt: a recorded step
-- returns its stored result and is not run again. A handler that parks (a durable
-- sleep, an await of an event or of another job) ends its claim without spending an
-- attempt and holds no slot: a sleep is queued with a later run_at, an await is
-- waiting with a row in job_waits that says for what and until when. Resuming runs
-- the handler from the top. Every call here checks the claim (check_claim) and is
-- the same for a worker in any language; the Go helpers (runner/durable.go) are thin
-- calls of them.
--
-- Positions: a handler's durable calls (steps, sleeps, awaits, spawns) are numbered
-- from 0 in the order it makes them. A call whose name was recorded at another
-- position, or whose position holds another name, is non-determinism (the code
-- changed under a parked job): the attempt fails with class step_mismatch, naming
-- both, instead of feeding one step's result to another.
--
-- Each call returns a status the worker acts on: 'done' (the value is there: go on),
-- 'parked' (the job left its claim: return at once, report nothing), 'timeout' (an
-- await's time ran out: the handler decides), 'mismatch' (the attempt was failed
-- here: report nothing) or 'stale' (the claim is no longer the job's: stop, report
-- nothing).

-- Bounds of durable execution (input_bounds lists them): step names and event names
-- of 1 to 200 characters, 10,000 recorded calls per job, results and payloads of at
-- most max_json_bytes(), waits of at most max_wait().
create or replace function pgrun.max_steps()
returns integer
language sql
immutable
parallel safe
return 10000;

-- check_step raises 22023 unless name is a step name of 1 to 200 characters and
-- position a position below max_steps().
create or replace function pgrun.check_step(name text, pos integer)
returns void
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if name is null or name = '' or length(name) > 200 then
    raise exception 'step name % is not valid', coalesce(quote_literal(left(name, 40)), 'NULL')
      using errcode = '22023', hint = 'Name each step of a handler with 1 to 200 characters, unique within the job.';
  end if;
  if pos is null or pos < 0 or pos >= pgrun.max_steps() then
    raise exception 'step position % is out of bounds', coalesce(pos::text, 'NULL')
      using errcode = '22023',
            hint = format('A job records at most %s steps, numbered from 0 in the order the handler makes them.', pgrun.max_steps());
  end if;
end;
$$;

-- check_event_name raises 22023 unless name is an event name of 1 to 200 characters.
create or replace function pgrun.check_event_name(name text)
returns void
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if name is null or name = '' or length(name) > 200 then
    raise exception 'event name % is not valid', coalesce(quote_literal(left(name, 40)), 'NULL')
      using errcode = '22023', hint = 'Use 1 to 200 characters, such as ''payment:42''.';
  end if;
end;
$$;

-- held_job returns job id if it is running under worker and claim_id, after
-- check_claim; NULL (a row of NULLs) if it is not: the claim is stale. lock 'update'
-- locks the row (FOR UPDATE) for a call that then changes the job (a park, a spawn),
-- keeping the claim the job's until the transaction ends. 'key share' keeps the row
-- from being deleted and blocks neither renewals nor reports: step_put's lock, which a
-- handler's own transaction (StepTx) may hold for a while. 'none' (a call that only
-- reads) takes no lock: a read-only transaction commits without a WAL flush, which is
-- most of what a round trip costs.
create or replace function pgrun.held_job(id bigint, worker text, claim_id uuid, lock text default 'update')
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  j pgrun.jobs;
begin
  perform pgrun.check_claim(worker, claim_id is not null);
  if lock = 'update' then
    select * into j from pgrun.jobs x
    where x.id = held_job.id and x.status = 'running'
      and (held_job.worker is null or x.claimed_by = held_job.worker)
      and (held_job.claim_id is null or x.claim_id = held_job.claim_id)
    for update;
  elsif lock = 'key share' then
    select * into j from pgrun.jobs x
    where x.id = held_job.id and x.status = 'running'
      and (held_job.worker is null or x.claimed_by = held_job.worker)
      and (held_job.claim_id is null or x.claim_id = held_job.claim_id)
    for key share;
  else
    select * into j from pgrun.jobs x
    where x.id = held_job.id and x.status = 'running'
      and (held_job.worker is null or x.claimed_by = held_job.worker)
      and (held_job.claim_id is null or x.claim_id = held_job.claim_id);
  end if;
  return j;
end;
$$;

-- step_mismatch fails attempt j (class step_mismatch, retried as any error while
-- attempts remain: a deploy may fix the code) and returns its message: call name at
-- position does not match what the job recorded.
create or replace function pgrun.step_mismatch(j pgrun.jobs, name text, pos integer)
returns text
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_at    text := (select s.name from pgrun.job_steps s where s.job_id = j.id and s.position = step_mismatch.pos);
  v_pos   integer := (select s.position from pgrun.job_steps s where s.job_id = j.id and s.name = step_mismatch.name);
  v_msg   text;
begin
  v_msg := format('non-determinism: the handler asked for step %s at position %s, but the job recorded %s',
                  quote_literal(name), pos,
                  concat_ws(' and ',
                    case when v_at is not null then format('step %s at position %s', quote_literal(v_at), pos) end,
                    case when v_pos is not null then format('step %s at position %s', quote_literal(name), v_pos) end));
  perform pgrun.fail_job(j.id, j.attempt, jsonb_build_object('class', 'step_mismatch', 'message', v_msg),
                         null, j.claimed_by, j.claim_id);
  return v_msg;
end;
$$;

-- recorded_step looks name up among job j's steps for a call at position of kind:
-- 'found' with the step (same name, position and kind), 'none' when neither the name
-- nor the position is taken, or 'mismatch' (after failing the attempt: step_mismatch).
create or replace function pgrun.recorded_step(j pgrun.jobs, name text, pos integer, kind text,
                                               out status text, out result jsonb)
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  s pgrun.job_steps;
begin
  select * into s from pgrun.job_steps x where x.job_id = j.id and x.name = recorded_step.name;
  if found and s.position = recorded_step.pos and s.kind = recorded_step.kind then
    status := 'found';
    result := s.result;
    return;
  end if;
  if not found and not exists (select 1 from pgrun.job_steps x
                               where x.job_id = j.id and x.position = recorded_step.pos) then
    status := 'none';
    return;
  end if;
  status := 'mismatch';
  result := jsonb_build_object('message', pgrun.step_mismatch(j, name, pos));
end;
$$;

-- record_step writes step name of job j at position: its kind and result.
create or replace function pgrun.record_step(j pgrun.jobs, name text, pos integer, kind text, result jsonb)
returns void
language sql
set search_path = pgrun, pg_catalog
as $$
  insert into pgrun.job_steps (job_id, name, position, kind, attempt, claim_id, result, recorded_at)
  values (j.id, name, pos, kind, j.attempt, j.claim_id, result, pgrun.clock())
$$;

-- step_get reads step name (at position) of job id for the handler holding its claim
-- (worker, claim_id): status 'done' with the recorded result, 'none' (not recorded:
-- run it, then step_put), 'mismatch' (the attempt was failed: the message is in
-- result) or 'stale' (the claim is not the job's).
create or replace function pgrun.step_get(
  id        bigint,
  name      text,
  pos  integer,
  worker    text default null,
  claim_id  uuid default null,
  out status text,
  out result jsonb
)
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  j pgrun.jobs;
  r record;
begin
  perform pgrun.check_step(name, pos);
  j := pgrun.held_job(id, worker, claim_id, lock => 'none');
  if j.id is null then
    status := 'stale';
    return;
  end if;
  r := pgrun.recorded_step(j, name, pos, 'step');
  status := case r.status when 'found' then 'done' else r.status end;
  result := r.result;
end;
$$;

-- recorded_steps lists what job id has recorded (name, position, kind, result), for
-- the handler holding its claim (worker, claim_id): a resumed handler reads them in
-- one round trip and then skips what is recorded without asking again, calling
-- step_get only where its order does not match (where the attempt is failed).
-- Nothing for a stale claim.
create or replace function pgrun.recorded_steps(id bigint, worker text default null, claim_id uuid default null)
returns table (name text, pos integer, kind text, result jsonb)
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  j pgrun.jobs;
begin
  j := pgrun.held_job(id, worker, claim_id, lock => 'none');
  if j.id is null then
    return;
  end if;
  return query select s.name, s.position, s.kind, s.result from pgrun.job_steps s
               where s.job_id = j.id order by s.position;
end;
$$;

-- step_put records step name's result (at position) for job id under its claim, in
-- the caller's transaction (a handler's own transaction records the step with its
-- writes: exactly once with them). Its lock on the job (key share) blocks neither the
-- runner's lease renewals nor reports while that transaction is open; a claim lost
-- meanwhile still records (the step did run), and the job's next claim reads it. Returns 'done' (recorded, or recorded already
-- under that name: the first record stands), 'stale' (the claim is not the job's:
-- nothing recorded) or 'mismatch'. result is at most max_json_bytes() (22023).
create or replace function pgrun.step_put(
  id        bigint,
  name      text,
  pos  integer,
  result    jsonb,
  worker    text default null,
  claim_id  uuid default null
)
returns text
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  j pgrun.jobs;
  r record;
begin
  perform pgrun.check_step(name, pos);
  perform pgrun.check_json_size('step result', result);
  j := pgrun.held_job(id, worker, claim_id, lock => 'key share');
  if j.id is null then
    return 'stale';
  end if;
  r := pgrun.recorded_step(j, name, pos, 'step');
  if r.status = 'none' then
    -- A claim that lost the job while its step ran (its lease ran out, another claim
    -- runs the job now) may race the new claim here: the first record stands.
    insert into pgrun.job_steps (job_id, name, position, kind, attempt, claim_id, result, recorded_at)
    values (j.id, name, pos, 'step', j.attempt, j.claim_id, result, pgrun.clock())
    on conflict do nothing;
    if found then
      return 'done';
    end if;
    r := pgrun.recorded_step(j, name, pos, 'step');
  end if;
  return case r.status when 'found' then 'done' else r.status end;
end;
$$;

-- park_job ends claim j without spending an attempt: queued, due at run_at (a sleep),
-- or waiting (an await; run_at NULL), with an event saying why. Returns 'parked'.
create or replace function pgrun.park_job(j pgrun.jobs, run_at timestamptz, event text, message text, fields jsonb)
returns text
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  update pgrun.jobs x
  set status = case when park_job.run_at is null then 'waiting'::pgrun.job_status else 'queued' end,
      run_at = coalesce(park_job.run_at, x.run_at), lease_expires_at = null
  where x.id = j.id and x.status = 'running' and x.claim_id is not distinct from j.claim_id;
  perform pgrun.add_event(j.id, event, 'info', message, fields || jsonb_build_object('attempt', j.attempt));
  return 'parked';
end;
$$;

-- sleep_job is a durable sleep named name (at position) of job id until until: the
-- first call records the sleep's end; while it is ahead the job goes back to its queue
-- due then ('parked', no attempt spent, no slot held), and once it has passed the
-- call returns 'done' (the sleep is not repeated). until is a finite time at most
-- max_wait() ahead.
create or replace function pgrun.sleep_job(
  id        bigint,
  name      text,
  pos  integer,
  until     timestamptz,
  worker    text default null,
  claim_id  uuid default null
)
returns text
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now  timestamptz := pgrun.clock();
  j      pgrun.jobs;
  r      record;
  v_end  timestamptz := until;
begin
  perform pgrun.check_step(name, pos);
  if until is null or not isfinite(until) or until > v_now + pgrun.max_wait() then
    raise exception 'sleep until % is out of bounds', coalesce(until::text, 'NULL')
      using errcode = '22023', hint = format('Sleep until a time at most %s ahead.', pgrun.max_wait());
  end if;
  j := pgrun.held_job(id, worker, claim_id, lock => 'none');
  if j.id is null then
    return 'stale';
  end if;
  r := pgrun.recorded_step(j, name, pos, 'sleep');
  if r.status = 'found' and v_now >= (r.result ->> 'until')::timestamptz then
    return 'done'; -- the resumed sleep: read only
  end if;
  j := pgrun.held_job(id, worker, claim_id);
  if j.id is null then
    return 'stale';
  end if;
  if r.status = 'mismatch' then
    return 'mismatch';
  elsif r.status = 'found' then
    v_end := (r.result ->> 'until')::timestamptz;
  else
    perform pgrun.record_step(j, name, pos, 'sleep', jsonb_build_object('until', until));
  end if;
  if v_now >= v_end then
    return 'done';
  end if;
  return pgrun.park_job(j, v_end, 'job.sleeping', format('sleeping (step %s) until %s', name, v_end),
                        jsonb_build_object('step', name, 'until', v_end));
end;
$$;

-- event_lock takes the transaction's lock on event name of tenant: emit_event and
-- await_event take it first, before any job row, so that an emit and an await of one
-- name are serialized and no wake-up is lost between them.
create or replace function pgrun.event_lock(tenant text, name text)
returns void
language sql
set search_path = pgrun, pg_catalog
as $$
  select pg_advisory_xact_lock(hashtextextended('pgrun.event:' || coalesce(tenant, '') || ':' || name, 0))
$$;

-- wait_timed_out reports whether job j's wait of step name ran out (wake_waits
-- marked it).
create or replace function pgrun.wait_timed_out(j pgrun.jobs, name text)
returns boolean
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select coalesce((select w.timed_out from pgrun.job_waits w where w.job_id = j.id and w.step = name), false)
$$;

-- answer_wait records the answer of job j's await, step name at pos of kind (event
-- or job), and drops its wait.
create or replace function pgrun.answer_wait(j pgrun.jobs, name text, pos integer, kind text, result jsonb)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.record_step(j, name, pos, kind, result);
  delete from pgrun.job_waits w where w.job_id = j.id and w.step = name;
end;
$$;

-- park_await parks job j (waiting) on step name until until, for event or for job
-- awaited (the other NULL), with message for its event. Returns 'parked'.
create or replace function pgrun.park_await(j pgrun.jobs, name text, event text, awaited bigint,
                                            until timestamptz, message text)
returns text
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  insert into pgrun.job_waits (job_id, step, event, awaited_job, tenant, until, created_at)
  values (j.id, name, event, awaited, coalesce(j.tenant, ''), until, pgrun.clock())
  on conflict (job_id, step) where job_id is not null
  do update set event = excluded.event, awaited_job = excluded.awaited_job, until = excluded.until,
                timed_out = false, created_at = excluded.created_at;
  return pgrun.park_job(j, null, 'job.awaiting', message,
                        jsonb_strip_nulls(jsonb_build_object('step', name, 'event', event, 'job', awaited, 'until', until)));
end;
$$;

-- notify_queues wakes the claimers of each of queues (NULL: none).
create or replace function pgrun.notify_queues(queues text[])
returns void
language sql
set search_path = pgrun, pg_catalog
as $$
  select pg_notify('pgrun_jobs', q) from unnest(coalesce(queues, '{}')) q
$$;

-- await_event waits, as step name (at position) of job id, for event (of the job's
-- tenant) for at most timeout: 'done' with the payload when it was emitted (before
-- the await or since), 'timeout' once the time ran out, or 'parked' (the job waits,
-- holding no slot, and is queued again by the emit or by maintain() at the timeout).
-- The outcome is recorded as the step: a later attempt gets the same answer.
create or replace function pgrun.await_event(
  id        bigint,
  name      text,
  pos  integer,
  event     text,
  timeout   interval default null,
  worker    text default null,
  claim_id  uuid default null,
  out status text,
  out payload jsonb
)
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now  timestamptz := pgrun.clock();
  j      pgrun.jobs;
  r      record;
  e      pgrun.events;
begin
  perform pgrun.check_step(name, pos);
  perform pgrun.check_event_name(event);
  perform pgrun.check_interval('timeout', timeout, pgrun.max_wait());
  -- The answer recorded, read without a lock; then, to decide, the event's lock
  -- first and the job's after it (emit_event takes them in the same order).
  j := pgrun.held_job(id, worker, claim_id, lock => 'none');
  if j.id is null then
    status := 'stale';
    return;
  end if;
  r := pgrun.recorded_step(j, name, pos, 'event');
  if r.status = 'mismatch' then
    status := 'mismatch';
    payload := r.result;
    return;
  elsif r.status = 'found' then
    status := case when r.result ? 'timeout' then 'timeout' else 'done' end;
    payload := r.result -> 'payload';
    return;
  end if;
  perform pgrun.event_lock(j.tenant, event);
  j := pgrun.held_job(id, worker, claim_id);
  if j.id is null then
    status := 'stale';
    return;
  end if;
  if pgrun.wait_timed_out(j, name) then
    perform pgrun.answer_wait(j, name, pos, 'event', jsonb_build_object('event', event, 'timeout', true));
    status := 'timeout';
    return;
  end if;
  select * into e from pgrun.events x where x.tenant = coalesce(j.tenant, '') and x.name = event;
  if found then
    perform pgrun.answer_wait(j, name, pos, 'event', jsonb_build_object('event', event, 'payload', e.payload));
    status := 'done';
    payload := e.payload;
    return;
  end if;
  status := pgrun.park_await(j, name, event, null, v_now + coalesce(timeout, pgrun.max_wait()),
                             format('waiting (step %s) for event %s', name, event));
end;
$$;

-- emit_event records event name with payload, for the caller's tenant (none outside
-- the tenant mode), and queues again every job waiting for it. The first emit of a
-- name wins: a later one changes nothing and returns false. A job that awaits the
-- name later finds it at once. name is 1 to 200 characters, payload at most
-- max_json_bytes(). Any language calls it, in any transaction: the jobs wake when it
-- commits.
create or replace function pgrun.emit_event(name text, payload jsonb default null)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_tenant text := coalesce(pgrun.session_tenant(), '');
  v_queues text[];
begin
  perform pgrun.check_event_name(name);
  perform pgrun.check_json_size('event payload', payload);
  perform pgrun.event_lock(v_tenant, name);
  insert into pgrun.events (tenant, name, payload, emitted_at)
  values (v_tenant, emit_event.name, emit_event.payload, pgrun.clock())
  on conflict do nothing;
  if not found then
    return false;
  end if;
  with woken as (
    delete from pgrun.job_waits w
    where w.event = emit_event.name and w.tenant = v_tenant and not w.timed_out
    returning w.job_id
  ),
  queued as (
    update pgrun.jobs x set status = 'queued', run_at = pgrun.clock()
    from woken k where x.id = k.job_id and x.status = 'waiting'
    returning x.queue
  )
  select array_agg(distinct queued.queue) into v_queues from queued;
  perform pgrun.notify_queues(v_queues);
  return true;
end;
$$;

-- spawn_job enqueues spec (an enqueue_jobs object) once, as step name (at position)
-- of job id: the first call enqueues the child and records its id, in one
-- transaction; every later call (a retry, a resume) returns the recorded id. The
-- child belongs to the job's tenant. Returns status 'done' with the child's id, or
-- 'stale' / 'mismatch'.
create or replace function pgrun.spawn_job(
  id        bigint,
  name      text,
  pos  integer,
  spec      jsonb,
  worker    text default null,
  claim_id  uuid default null,
  out status text,
  out child bigint
)
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  j  pgrun.jobs;
  r  record;
begin
  perform pgrun.check_step(name, pos);
  if spec is null or jsonb_typeof(spec) <> 'object' or spec ? 'parent_id' then
    raise exception 'spawn spec must be a JSON object of enqueue_jobs without parent_id, got %', left(coalesce(spec::text, 'NULL'), 100)
      using errcode = '22023', hint = 'Pass {"kind": "...", "args": {...}}; await the child with await_job.';
  end if;
  j := pgrun.held_job(id, worker, claim_id, lock => 'none');
  if j.id is null then
    status := 'stale';
    return;
  end if;
  r := pgrun.recorded_step(j, name, pos, 'spawn');
  if r.status = 'found' then
    status := 'done';
    child := (r.result ->> 'id')::bigint;
    return;
  elsif r.status = 'mismatch' then
    status := 'mismatch';
    return;
  end if;
  j := pgrun.held_job(id, worker, claim_id); -- locked: the claim holds until the child and its record commit
  if j.id is null then
    status := 'stale';
    return;
  end if;
  select e.id into child from pgrun.enqueue_jobs(jsonb_build_array(spec)) e;
  if j.tenant is not null then
    update pgrun.jobs x set tenant = j.tenant where x.id = child;
  end if;
  perform pgrun.record_step(j, name, pos, 'spawn', jsonb_build_object('id', child));
  status := 'done';
end;
$$;

-- job_outcome is what await_job records and returns of a finished job: its id,
-- status, result and error.
create or replace function pgrun.job_outcome(x pgrun.jobs)
returns jsonb
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select jsonb_build_object('id', x.id, 'status', x.status, 'result', x.result, 'error', x.error)
$$;

-- await_job waits, as step name (at position) of job id, for job awaited to finish,
-- for at most timeout: 'done' with its outcome (job_outcome) once it has finished,
-- 'timeout' once the time ran out, or 'parked' (the job waits, holding no slot, and
-- is queued again when awaited finishes or by maintain() at the timeout). The awaited
-- job's row is locked while the await decides, so that its finish cannot slip between
-- the look and the wait. Raises P0002 for a job that does not exist.
create or replace function pgrun.await_job(
  id        bigint,
  name      text,
  pos  integer,
  awaited   bigint,
  timeout   interval default null,
  worker    text default null,
  claim_id  uuid default null,
  out status text,
  out outcome jsonb
)
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now  timestamptz := pgrun.clock();
  j      pgrun.jobs;
  a      pgrun.jobs;
  r      record;
begin
  perform pgrun.check_step(name, pos);
  perform pgrun.check_interval('timeout', timeout, pgrun.max_wait());
  j := pgrun.held_job(id, worker, claim_id, lock => 'none');
  if j.id is null then
    status := 'stale';
    return;
  end if;
  r := pgrun.recorded_step(j, name, pos, 'job');
  if r.status = 'mismatch' then
    status := 'mismatch';
    outcome := r.result;
    return;
  elsif r.status = 'found' then
    status := case when r.result ? 'timeout' then 'timeout' else 'done' end;
    outcome := r.result;
    return;
  end if;
  j := pgrun.held_job(id, worker, claim_id);
  if j.id is null then
    status := 'stale';
    return;
  end if;
  select * into a from pgrun.jobs x where x.id = awaited for share;
  if not found or not pgrun.may_touch(a.tenant) or (j.tenant is distinct from a.tenant and j.tenant is not null) then
    perform pgrun.job_not_found(awaited);
  end if;
  if pgrun.wait_timed_out(j, name) then
    outcome := jsonb_build_object('timeout', true, 'id', awaited);
    perform pgrun.answer_wait(j, name, pos, 'job', outcome);
    status := 'timeout';
    return;
  end if;
  if a.status in ('succeeded', 'failed', 'cancelled', 'skipped') then
    outcome := pgrun.job_outcome(a);
    perform pgrun.answer_wait(j, name, pos, 'job', outcome);
    status := 'done';
    return;
  end if;
  status := pgrun.park_await(j, name, null, awaited, v_now + coalesce(timeout, pgrun.max_wait()),
                             format('waiting (step %s) for job %s', name, awaited));
end;
$$;

-- watch_job is Client.Wait's registration: it returns job id's status if the job has
-- finished; otherwise it records that a client waits for it (for at most a day) and
-- returns NULL, and the job's finish is announced on channel pgrun_done (payload: the
-- id). LISTEN pgrun_done before calling it. The job's row is locked while it decides,
-- so that the finish cannot slip between the look and the registration. Raises P0002
-- for a job the caller cannot see.
create or replace function pgrun.watch_job(id bigint)
returns text
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  a pgrun.jobs;
begin
  select * into a from pgrun.jobs x where x.id = watch_job.id for share;
  if not found or not pgrun.may_touch(a.tenant) then
    perform pgrun.job_not_found(watch_job.id);
  end if;
  if a.status in ('succeeded', 'failed', 'cancelled', 'skipped') then
    return a.status::text;
  end if;
  insert into pgrun.job_waits (awaited_job, tenant, until, created_at)
  values (a.id, coalesce(a.tenant, ''), pgrun.clock() + interval '1 day', pgrun.clock());
  return null;
end;
$$;

-- awaits_jobs reports whether any job or client waits for a job to finish (a row of
-- job_waits with awaited_job): jobs_dispatch asks it on every UPDATE of pgrun.jobs. It
-- reads the partial index whatever the statistics say: planned on a table never
-- analyzed (autovacuum off), the look scanned every wait, 3.5 ms a statement beside
-- 50,000 parked awaits of events, which cost a burn-down of the same queue a third of
-- its rate (docs/benchmarks.md, "Durable execution"). wake_awaiters is pinned the same
-- way; the others read job_waits by equality on an indexed key (a job and its step,
-- an event), which the planner takes by index without statistics, and those that run
-- as the engine carry no setting but their search_path.
create or replace function pgrun.awaits_jobs()
returns boolean
language plpgsql
stable
set search_path = pgrun, pg_catalog
set enable_seqscan = off
as $$
begin
  return exists (select 1 from pgrun.job_waits w where w.awaited_job is not null);
end;
$$;

-- awaited_among returns those of ids that a job or client waits for.
create or replace function pgrun.awaited_among(ids bigint[])
returns bigint[]
language plpgsql
stable
set search_path = pgrun, pg_catalog
set enable_seqscan = off
as $$
begin
  return array(select distinct w.awaited_job from pgrun.job_waits w where w.awaited_job = any (ids));
end;
$$;

-- wake_awaiters answers the waits for jobs ids (finished by the statement calling
-- it, jobs_dispatch): jobs awaiting one of them are queued again, and clients
-- watching one are told on pgrun_done (payload: the id). Their rows go. Returns how
-- many waits it answered.
create or replace function pgrun.wake_awaiters(ids bigint[])
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
-- job_waits by its indexes whatever the statistics say (awaits_jobs says why)
set enable_seqscan = off
as $$
declare
  n        integer;
  v_queues text[];
  v_done   bigint[];
  d        bigint;
begin
  with answered as (
    delete from pgrun.job_waits w
    using pgrun.jobs a
    where w.awaited_job = any (ids) and a.id = w.awaited_job and not w.timed_out
      and a.status in ('succeeded', 'failed', 'cancelled', 'skipped')
    returning w.job_id, w.awaited_job
  ),
  queued as (
    update pgrun.jobs x set status = 'queued', run_at = pgrun.clock()
    from answered k where x.id = k.job_id and x.status = 'waiting'
    returning x.queue
  )
  select (select count(*) from answered),
         (select array_agg(distinct queued.queue) from queued),
         (select array_agg(distinct k.awaited_job) from answered k where k.job_id is null)
  into n, v_queues, v_done;
  perform pgrun.notify_queues(v_queues);
  foreach d in array coalesce(v_done, '{}') loop
    perform pg_notify('pgrun_done', d::text);
  end loop;
  return n;
end;
$$;

-- wake_waits is the maintain() step that ends waits whose time ran out, up to batch
-- of them: an awaiting job is queued again and its wait marked timed out (the await,
-- resumed, returns 'timeout'); a client's watch is dropped. Returns how many.
create or replace function pgrun.wake_waits(batch integer default 1000)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now    timestamptz := pgrun.clock();
  n        integer;
  v_queues text[];
begin
  with due as (
    select w.id from pgrun.job_waits w
    where not w.timed_out and w.until <= v_now
    order by w.until
    limit batch
    for update skip locked
  ),
  dropped as (
    delete from pgrun.job_waits w using due d where w.id = d.id and w.job_id is null
    returning w.id
  ),
  marked as (
    update pgrun.job_waits w set timed_out = true
    from due d where w.id = d.id and w.job_id is not null
    returning w.job_id
  ),
  queued as (
    update pgrun.jobs x set status = 'queued', run_at = v_now
    from marked m where x.id = m.job_id and x.status = 'waiting'
    returning x.queue
  )
  select (select count(*) from dropped) + (select count(*) from marked),
         (select array_agg(distinct queued.queue) from queued)
  into n, v_queues;
  perform pgrun.notify_queues(v_queues);
  return n;
end;
$$;
