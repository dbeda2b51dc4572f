-- enqueue.sql: every way a job enters the engine. A plain INSERT INTO pgrun.jobs is
-- an enqueue too: the BEFORE trigger validates it and fills defaults, the AFTER
-- statement trigger registers the queue and sends the wake-up NOTIFY inside the
-- writer's transaction (a rolled-back enqueue wakes nobody).

-- jobs_before_insert validates a new job row and resets the fields only the engine
-- may set. Raises 22023 naming the bad value; nothing is written.
create or replace function pgrun.jobs_before_insert()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.check_kind(new.kind);
  new.queue := pgrun.check_queue_name(coalesce(new.queue, 'default'));
  new.args := coalesce(new.args, '{}');
  if jsonb_typeof(new.args) <> 'object' then
    raise exception 'args of job kind % must be a JSON object, got %', new.kind, jsonb_typeof(new.args)
      using errcode = '22023',
            hint = 'Wrap the value in an object, for example {"value": ...}.';
  end if;
  new.priority := coalesce(new.priority, 0);
  if new.priority < 0 then
    raise exception 'priority % is not valid', new.priority
      using errcode = '22023',
            hint = 'Use 0 (the default, most urgent) up to 32767; lower runs first.';
  end if;
  -- Defaults: the queue's, then the engine's. The timeout is the job's wall-clock
  -- backstop: NULL takes the queue's default_timeout, then default_timeout() (one
  -- hour); an explicit 0 means none and is stored as NULL.
  select coalesce(new.max_attempts, q.default_max_attempts, 25),
         coalesce(new.timeout, q.default_timeout, pgrun.default_timeout())
  into new.max_attempts, new.timeout
  from (select 1) one left join pgrun.queues q on q.name = new.queue;
  if new.max_attempts < 1 then
    raise exception 'max_attempts % is not valid', new.max_attempts
      using errcode = '22023',
            hint = 'Use 1 or more; 1 means no retries.';
  end if;
  if new.timeout < interval '0' then
    raise exception 'timeout % is negative', new.timeout
      using errcode = '22023',
            hint = 'Pass a positive interval such as ''10 minutes'', 0 for no timeout, or NULL for the queue''s default.';
  end if;
  if new.timeout = interval '0' then
    new.timeout := null;
  end if;
  new.meta := coalesce(new.meta, '{}');
  if jsonb_typeof(new.meta) <> 'object' then
    raise exception 'meta of job kind % must be a JSON object, got %', new.kind, jsonb_typeof(new.meta)
      using errcode = '22023',
            hint = 'Pass an object such as {"tenant": "acme"}.';
  end if;
  perform pgrun.check_json_size(format('args of job kind %s', new.kind), new.args);
  perform pgrun.check_json_size(format('meta of job kind %s', new.kind), new.meta);
  perform pgrun.check_key('unique_key', new.unique_key);
  perform pgrun.check_key('concurrency_key', new.concurrency_key);
  if new.run_at is not null and not isfinite(new.run_at) then
    raise exception 'run_at % is not a finite time', new.run_at
      using errcode = '22023',
            hint = 'Pass a real instant, or NULL for now; to hold a job back, enqueue it later or pause its queue.';
  end if;
  if new.parent_id is not null and not exists (select 1 from pgrun.jobs p where p.id = new.parent_id) then
    raise exception 'parent job % does not exist', new.parent_id
      using errcode = '22023',
            hint = 'Attach children to an existing job (pgrun.defer_job does it for the job a worker holds).';
  end if;
  -- Engine-owned columns: only the engine's own functions (running as the owner of
  -- pgrun.jobs) set them; a caller's INSERT sets its own fields and no others.
  -- Column privileges refuse most for pgrun_enqueuer already; this holds for any
  -- grant. Children are attached only by defer_job, for the worker holding the parent.
  -- (The role is looked up only when such a value is present: the common enqueue
  -- pays nothing for this check.)
  if new.parent_id is not null and not pgrun.is_engine() then
    raise exception 'a job cannot be attached to parent % by an insert', new.parent_id
      using errcode = '42501',
            hint = 'Children are attached by pgrun.defer_job, called by the worker that holds the parent.';
  end if;
  if (coalesce(new.status, 'queued') <> 'queued' or new.run_id is not null or new.node is not null
      or new.dispatched_at is not null or coalesce(new.children_failed, 0) <> 0
      or coalesce(new.deps_remaining, 0) <> 0 or new.failure_ratio is not null
      or coalesce(cardinality(new.child_errors), 0) <> 0)
     and not pgrun.is_engine() then
    raise exception 'an insert may set only the caller''s fields of a job'
      using errcode = '42501',
            hint = 'Set kind, args, queue, priority, run_at, max_attempts, unique_key, model, model_required, timeout, meta, concurrency_key; the engine sets the rest.';
  end if;
  new.status := coalesce(new.status, 'queued');
  if new.status not in ('queued', 'pending', 'waiting') then
    raise exception 'a new job cannot start in status %', new.status
      using errcode = '22023',
            hint = 'Insert jobs as queued (the default); the engine moves them on.';
  end if;
  new.run_at := coalesce(new.run_at, pgrun.clock());
  new.attempt := 0;
  new.failures := 0;
  new.lease_expiries := 0;
  new.claimed_by := null;
  new.lease_expires_at := null;
  new.heartbeat_at := null;
  new.started_at := null;
  new.finished_at := null;
  new.result := null;
  new.error := null;
  new.progress_current := 0;
  return new;
