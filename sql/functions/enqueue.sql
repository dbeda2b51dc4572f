-- enqueue.sql: how a job enters the engine (enqueue_batch.sql has the batch forms).
-- A plain INSERT INTO pgrun.jobs is an enqueue too: the BEFORE trigger validates it
-- and fills defaults, the AFTER statement trigger registers the queue and sends the
-- wake-up NOTIFY inside the writer's transaction (a rolled-back enqueue wakes nobody).

-- jobs_before_insert validates a new job row, fills its defaults and resets the fields
-- only the engine may set. Raises 22023 naming the bad value (42501 for an engine-owned
-- value set by anyone but the engine); nothing is written.
--
-- The trigger's WHEN clause below skips it for a row that is already complete and
-- valid, one it would leave exactly as it is: enqueue_batch fills every default
-- set-wise, so its rows cost a few comparisons each instead of a function call. The
-- clause reads nothing but the row (no session setting, no role), so a caller's
-- plain INSERT gets the same treatment: a row the trigger would change or refuse
-- always reaches it.
create or replace function pgrun.jobs_before_insert()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  -- The checks are inline; a helper is called only to raise its error. The patterns
  -- are check_kind's and check_queue_name's with the length checked apart: a bounded
  -- repeat such as {0,127} makes PostgreSQL's regex engine several times slower.
  if new.kind is null or new.kind !~ '^[A-Za-z][A-Za-z0-9_.:/-]*$' or octet_length(new.kind) > 128 then
    perform pgrun.check_kind(new.kind);
  end if;
  new.queue := coalesce(new.queue, 'default');
  if new.queue !~ '^[a-z][a-z0-9_.-]*$' or octet_length(new.queue) > 63 then
    perform pgrun.check_queue_name(new.queue);
  end if;
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
  -- hour); an explicit 0 means none and is stored as NULL. The queue is read only
  -- when a default is missing.
  if new.max_attempts is null or new.timeout is null then
    select coalesce(new.max_attempts, q.default_max_attempts, 25),
           coalesce(new.timeout, q.default_timeout, pgrun.default_timeout())
    into new.max_attempts, new.timeout
    from (select 1) one left join pgrun.queues q on q.name = new.queue;
  end if;
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
  -- The limits of common.sql (max_json_bytes(), max_key_bytes()).
  if pg_column_size(new.args) > 1048576 then
    perform pgrun.check_json_size(format('args of job kind %s', new.kind), new.args);
  end if;
  if pg_column_size(new.meta) > 1048576 then
    perform pgrun.check_json_size(format('meta of job kind %s', new.kind), new.meta);
  end if;
  if new.unique_key = '' or octet_length(new.unique_key) > 512 then
    perform pgrun.check_key('unique_key', new.unique_key);
  end if;
  if new.concurrency_key = '' or octet_length(new.concurrency_key) > 512 then
    perform pgrun.check_key('concurrency_key', new.concurrency_key);
  end if;
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
  if new.run_at is null then
    -- pgrun.clock() without its call when the test seam is not in use.
    new.run_at := case when coalesce(current_setting('pgrun.now', true), '') = '' then now() else pgrun.clock() end;
  end if;
  new.attempt := 0;
  new.failures := 0;
  new.lease_expiries := 0;
  new.claimed_by := null;
  new.lease_expires_at := null;
  new.claim_id := null;
  new.lease_length := null;
  new.heartbeat_at := null;
  new.started_at := null;
  new.finished_at := null;
  new.result := null;
  new.error := null;
  new.progress_current := 0;
  return new;
end;
$$;

-- The row is complete and valid when every check above passes as it stands and every
-- assignment above would store what is already there. "IS NOT TRUE": a NULL anywhere
-- runs the trigger. Keep the two in step; the limits are max_json_bytes() and
-- max_key_bytes() (tests/enqueue_bulk_test.go checks them against the functions).
select pgrun.ensure_ddl('trigger', 'jobs_before_insert', 'pgrun.jobs', $ddl$
create or replace trigger jobs_before_insert
  before insert on pgrun.jobs
  for each row
  when ((new.kind ~ '^[A-Za-z][A-Za-z0-9_.:/-]*$' and octet_length(new.kind) <= 128
         and new.queue ~ '^[a-z][a-z0-9_.-]*$' and octet_length(new.queue) <= 63
         and jsonb_typeof(new.args) = 'object' and pg_column_size(new.args) <= 1048576
         and jsonb_typeof(new.meta) = 'object' and pg_column_size(new.meta) <= 1048576
         and new.priority >= 0
         and new.max_attempts >= 1
         and new.timeout > interval '0'
         and isfinite(new.run_at)
         and (new.unique_key is null or octet_length(new.unique_key) between 1 and 512)
         and (new.concurrency_key is null or octet_length(new.concurrency_key) between 1 and 512)
         and new.parent_id is null
         and new.status = 'queued' and new.run_id is null and new.node is null
         and new.dispatched_at is null and new.children_failed = 0 and new.deps_remaining = 0
         and new.failure_ratio is null and cardinality(new.child_errors) = 0
         and new.attempt = 0 and new.failures = 0 and new.lease_expiries = 0
         and new.claimed_by is null and new.lease_expires_at is null and new.heartbeat_at is null
         and new.claim_id is null and new.lease_length is null
         and new.started_at is null and new.finished_at is null and new.result is null
         and new.error is null and new.progress_current = 0) is not true)
  execute function pgrun.jobs_before_insert();
$ddl$);

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
  front    text;
begin
  -- The payload is the queue, a space, and a key no new job of it sorts before:
  -- "priority run_at_microseconds id", each the statement's least (see docs/sql-api.md).
  -- A runner resuming its claims after a key (claim_jobs' after_*) starts again from
  -- the queue's start when the payload's key is below its own.
  for q, tenants, front in
    select n.queue, bool_or(n.tenant is not null),
           format('%s %s %s', min(n.priority), (extract(epoch from min(n.run_at)) * 1000000)::bigint, min(n.id))
    from new_rows n group by n.queue
  loop
    if tenants and not pgrun.tenant_mode() and not pgrun.sees_all() then
      raise exception 'a job cannot name a tenant while the tenant mode is off'
        using errcode = '42501', hint = 'Leave tenant out; with the mode on, the engine sets it from your role.';
    end if;
    insert into pgrun.queues (name) values (q) on conflict do nothing;
    perform pg_notify('pgrun_jobs', q || ' ' || front);
  end loop;
  return null;
end;
$$;

select pgrun.ensure_ddl('trigger', 'jobs_after_insert', 'pgrun.jobs', $ddl$
create or replace trigger jobs_after_insert
  after insert on pgrun.jobs
  referencing new table as new_rows
  for each statement execute function pgrun.jobs_after_insert();
$ddl$);

-- replace_queued gives queued job id, if it still holds unique_key, new args, priority
-- and run_at (run_at NULL keeps it) and records job.replaced; it returns the job, or
-- NULL if it is no longer queued under that key (or, in the tenant mode, belongs to
-- another tenant). It is enqueue_job's on_conflict => 'replace': enqueue_job finds the
-- holder with the caller's privileges; this part runs as the engine.
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
