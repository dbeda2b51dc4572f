-- enqueue.sql: every way a job enters the engine. A plain INSERT INTO pgrun.jobs is
-- an enqueue too: the BEFORE trigger validates it and fills defaults, the AFTER
-- statement trigger registers the queue and sends the wake-up NOTIFY inside the
-- writer's transaction (a rolled-back enqueue wakes nobody).

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
drop trigger if exists jobs_before_insert on pgrun.jobs;
create trigger jobs_before_insert
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
         and new.started_at is null and new.finished_at is null and new.result is null
         and new.error is null and new.progress_current = 0) is not true)
  execute function pgrun.jobs_before_insert();

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

-- enqueue_batch inserts many jobs in one statement and returns them: the k-th element
-- of every array describes the k-th job. The arrays have kinds' length; a NULL array,
-- or a NULL element, takes the default, as in enqueue_job: args and meta {}, queue
-- 'default', priority 0, run_at now, max_attempts and timeout the queue's defaults
-- (then 25 attempts and one hour; timeout 0 means none). It runs with the caller's
-- privileges, like a plain INSERT of the same fields. Ids follow the arrays' order.
--
-- The whole batch is checked before anything is written: the first bad job raises
-- 22023 naming its element (counted from 0, as in enqueue_jobs and the Go client's
-- slice: element k is kinds[k + 1]), the bad value and a HINT. Jobs whose unique_key
-- is held by an active job (or by an earlier job of the batch, which takes the key)
-- are not inserted; the holder is returned in their place. One NOTIFY per queue.
--
-- Each job is inserted complete (every default filled, the queues' defaults read once
-- for the batch), so the row trigger's WHEN clause passes it without a call. Plans
-- are generic: every statement here reads the arrays in one scan, whatever their
-- length, so a plan made once serves batches of one and of 10,000 alike.
create or replace function pgrun.enqueue_batch(
  kinds             text[],
  args              jsonb[] default null,
  queues            text[] default null,
  priorities        integer[] default null,
  run_ats           timestamptz[] default null,
  max_attempts      integer[] default null,
  unique_keys       text[] default null,
  parent_ids        bigint[] default null,
  models            text[] default null,
  timeouts          interval[] default null,
  metas             jsonb[] default null,
  concurrency_keys  text[] default null
)
returns setof pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
as $$
declare
  n       integer := cardinality(kinds);
  bad     record;
  got     pgrun.jobs[];
  keyed   boolean := coalesce(cardinality(array_remove(unique_keys, null)) > 0, false);
  -- Worked out once for the statement: the tenant (new_job_tenant's rule: a child's
  -- is its parent's, anyone else's the caller's; NULL with the mode off) and now
  -- (pgrun.clock() without its call when the test seam is not in use).
  mode    boolean := pgrun.tenant_mode();
  t       text := case when mode then pgrun.new_job_tenant(null) end;
  v_now   timestamptz := case when coalesce(current_setting('pgrun.now', true), '') = '' then now()
                              else pgrun.clock() end;
  -- The queues' defaults: of the batch's one queue, or (qn not NULL) of each queue
  -- in qn, by position.
  dma     integer;
  dto     interval;
  qn      text[];
  qma     integer[];
  qto     interval[];
begin
  if kinds is null then
    raise exception 'enqueue_batch needs kinds, got NULL'
      using errcode = '22023', hint = 'Pass one kind per job: kinds => array[''resize'', ''resize''].';
  end if;
  if cardinality(args) <> n or cardinality(queues) <> n or cardinality(priorities) <> n
     or cardinality(run_ats) <> n or cardinality(max_attempts) <> n or cardinality(unique_keys) <> n
     or cardinality(parent_ids) <> n or cardinality(models) <> n or cardinality(timeouts) <> n
     or cardinality(metas) <> n or cardinality(concurrency_keys) <> n then
    select a.name, a.len into bad
    from (values ('args', cardinality(args)), ('queues', cardinality(queues)),
                 ('priorities', cardinality(priorities)), ('run_ats', cardinality(run_ats)),
                 ('max_attempts', cardinality(max_attempts)), ('unique_keys', cardinality(unique_keys)),
                 ('parent_ids', cardinality(parent_ids)), ('models', cardinality(models)),
                 ('timeouts', cardinality(timeouts)), ('metas', cardinality(metas)),
                 ('concurrency_keys', cardinality(concurrency_keys))) a(name, len)
    where a.len <> n
    limit 1;
    raise exception 'enqueue_batch got % kinds but % %', n, bad.len, bad.name
      using errcode = '22023',
            hint = 'Pass arrays of the same length (one element per job), or NULL for all defaults.';
  end if;
  if n = 0 then
    return;
  end if;

  -- The first bad job, found in one pass: the checks of jobs_before_insert (whose
  -- comments say why the patterns have no bounded repeat).
  select v.* into bad from (
    select u.*, case
      when u.kind is null or u.kind !~ '^[A-Za-z][A-Za-z0-9_.:/-]*$' or octet_length(u.kind) > 128 then 'kind'
      when u.queue !~ '^[a-z][a-z0-9_.-]*$' or octet_length(u.queue) > 63 then 'queue'
      when jsonb_typeof(u.args) <> 'object' then 'args'
      when pg_column_size(u.args) > pgrun.max_json_bytes() then 'args size'
      when u.priority not between 0 and 32767 then 'priority'
      when not isfinite(u.run_at) then 'run_at'
      when u.max_attempts < 1 then 'max_attempts'
      when u.unique_key = '' or octet_length(u.unique_key) > pgrun.max_key_bytes() then 'unique_key'
      when u.timeout < interval '0' then 'timeout'
      when jsonb_typeof(u.meta) <> 'object' then 'meta'
      when pg_column_size(u.meta) > pgrun.max_json_bytes() then 'meta size'
      when u.concurrency_key = '' or octet_length(u.concurrency_key) > pgrun.max_key_bytes() then 'concurrency_key'
      when u.parent_id is not null and not exists (select 1 from pgrun.jobs p where p.id = u.parent_id) then 'parent_id'
    end as what
    from unnest(kinds, enqueue_batch.args, queues, priorities, run_ats, enqueue_batch.max_attempts,
                unique_keys, parent_ids, models, timeouts, metas, concurrency_keys)
         with ordinality u(kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id,
                           model, timeout, meta, concurrency_key, i)
  ) v
  where v.what is not null
  order by v.i
  limit 1;
  if found then
    case bad.what
      when 'kind' then
        raise exception 'element % of the batch: job kind % is not valid', bad.i - 1, coalesce(quote_literal(bad.kind), 'NULL')
          using errcode = '22023',
                hint = 'Use 1 to 128 characters from letters, digits, _ . : / - starting with a letter.';
      when 'queue' then
        raise exception 'element % of the batch: queue name % is not valid', bad.i - 1, quote_literal(bad.queue)
          using errcode = '22023',
                hint = 'Use 1 to 63 characters from a-z, 0-9, _, - and . starting with a letter.';
      when 'args' then
        raise exception 'element % of the batch: args of job kind % must be a JSON object, got %', bad.i - 1, bad.kind, jsonb_typeof(bad.args)
          using errcode = '22023', hint = 'Wrap the value in an object, for example {"value": ...}.';
      when 'meta' then
        raise exception 'element % of the batch: meta of job kind % must be a JSON object, got %', bad.i - 1, bad.kind, jsonb_typeof(bad.meta)
          using errcode = '22023', hint = 'Pass an object such as {"tenant": "acme"}.';
      when 'args size', 'meta size' then
        raise exception 'element % of the batch: % of job kind % is % bytes, over the limit of % bytes', bad.i - 1,
          split_part(bad.what, ' ', 1), bad.kind,
          pg_column_size(case when bad.what = 'args size' then bad.args else bad.meta end), pgrun.max_json_bytes()
          using errcode = '22023',
                hint = 'Keep payloads small: store large data in a table or object store and pass its key.';
      when 'priority' then
        raise exception 'element % of the batch: priority % is not valid', bad.i - 1, bad.priority
          using errcode = '22023', hint = 'Use 0 (the default, most urgent) up to 32767; lower runs first.';
      when 'run_at' then
        raise exception 'element % of the batch: run_at % is not a finite time', bad.i - 1, bad.run_at
          using errcode = '22023',
                hint = 'Pass a real instant, or NULL for now; to hold a job back, enqueue it later or pause its queue.';
      when 'max_attempts' then
        raise exception 'element % of the batch: max_attempts % is not valid', bad.i - 1, bad.max_attempts
          using errcode = '22023', hint = 'Use 1 or more; 1 means no retries.';
      when 'timeout' then
        raise exception 'element % of the batch: timeout % is negative', bad.i - 1, bad.timeout
          using errcode = '22023',
                hint = 'Pass a positive interval such as ''10 minutes'', 0 for no timeout, or NULL for the queue''s default.';
      when 'unique_key', 'concurrency_key' then
        raise exception 'element % of the batch: % %', bad.i - 1, bad.what,
          case when (case when bad.what = 'unique_key' then bad.unique_key else bad.concurrency_key end) = ''
               then 'must not be empty'
               else format('is %s bytes, over the limit of %s bytes',
                           octet_length(case when bad.what = 'unique_key' then bad.unique_key else bad.concurrency_key end),
                           pgrun.max_key_bytes()) end
          using errcode = '22023',
                hint = format('Pass NULL for no %s, or a non-empty key; for a long natural key pass a digest such as md5(...).', bad.what);
      else -- parent_id
        raise exception 'element % of the batch: parent job % does not exist', bad.i - 1, bad.parent_id
          using errcode = '22023',
                hint = 'Attach children to an existing job (pgrun.defer_job does it for the job a worker holds).';
    end case;
  end if;

  if queues is null or queues = array_fill(queues[1], array[n]) then
    select q.default_max_attempts, q.default_timeout into dma, dto
    from pgrun.queues q where q.name = coalesce(queues[1], 'default');
  else
    select array_agg(q.name), array_agg(q.default_max_attempts), array_agg(q.default_timeout) into qn, qma, qto
    from pgrun.queues q where q.name = any (queues) or q.name = 'default';
  end if;

  -- Complete rows, in the arrays' order (one scan of them feeds the insert), each
  -- default filled: a timeout of 0 (none) is left for the trigger to store as NULL.
  if not keyed then
    -- No unique key: a plain insert (ON CONFLICT would cost a speculative insertion,
    -- an extra WAL record, per row).
    return query
    insert into pgrun.jobs (kind, args, queue, priority, run_at, max_attempts, unique_key,
                            parent_id, model, timeout, meta, concurrency_key, tenant)
    select u.kind, coalesce(u.args, '{}'), coalesce(u.queue, 'default'), coalesce(u.priority, 0),
           coalesce(u.run_at, v_now),
           coalesce(u.max_attempts,
                    case when qn is null then dma else qma[array_position(qn, coalesce(u.queue, 'default'))] end, 25),
           null, u.parent_id, u.model,
           coalesce(u.timeout,
                    case when qn is null then dto else qto[array_position(qn, coalesce(u.queue, 'default'))] end,
                    pgrun.default_timeout()),
           coalesce(u.meta, '{}'), u.concurrency_key,
           case when not mode then null
                when u.parent_id is null then t
                else (select p.tenant from pgrun.jobs p where p.id = u.parent_id) end
    from unnest(kinds, enqueue_batch.args, queues, priorities, run_ats, enqueue_batch.max_attempts,
                parent_ids, models, timeouts, metas, concurrency_keys)
         u(kind, args, queue, priority, run_at, max_attempts, parent_id, model, timeout, meta, concurrency_key)
    returning *;
    return;
  end if;

  with spec as (
    select u.*
    from unnest(kinds, enqueue_batch.args, queues, priorities, run_ats, enqueue_batch.max_attempts,
                unique_keys, parent_ids, models, timeouts, metas, concurrency_keys)
         with ordinality u(kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id,
                           model, timeout, meta, concurrency_key, i)
  ),
  ins as (
    insert into pgrun.jobs (kind, args, queue, priority, run_at, max_attempts, unique_key,
                            parent_id, model, timeout, meta, concurrency_key, tenant)
    select s.kind, coalesce(s.args, '{}'), coalesce(s.queue, 'default'), coalesce(s.priority, 0),
           coalesce(s.run_at, v_now),
           coalesce(s.max_attempts,
                    case when qn is null then dma else qma[array_position(qn, coalesce(s.queue, 'default'))] end, 25),
           s.unique_key, s.parent_id, s.model,
           coalesce(s.timeout,
                    case when qn is null then dto else qto[array_position(qn, coalesce(s.queue, 'default'))] end,
                    pgrun.default_timeout()),
           coalesce(s.meta, '{}'), s.concurrency_key,
           case when not mode then null
                when s.parent_id is null then t
                else (select p.tenant from pgrun.jobs p where p.id = s.parent_id) end
    from spec s
    order by s.i -- the first job of the batch with a key takes it
    on conflict (unique_key, tenant)
      where unique_key is not null and status in ('pending', 'queued', 'running', 'waiting')
      do nothing
    returning *
  )
  select coalesce(array_agg(r), '{}') into got from (
  select * from ins
  union all
  -- Rows the insert skipped: their key's active holder (the CTE's snapshot does not
  -- see the rows inserted above, so these are the pre-existing holders), looked up
  -- only for the keys the insert did not take, in the tenant the skipped row would
  -- have had (keys are per tenant; the rule of the insert above, t being
  -- new_job_tenant(NULL)).
  select j.* from pgrun.jobs j
  join (select s.unique_key, case when not mode then null
                                  when s.parent_id is null then t
                                  else (select p.tenant from pgrun.jobs p where p.id = s.parent_id) end as tenant
        from spec s where s.unique_key is not null
        except
        select i.unique_key, i.tenant from ins i where i.unique_key is not null) k
    on j.unique_key = k.unique_key and j.tenant is not distinct from k.tenant
  where j.status in ('pending', 'queued', 'running', 'waiting')) r;
  return query select * from unnest(got);
  -- A key whose holder committed while this statement waited on it is in neither
  -- part above (the statement's snapshot predates the holder): enqueue_job, in a new
  -- statement, returns the holder.
  return query
  select j.* from unnest(kinds, enqueue_batch.args, queues, priorities, run_ats, enqueue_batch.max_attempts,
                         unique_keys, parent_ids, models, timeouts, metas, concurrency_keys)
         u(kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id,
           model, timeout, meta, concurrency_key),
  lateral pgrun.enqueue_job(u.kind, coalesce(u.args, '{}'), coalesce(u.queue, 'default'),
    coalesce(u.priority, 0), u.run_at, u.max_attempts, u.unique_key, u.parent_id,
    u.model, u.timeout, coalesce(u.meta, '{}'), u.concurrency_key) j
  where u.unique_key is not null
    and not exists (select 1 from unnest(got) g where g.unique_key = u.unique_key);
end;
$$;

-- enqueue_jobs inserts many jobs in one statement and returns them: one JSON object
-- per job with the keys of enqueue_job (kind required). It checks the JSON (elements
-- are objects, keys known, values of the right type, naming the element counted from
-- 0) and hands the typed columns to enqueue_batch, which checks the values and
-- inserts: jobs whose unique_key is held by an active job are not inserted; the
-- active holder is returned in their place. One NOTIFY per queue.
create or replace function pgrun.enqueue_jobs(specs jsonb)
returns setof pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  bad   record;
  k     text;
  c     record;
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
    select array_agg(x.kind order by x.ord) as kinds, array_agg(x.args order by x.ord) as args,
           array_agg(x.queue order by x.ord) as queues, array_agg(x.priority order by x.ord) as priorities,
           array_agg(x.run_at order by x.ord) as run_ats, array_agg(x.max_attempts order by x.ord) as max_attempts,
           array_agg(x.unique_key order by x.ord) as unique_keys, array_agg(x.parent_id order by x.ord) as parent_ids,
           array_agg(x.model order by x.ord) as models, array_agg(x.timeout order by x.ord) as timeouts,
           array_agg(x.meta order by x.ord) as metas, array_agg(x.concurrency_key order by x.ord) as concurrency_keys
    into c
    from rows from (jsonb_to_recordset(specs) as (
      kind text, args jsonb, queue text, priority integer, run_at timestamptz,
      max_attempts integer, unique_key text, parent_id bigint, model text,
      timeout interval, meta jsonb, concurrency_key text)) with ordinality as x(
        kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id, model,
        timeout, meta, concurrency_key, ord);
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
  return query
  select * from pgrun.enqueue_batch(coalesce(c.kinds, '{}'), c.args, c.queues, c.priorities, c.run_ats,
    c.max_attempts, c.unique_keys, c.parent_ids, c.models, c.timeouts, c.metas, c.concurrency_keys);
end;
$$;