end;
$$;

drop trigger if exists jobs_before_insert on pgrun.jobs;
create trigger jobs_before_insert
  before insert on pgrun.jobs
  for each row execute function pgrun.jobs_before_insert();

-- jobs_after_insert registers new queues and wakes listeners once per queue per
-- statement. pg_notify is transactional: the wake-up is delivered on commit only.
-- With the tenant mode off it also refuses rows that name a tenant, unless the engine's
-- owner inserted them (with the mode on, row-level security holds an enqueuer to its
-- own tenant): a label written now would grant access once the mode is turned on.
create or replace function pgrun.jobs_after_insert()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  q        text;
  tenants  boolean;
begin
  for q, tenants in select n.queue, bool_or(n.tenant is not null) from new_rows n group by n.queue loop
    if tenants and not pgrun.tenant_mode() and not pgrun.sees_all() then
      raise exception 'a job cannot name a tenant while the tenant mode is off'
        using errcode = '42501', hint = 'Leave tenant out; with the mode on, the engine sets it from your role.';
    end if;
    insert into pgrun.queues (name) values (q) on conflict do nothing;
    perform pg_notify('pgrun_jobs', q);
  end loop;
  return null;
end;
$$;

drop trigger if exists jobs_after_insert on pgrun.jobs;
create trigger jobs_after_insert
  after insert on pgrun.jobs
  referencing new table as new_rows
  for each statement execute function pgrun.jobs_after_insert();

-- replace_queued gives queued job id, if it still holds unique_key, new args, priority
-- and run_at (run_at NULL keeps it) and records job.replaced; it returns the job, or
-- NULL if it is no longer queued under that key (or, in the tenant mode, belongs to
-- another tenant). It is enqueue_job's on_conflict => 'replace': enqueue_job finds the
-- holder with the caller's privileges; this part runs as the engine.
drop function if exists pgrun.replace_queued(text, jsonb, integer, timestamptz);
create or replace function pgrun.replace_queued(id bigint, unique_key text, args jsonb, priority integer, run_at timestamptz)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j pgrun.jobs;
begin
  perform pgrun.check_json_size('args', args);
  update pgrun.jobs x
  set args = coalesce(replace_queued.args, '{}'), priority = coalesce(replace_queued.priority, 0),
      run_at = coalesce(replace_queued.run_at, x.run_at)
  where x.id = replace_queued.id and x.unique_key = replace_queued.unique_key and x.status = 'queued'
    and pgrun.may_touch(x.tenant)
  returning x.* into j;
  if found then
    perform pgrun.add_event(j.id, 'job.replaced', 'info', 'a duplicate enqueue replaced the args',
      jsonb_build_object('unique_key', j.unique_key));
  end if;
  return j;
end;
$$;

-- enqueue_job inserts one job and returns it. It runs with the caller's privileges
-- (pgrun_enqueuer inserts its own fields; the insert trigger refuses the rest).
-- run_at NULL means now; max_attempts and timeout NULL mean the queue's defaults
-- (then 25 attempts and one hour); timeout 0 means none.
--
-- Deduplication by unique_key: while an active (pending, queued, running, waiting)
-- job holds the key, that job is returned and nothing is written; with unique_window,
-- so is one that finished within the window. With on_conflict => 'replace', a holder
-- that is still queued takes the new args, priority and run_at (event job.replaced)
-- instead; the default 'ignore' leaves it as it is. Keys are per tenant (one space
-- with the tenant mode off).
drop function if exists pgrun.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, bigint, text, interval, jsonb);
create or replace function pgrun.enqueue_job(
  kind             text,
  args             jsonb default '{}',
  queue            text default 'default',
  priority         integer default 0,
  run_at           timestamptz default null,
  max_attempts     integer default null,
  unique_key       text default null,
  parent_id        bigint default null,
  model            text default null,
  timeout          interval default null,
  meta             jsonb default '{}',
  concurrency_key  text default null,
  unique_window    interval default null,
  on_conflict      text default 'ignore'
)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j    pgrun.jobs;
  t    text;
  hid  bigint;
