-- enqueue_batch.sql: many jobs in one statement. enqueue_batch takes one array per
-- field (the Go client's EnqueueMany uses it); enqueue_jobs takes JSON and hands over
-- to it. Each checks the whole batch before writing anything; the single-job forms
-- and the insert triggers are in enqueue.sql.

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