begin
  if priority > 32767 then
    raise exception 'priority % is not valid', priority
      using errcode = '22023', hint = 'Use 0 (the default, most urgent) up to 32767; lower runs first.';
  end if;
  if on_conflict is null or on_conflict not in ('ignore', 'replace') then
    raise exception 'on_conflict % is not valid', coalesce(quote_literal(on_conflict), 'NULL')
      using errcode = '22023', hint = 'Use ignore (return the holder as it is) or replace (update a queued holder''s args).';
  end if;
  perform pgrun.check_positive_interval('unique_window', unique_window);
  if unique_key is not null then
    t := pgrun.new_job_tenant(parent_id); -- the tenant the insert below gets
  end if;
  if unique_key is not null and unique_window is not null then
    select * into j from pgrun.jobs x
    where x.unique_key = enqueue_job.unique_key and x.tenant is not distinct from t
      and x.finished_at > pgrun.clock() - unique_window
    order by x.finished_at desc limit 1;
    if found then
      return j;
    end if;
  end if;
  loop
    insert into pgrun.jobs (kind, args, queue, priority, run_at, max_attempts, unique_key,
                            parent_id, model, timeout, meta, concurrency_key, tenant)
    values (enqueue_job.kind, enqueue_job.args, enqueue_job.queue, enqueue_job.priority,
            enqueue_job.run_at, enqueue_job.max_attempts, enqueue_job.unique_key,
            enqueue_job.parent_id, enqueue_job.model, enqueue_job.timeout, enqueue_job.meta,
            enqueue_job.concurrency_key, t)
    on conflict (unique_key, tenant)
      where unique_key is not null and status in ('pending', 'queued', 'running', 'waiting')
      do nothing
    returning * into j;
    if found then
      return j;
    end if;
    if on_conflict = 'replace' then
      select x.id into hid from pgrun.jobs x
      where x.unique_key = enqueue_job.unique_key and x.tenant is not distinct from t and x.status = 'queued';
      if found then
        j := pgrun.replace_queued(hid, enqueue_job.unique_key, enqueue_job.args, enqueue_job.priority, enqueue_job.run_at);
        if j.id is not null then
          return j;
        end if;
      end if;
    end if;
    select * into j from pgrun.jobs x
    where x.unique_key = enqueue_job.unique_key and x.tenant is not distinct from t
      and x.status in ('pending', 'queued', 'running', 'waiting');
    if found then
      return j;
    end if;
    -- The holder of the key finished between the two statements: try again.
  end loop;
end;
$$;

-- enqueue_jobs inserts many jobs in one statement and returns them: one JSON object
-- per job with the keys of enqueue_job (kind required). Jobs whose unique_key is held
-- by an active job are not inserted; the active holder is returned in their place.
-- One NOTIFY per queue.
create or replace function pgrun.enqueue_jobs(specs jsonb)
returns setof pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  bad   record;
  k     text;
  got   pgrun.jobs[];
  -- The tenant, worked out once for the statement (new_job_tenant's rule): a child's
  -- is its parent's, anyone else's the caller's; NULL with the mode off.
  mode  boolean := pgrun.tenant_mode();
  t     text := case when mode then pgrun.new_job_tenant(null) end;
begin
  if specs is null or jsonb_typeof(specs) <> 'array' then
    raise exception 'enqueue_jobs takes a JSON array of job objects, got %', coalesce(jsonb_typeof(specs), 'NULL')
      using errcode = '22023',
            hint = 'Pass ''[{"kind": "resize", "args": {"w": 64}}, ...]''.';
  end if;
  select e.idx, jsonb_typeof(e.v) as t into bad
  from jsonb_array_elements(specs) with ordinality e(v, idx)
  where jsonb_typeof(e.v) <> 'object'
  limit 1;
  if found then
    raise exception 'element % of enqueue_jobs is a JSON %, not an object', bad.idx - 1, bad.t
      using errcode = '22023', hint = 'Each element is an object such as {"kind": "resize"}.';
  end if;
  select e.idx, k.key into bad
  from jsonb_array_elements(specs) with ordinality e(v, idx), jsonb_object_keys(e.v) k(key)
  where k.key <> all (array['kind', 'args', 'queue', 'priority', 'run_at', 'max_attempts',
                            'unique_key', 'parent_id', 'model', 'timeout', 'meta', 'concurrency_key'])
  limit 1;
  if found then
    raise exception 'element % of enqueue_jobs has unknown key %', bad.idx - 1, quote_literal(bad.key)
      using errcode = '22023',
            hint = 'Known keys: kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id, model, timeout, meta, concurrency_key.';
  end if;

  -- Typed values: one try for the whole batch; only if it fails, find the culprit.
  begin
    perform count(*) from jsonb_to_recordset(specs) as x(priority integer, run_at timestamptz,
      max_attempts integer, parent_id bigint, timeout interval);
  exception when data_exception then
    for bad in select e.idx, e.v from jsonb_array_elements(specs) with ordinality e(v, idx) loop
      foreach k in array array['priority', 'max_attempts', 'parent_id', 'run_at', 'timeout'] loop
        begin
          case k
            when 'priority' then perform (bad.v ->> k)::integer;
            when 'max_attempts' then perform (bad.v ->> k)::integer;
            when 'parent_id' then perform (bad.v ->> k)::bigint;
            when 'run_at' then perform (bad.v ->> k)::timestamptz;
            else perform (bad.v ->> k)::interval;
          end case;
        exception when data_exception then
          raise exception 'element % of enqueue_jobs has %: % of the wrong type (%)', bad.idx - 1, k, bad.v -> k, sqlerrm
            using errcode = '22023',
                  hint = 'priority and max_attempts are whole numbers, parent_id a job id, run_at a timestamp, timeout an interval such as "30 seconds".';
        end;
      end loop;
    end loop;
    raise;
  end;
  select e.idx, e.v -> 'priority' as p into bad
  from jsonb_array_elements(specs) with ordinality e(v, idx)
  where (e.v ->> 'priority')::integer not between 0 and 32767
  limit 1;
  if found then
    raise exception 'element % of enqueue_jobs: priority % is not valid', bad.idx - 1, bad.p
      using errcode = '22023', hint = 'Use 0 (the default, most urgent) up to 32767; lower runs first.';
  end if;

  with spec as (
    select x.*
    from rows from (jsonb_to_recordset(specs) as (
      kind text, args jsonb, queue text, priority integer, run_at timestamptz,
      max_attempts integer, unique_key text, parent_id bigint, model text,
      timeout interval, meta jsonb, concurrency_key text)) with ordinality as x(
        kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id, model,
        timeout, meta, concurrency_key, ord)
  ),
  ins as (
    insert into pgrun.jobs (kind, args, queue, priority, run_at, max_attempts, unique_key,
                            parent_id, model, timeout, meta, concurrency_key, tenant)
    select s.kind, s.args, s.queue, s.priority, s.run_at, s.max_attempts, s.unique_key,
           s.parent_id, s.model, s.timeout, s.meta, s.concurrency_key,
           case when not mode then null
                when s.parent_id is null then t
                else (select p.tenant from pgrun.jobs p where p.id = s.parent_id) end
    from spec s
    order by s.ord
    on conflict (unique_key, tenant)
      where unique_key is not null and status in ('pending', 'queued', 'running', 'waiting')
      do nothing
    returning *
  )
  select coalesce(array_agg(r), '{}') into got from (
  select * from ins
  union all
  -- Rows the insert skipped: their key's active holder (the CTE's snapshot does not
  -- see the rows inserted above, so these are the pre-existing holders).
  select j.* from pgrun.jobs j
  where j.unique_key in (select s.unique_key from spec s where s.unique_key is not null)
    and j.status in ('pending', 'queued', 'running', 'waiting')
    -- in the tenant the skipped row would have had (keys are per tenant)
    and exists (select 1 from spec s where s.unique_key = j.unique_key
                and j.tenant is not distinct from pgrun.new_job_tenant(s.parent_id))) r;
  return query select * from unnest(got);
  -- A key whose holder committed while this statement waited on it is in neither
  -- part above (the statement's snapshot predates the holder): enqueue_job, in a new
  -- statement, returns the holder.
  return query
  select j.* from jsonb_array_elements(specs) e(v),
  lateral pgrun.enqueue_job(e.v ->> 'kind', coalesce(e.v -> 'args', '{}'), coalesce(e.v ->> 'queue', 'default'),
    coalesce((e.v ->> 'priority')::integer, 0), (e.v ->> 'run_at')::timestamptz,
    (e.v ->> 'max_attempts')::integer, e.v ->> 'unique_key', (e.v ->> 'parent_id')::bigint,
    e.v ->> 'model', (e.v ->> 'timeout')::interval, coalesce(e.v -> 'meta', '{}'),
    e.v ->> 'concurrency_key') j
  where e.v ->> 'unique_key' is not null
    and not exists (select 1 from unnest(got) g where g.unique_key = e.v ->> 'unique_key');
end;
$$;
