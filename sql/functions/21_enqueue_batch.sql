-- 21_enqueue_batch.sql: the one enqueue path. enqueue_columns enqueues a batch given as
-- one array per attribute of pgrun.job_spec (0014_job_spec), and is what every other
-- form calls: enqueue_specs unzips an array of specs into it, enqueue_batch and the Go
-- client's EnqueueMany send typed arrays (the cheapest to encode, and no row of a
-- composite type is built per job), enqueue_jobs (JSON) parses into specs, and
-- enqueue_job (20_enqueue.sql) is a batch of one. The rules a spec must follow are
-- job_spec_fault's (20_enqueue.sql), shared with the insert trigger.

-- enqueue_columns enqueues a job for each spec and returns one row per spec, in the
-- specs' order: the job, whether it was deduplicated and whether it was folded
-- (pgrun.enqueued). The k-th
-- element of every array is an attribute of the k-th spec (job_spec's, plural); the
-- arrays have kinds' length, and a NULL array stands for NULL in every spec. A spec
-- whose unique_key is held by an active (pending, queued, running, waiting) job, or by
-- an earlier spec of the same call, is not inserted: the holder is returned with deduplicated true;
-- with unique_window, so is the job that finished with the key within the window; with
-- on_conflict 'replace', a holder that is still queued first takes the spec's args,
-- priority and run_at (replace_queued). Keys are per tenant. New jobs get ids in the
-- specs' order. A NULL field takes the default: args and meta {}, queue 'default',
-- priority 0, run_at now, max_attempts and timeout the queue's defaults (then 25
-- attempts and one hour; timeout 0 means none), on_conflict 'ignore', model_required
-- false. It runs with the caller's privileges, like a plain INSERT of the same fields.
--
-- Sequences: the insert trigger holds each job of a sequence behind the one before it
-- (36_sequences.sql); the batch's sequences are locked first, in one order, so that
-- two batches sharing sequences never wait on each other in a cycle, and several jobs
-- of one sequence keep the specs' order with one head. A batch with a debounce_key is
-- enqueued spec by spec (enqueue_debounced for those with the key), in order; folded
-- says which specs folded into an existing job.
--
-- Every spec is checked before anything is written: the first that breaks a rule
-- raises 22023 naming its element (counted from 0; not named when it is the only
-- one), the bad value and a HINT (check_job_spec). One NOTIFY per queue
-- (jobs_after_insert).
--
-- Each job is inserted complete (every default filled, the queues' defaults read once
-- for the batch), so the row trigger's WHEN clause passes it without a call. Plans are
-- generic: every statement here reads the specs in one scan, whatever their number,
-- so a plan made once serves batches of one and of 10,000 alike.
create or replace function pgrun.enqueue_columns(
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
  concurrency_keys  text[] default null,
  unique_windows    interval[] default null,
  on_conflicts      text[] default null,
  model_requireds   boolean[] default null,
  sequence_keys     text[] default null,
  debounce_keys     text[] default null,
  debounces         interval[] default null,
  debounce_edges    text[] default null
)
returns setof pgrun.enqueued
language plpgsql
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
as $$
declare
  n       integer := cardinality(kinds);
  badlen  record;
  bad     bigint;
  keyed   boolean;
  -- Worked out once for the statement: the tenant (new_job_tenant's rule: a child's
  -- is its parent's, anyone else's the caller's; NULL with the mode off) and now.
  mode    boolean := pgrun.tenant_mode();
  t       text := case when mode then pgrun.new_job_tenant(null) end;
  v_now   timestamptz := pgrun.clock();
  -- The queues' defaults: of the batch's one queue, or (qn not NULL) of each queue
  -- in qn, by position.
  dma     integer;
  dto     interval;
  qn      text[];
  qma     integer[];
  qto     interval[];
  -- The keyed path's answer, by position (deduplicated NULL: not settled by the
  -- set-wise statement; see below).
  res     pgrun.enqueued[];
  e       pgrun.enqueued;
  k       bigint;
  one     pgrun.job_spec;
  kt      text;
  j       pgrun.jobs;
  hid     bigint;
begin
  if kinds is null then
    raise exception 'a batch needs kinds, got NULL'
      using errcode = '22023', hint = 'Pass one kind per job: kinds => array[''resize'', ''resize''].';
  end if;
  if cardinality(args) <> n or cardinality(queues) <> n or cardinality(priorities) <> n
     or cardinality(run_ats) <> n or cardinality(max_attempts) <> n or cardinality(unique_keys) <> n
     or cardinality(parent_ids) <> n or cardinality(models) <> n or cardinality(timeouts) <> n
     or cardinality(metas) <> n or cardinality(concurrency_keys) <> n or cardinality(unique_windows) <> n
     or cardinality(on_conflicts) <> n or cardinality(model_requireds) <> n
     or cardinality(sequence_keys) <> n or cardinality(debounce_keys) <> n or cardinality(debounces) <> n
     or cardinality(debounce_edges) <> n then
    select a.name, a.len into badlen
    from (values ('args', cardinality(args)), ('queues', cardinality(queues)),
                 ('priorities', cardinality(priorities)), ('run_ats', cardinality(run_ats)),
                 ('max_attempts', cardinality(max_attempts)), ('unique_keys', cardinality(unique_keys)),
                 ('parent_ids', cardinality(parent_ids)), ('models', cardinality(models)),
                 ('timeouts', cardinality(timeouts)), ('metas', cardinality(metas)),
                 ('concurrency_keys', cardinality(concurrency_keys)), ('unique_windows', cardinality(unique_windows)),
                 ('on_conflicts', cardinality(on_conflicts)), ('model_requireds', cardinality(model_requireds)),
                 ('sequence_keys', cardinality(sequence_keys)), ('debounce_keys', cardinality(debounce_keys)),
                 ('debounces', cardinality(debounces)), ('debounce_edges', cardinality(debounce_edges))) a(name, len)
    where a.len <> n
    limit 1;
    raise exception 'the batch has % kinds but % %', n, badlen.len, badlen.name
      using errcode = '22023',
            hint = 'Pass arrays of the same length (one element per job), or NULL for all defaults.';
  end if;
  if n = 0 then
    return;
  end if;

  -- The first bad spec, in one scan; job_spec_fault is inlined into it.
  select min(u.i) into bad
  from unnest(kinds, enqueue_columns.args, queues, priorities, run_ats, enqueue_columns.max_attempts, unique_keys,
              parent_ids, models, timeouts, metas, concurrency_keys, unique_windows, on_conflicts, model_requireds,
              sequence_keys, debounce_keys, debounces, debounce_edges)
       with ordinality u(kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id, model, timeout,
                         meta, concurrency_key, unique_window, on_conflict, model_required, sequence_key,
                         debounce_key, debounce, debounce_edge, i)
  where pgrun.job_spec_fault(row(u.kind, u.args, u.queue, u.priority, u.run_at, u.max_attempts, u.unique_key,
          u.parent_id, u.model, u.timeout, u.meta, u.concurrency_key, u.unique_window, u.on_conflict,
          u.model_required, u.sequence_key, u.debounce_key, u.debounce, u.debounce_edge)::pgrun.job_spec) is not null;
  if bad is not null then
    -- One spec (enqueue_job's) is not called an element: the message is the insert
    -- trigger's, word for word.
    perform pgrun.check_job_spec(pgrun.spec_at(bad::integer, kinds, args, queues, priorities, run_ats,
                                               max_attempts, unique_keys, parent_ids, models, timeouts, metas,
                                               concurrency_keys, unique_windows, on_conflicts, model_requireds,
                                               sequence_keys, debounce_keys, debounces, debounce_edges),
                                 case when n > 1 then (bad - 1)::integer end);
  end if;

  -- Debounce: spec by spec, in order (debounced enqueues come one or a few at a time).
  if cardinality(array_remove(debounce_keys, null)) > 0 then
    for k in 1 .. n loop
      one := pgrun.spec_at(k, kinds, args, queues, priorities, run_ats, max_attempts, unique_keys, parent_ids,
                           models, timeouts, metas, concurrency_keys, unique_windows, on_conflicts, model_requireds,
                           sequence_keys, debounce_keys, debounces, debounce_edges);
      if one.debounce_key is null then
        select * into e from pgrun.enqueue_columns(array[one.kind], array[one.args], array[one.queue],
          array[one.priority], array[one.run_at], array[one.max_attempts], array[one.unique_key],
          array[one.parent_id], array[one.model], array[one.timeout], array[one.meta], array[one.concurrency_key],
          array[one.unique_window], array[one.on_conflict], array[one.model_required], array[one.sequence_key]);
      else
        e := pgrun.enqueue_debounced(one, case when mode then pgrun.new_job_tenant(one.parent_id) end);
      end if;
      res[k] := e;
    end loop;
    return query select * from unnest(res);
    return;
  end if;

  -- Sequences: the batch's, locked in one order (the insert trigger locks each again,
  -- which costs nothing once held). The tenant is the one each job gets below.
  if cardinality(array_remove(sequence_keys, null)) > 0 then
    perform pg_advisory_xact_lock(l.id)
    from (select distinct pgrun.sequence_lock_id(coalesce(u.queue, 'default'), u.sequence_key,
                   case when not mode then null
                        when u.parent_id is null then t
                        else (select p.tenant from pgrun.jobs p where p.id = u.parent_id) end) as id
          from unnest(queues, sequence_keys, parent_ids) u(queue, sequence_key, parent_id)
          where u.sequence_key is not null
          order by 1) l;
  end if;

  -- Whole-array tests, cheaper than a look at each spec.
  keyed := coalesce(cardinality(array_remove(unique_keys, null)) > 0, false);
  if queues is null or queues = array_fill(queues[1], array[n]) then
    select q.default_max_attempts, q.default_timeout into dma, dto
    from pgrun.queues q where q.name = coalesce(queues[1], 'default');
  else
    select array_agg(q.name), array_agg(q.default_max_attempts), array_agg(q.default_timeout) into qn, qma, qto
    from pgrun.queues q
    where q.name in (select coalesce(u.queue, 'default') from unnest(queues) u(queue));
  end if;

  -- Complete rows, in the specs' order (one scan of them feeds the insert), each
  -- default filled: a timeout of 0 (none) is left for the trigger to store as NULL.
  if not keyed then
    -- No unique key: a plain insert (ON CONFLICT would cost a speculative insertion,
    -- an extra WAL record, per row), nothing deduplicated.
    return query
    insert into pgrun.jobs as x (kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id,
                                 model, timeout, meta, concurrency_key, model_required, tenant, sequence_key)
    select u.kind, coalesce(u.args, '{}'), coalesce(u.queue, 'default'), coalesce(u.priority, 0),
           coalesce(u.run_at, v_now),
           coalesce(u.max_attempts,
                    case when qn is null then dma else qma[array_position(qn, coalesce(u.queue, 'default'))] end, 25),
           null, u.parent_id, u.model,
           coalesce(u.timeout,
                    case when qn is null then dto else qto[array_position(qn, coalesce(u.queue, 'default'))] end,
                    pgrun.default_timeout()),
           coalesce(u.meta, '{}'), u.concurrency_key, coalesce(u.model_required, false),
           case when not mode then null
                when u.parent_id is null then t
                else (select p.tenant from pgrun.jobs p where p.id = u.parent_id) end,
           u.sequence_key
    -- (unique_keys, unique_windows and on_conflicts are all NULL here, and the
    -- debounce arrays too: not read.)
    from unnest(kinds, enqueue_columns.args, queues, priorities, run_ats, enqueue_columns.max_attempts,
                parent_ids, models, timeouts, metas, concurrency_keys, model_requireds, sequence_keys)
         u(kind, args, queue, priority, run_at, max_attempts, parent_id, model, timeout, meta,
           concurrency_key, model_required, sequence_key)
    returning x.*, false, false;
    return;
  end if;

  -- With keys: one statement inserts every spec it can, in order, and settles what
  -- it can see; the rest (deduplicated NULL) is settled one spec at a time below.
  with spec as (
    select u.*, case when not mode then null
                     when u.parent_id is null then t
                     else (select p.tenant from pgrun.jobs p where p.id = u.parent_id) end as tenant
    from unnest(kinds, enqueue_columns.args, queues, priorities, run_ats, enqueue_columns.max_attempts, unique_keys,
              parent_ids, models, timeouts, metas, concurrency_keys, unique_windows, on_conflicts, model_requireds,
              sequence_keys)
         with ordinality u(kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id, model, timeout,
                           meta, concurrency_key, unique_window, on_conflict, model_required, sequence_key, i)
  ),
  -- Specs whose key a job finished within their unique_window: not inserted.
  recent as (
    select s.i, w.h from spec s
    cross join lateral (select h from pgrun.jobs h
                        where h.unique_key = s.unique_key and h.tenant is not distinct from s.tenant
                          and h.finished_at > v_now - s.unique_window
                        order by h.finished_at desc limit 1) w
    where s.unique_key is not null and s.unique_window is not null
  ),
  ins as (
    insert into pgrun.jobs as x (kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id,
                                 model, timeout, meta, concurrency_key, model_required, tenant, sequence_key)
    select s.kind, coalesce(s.args, '{}'), coalesce(s.queue, 'default'), coalesce(s.priority, 0),
           coalesce(s.run_at, v_now),
           coalesce(s.max_attempts,
                    case when qn is null then dma else qma[array_position(qn, coalesce(s.queue, 'default'))] end, 25),
           s.unique_key, s.parent_id, s.model,
           coalesce(s.timeout,
                    case when qn is null then dto else qto[array_position(qn, coalesce(s.queue, 'default'))] end,
                    pgrun.default_timeout()),
           coalesce(s.meta, '{}'), s.concurrency_key, coalesce(s.model_required, false), s.tenant, s.sequence_key
    from spec s
    where s.i not in (select r.i from recent r)
    order by s.i -- the first spec of the batch with a key takes it
    -- The predicate of jobs_unique_key_tenant_idx, spelled as the index spells it (the
    -- statuses are active_statuses()): ON CONFLICT picks its arbiter by that predicate.
    on conflict (unique_key, tenant)
      where unique_key is not null and status in ('pending', 'queued', 'running', 'waiting')
      do nothing
    returning x
  ),
  -- New jobs without a key come back in the specs' order: the k-th is the k-th spec
  -- without a key.
  plain as (
    select ni.x, row_number() over (order by (ni.x).id) as rn from ins ni where (ni.x).unique_key is null
  ),
  plain_spec as (
    select s.i, row_number() over (order by s.i) as rn from spec s where s.unique_key is null
  ),
  -- A new job with a key was inserted for the first spec that tried the key.
  keyed_new as (
    select ni.x, (ni.x).unique_key as unique_key, (ni.x).tenant as tenant from ins ni where (ni.x).unique_key is not null
  ),
  taker as (
    select distinct on (s.unique_key, s.tenant) s.i from spec s
    where s.unique_key is not null and s.i not in (select r.i from recent r)
    order by s.unique_key, s.tenant, s.i
  )
  select array_agg(row((c.job).*, c.d, false)::pgrun.enqueued order by s.i) into res
  from spec s
  left join plain_spec ps on ps.i = s.i
  left join plain p on p.rn = ps.rn
  left join recent r on r.i = s.i
  left join keyed_new kn on kn.unique_key = s.unique_key and kn.tenant is not distinct from s.tenant
  left join taker tk on tk.i = s.i
  -- The active holder from before this statement (the statement's snapshot does not
  -- see the rows inserted above), found through jobs_unique_key_tenant_idx: the
  -- statuses are active_statuses() spelled as the index's predicate spells them.
  left join lateral (select h from pgrun.jobs h
                     where s.unique_key is not null and r.i is null and kn.unique_key is null
                       and h.unique_key = s.unique_key and h.tenant is not distinct from s.tenant
                       and h.status in ('pending', 'queued', 'running', 'waiting')) old on true
  cross join lateral (
    select coalesce(p.x, r.h, kn.x, old.h) as job,
           case when p.rn is not null then false
                when r.i is not null then true
                when kn.unique_key is not null and tk.i is not null then false
                -- a later spec with 'replace' replaces what the earlier one set: below
                when kn.unique_key is not null and s.on_conflict is distinct from 'replace' then true
                when (old.h).id is not null
                     and (s.on_conflict is distinct from 'replace' or (old.h).status <> 'queued') then true
           end as d) c;

  -- What the statement could not settle: a spec that replaces a queued holder, and a
  -- key whose holder finished, or committed while the statement waited on it, so
  -- that the statement saw none. Each is tried again in statements of its own, as
  -- enqueue_job always did: insert, else replace, else return the holder.
  for k in select u.ordinality from unnest(res) with ordinality u where u.deduplicated is null loop
    one := pgrun.spec_at(k::integer, kinds, args, queues, priorities, run_ats, max_attempts, unique_keys,
                         parent_ids, models, timeouts, metas, concurrency_keys, unique_windows, on_conflicts,
                         model_requireds, sequence_keys, debounce_keys, debounces, debounce_edges);
    kt := case when mode then pgrun.new_job_tenant(one.parent_id) end;
    loop
      if one.unique_window is not null then
        select * into j from pgrun.jobs x
        where x.unique_key = one.unique_key and x.tenant is not distinct from kt
          and x.finished_at > pgrun.clock() - one.unique_window
        order by x.finished_at desc limit 1;
        if found then
          e.deduplicated := true;
          exit;
        end if;
      end if;
      insert into pgrun.jobs (kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id,
                              model, timeout, meta, concurrency_key, model_required, tenant, sequence_key)
      values (one.kind, one.args, one.queue, one.priority, one.run_at, one.max_attempts, one.unique_key, one.parent_id,
              one.model, one.timeout, one.meta, one.concurrency_key, coalesce(one.model_required, false), kt,
              one.sequence_key)
      -- As above: the index's predicate, spelled as the index spells it.
      on conflict (unique_key, tenant)
        where unique_key is not null and status in ('pending', 'queued', 'running', 'waiting')
        do nothing
      returning * into j;
      if found then
        e.deduplicated := false;
        exit;
      end if;
      if one.on_conflict = 'replace' then
        select x.id into hid from pgrun.jobs x
        where x.unique_key = one.unique_key and x.tenant is not distinct from kt and x.status = 'queued';
        if found then
          j := pgrun.replace_queued(hid, one.unique_key, one.args, one.priority, one.run_at);
          if j.id is not null then
            e.deduplicated := true;
            exit;
          end if;
        end if;
      end if;
      select * into j from pgrun.jobs x -- by jobs_unique_key_tenant_idx, as above
      where x.unique_key = one.unique_key and x.tenant is not distinct from kt
        and x.status in ('pending', 'queued', 'running', 'waiting');
      if found then
        e.deduplicated := true;
        exit;
      end if;
      -- The holder of the key finished between the two statements: try again.
    end loop;
    select (j).*, e.deduplicated, false into e;
    res[k] := e;
  end loop;

  return query select * from unnest(res);
end;
$$;

-- job_spec builds a spec from named arguments, for callers who write SQL by hand:
-- enqueue_specs(array[pgrun.job_spec('resize', queue => 'images'), ...]). The
-- parameters are job_spec's attributes, in order, each NULL (the default) unless given.
-- (A function may share its name with a type; a call with arguments finds the
-- function.)
create or replace function pgrun.job_spec(
  kind             text,
  args             jsonb default null,
  queue            text default null,
  priority         integer default null,
  run_at           timestamptz default null,
  max_attempts     integer default null,
  unique_key       text default null,
  parent_id        bigint default null,
  model            text default null,
  timeout          interval default null,
  meta             jsonb default null,
  concurrency_key  text default null,
  unique_window    interval default null,
  on_conflict      text default null,
  model_required   boolean default null,
  sequence_key     text default null,
  debounce_key     text default null,
  debounce         interval default null,
  debounce_edge    text default null
)
returns pgrun.job_spec
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select row(kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id, model, timeout,
             meta, concurrency_key, unique_window, on_conflict, model_required, sequence_key, debounce_key,
             debounce, debounce_edge)::pgrun.job_spec
$$;

-- spec_at is the k-th spec of a batch given as arrays (enqueue_columns'), for the
-- few places that need one spec whole: an error's message, a spec retried alone.
create or replace function pgrun.spec_at(
  k integer, kinds text[], args jsonb[], queues text[], priorities integer[], run_ats timestamptz[],
  max_attempts integer[], unique_keys text[], parent_ids bigint[], models text[], timeouts interval[],
  metas jsonb[], concurrency_keys text[], unique_windows interval[], on_conflicts text[], model_requireds boolean[],
  sequence_keys text[] default null, debounce_keys text[] default null, debounces interval[] default null,
  debounce_edges text[] default null
)
returns pgrun.job_spec
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select row(kinds[k], args[k], queues[k], priorities[k], run_ats[k], max_attempts[k], unique_keys[k],
             parent_ids[k], models[k], timeouts[k], metas[k], concurrency_keys[k], unique_windows[k],
             on_conflicts[k], model_requireds[k], sequence_keys[k], debounce_keys[k], debounces[k],
             debounce_edges[k])::pgrun.job_spec
$$;

-- enqueue_specs is enqueue_columns with the specs as an array of pgrun.job_spec:
-- one row per spec, in order, the job, whether it was deduplicated and whether it
-- was folded.
create or replace function pgrun.enqueue_specs(specs pgrun.job_spec[])
returns setof pgrun.enqueued
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  if specs is null then
    raise exception 'enqueue_specs needs an array of pgrun.job_spec, got NULL'
      using errcode = '22023',
            hint = 'Pass array[pgrun.job_spec(''resize'', args => ''{"w": 64}''), ...], or JSON to pgrun.enqueue_jobs.';
  end if;
  if cardinality(specs) = 0 then
    return;
  end if;
  -- One scan unzips the specs, in their order, into one array per attribute.
  return query
  select e.*
  from (select array_agg(s.kind) as kinds, array_agg(s.args) as args, array_agg(s.queue) as queues,
               array_agg(s.priority) as priorities, array_agg(s.run_at) as run_ats,
               array_agg(s.max_attempts) as max_attempts, array_agg(s.unique_key) as unique_keys,
               array_agg(s.parent_id) as parent_ids, array_agg(s.model) as models, array_agg(s.timeout) as timeouts,
               array_agg(s.meta) as metas, array_agg(s.concurrency_key) as concurrency_keys,
               array_agg(s.unique_window) as unique_windows, array_agg(s.on_conflict) as on_conflicts,
               array_agg(s.model_required) as model_requireds, array_agg(s.sequence_key) as sequence_keys,
               array_agg(s.debounce_key) as debounce_keys, array_agg(s.debounce) as debounces,
               array_agg(s.debounce_edge) as debounce_edges
        from unnest(specs) s) a,
       lateral pgrun.enqueue_columns(a.kinds, a.args, a.queues, a.priorities, a.run_ats, a.max_attempts,
                                     a.unique_keys, a.parent_ids, a.models, a.timeouts, a.metas, a.concurrency_keys,
                                     a.unique_windows, a.on_conflicts, a.model_requireds, a.sequence_keys,
                                     a.debounce_keys, a.debounces, a.debounce_edges) e;
end;
$$;

-- enqueue_batch is enqueue_columns returning the jobs alone: one per spec, in the
-- specs' order, a duplicate's holder in its place (a folded spec's job too). The
-- arrays after concurrency_keys were appended by 0014, those after model_requireds by
-- 0024; earlier calls are unchanged. For whether a job was deduplicated or folded,
-- call enqueue_columns.
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
  concurrency_keys  text[] default null,
  unique_windows    interval[] default null,
  on_conflicts      text[] default null,
  model_requireds   boolean[] default null,
  sequence_keys     text[] default null,
  debounce_keys     text[] default null,
  debounces         interval[] default null,
  debounce_edges    text[] default null
)
returns setof pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  j  pgrun.jobs;
begin
  -- A row of pgrun.enqueued is a row of pgrun.jobs and then deduplicated and folded,
  -- which the assignment leaves out.
  for j in select * from pgrun.enqueue_columns(kinds, args, queues, priorities, run_ats, max_attempts,
             unique_keys, parent_ids, models, timeouts, metas, concurrency_keys, unique_windows, on_conflicts,
             model_requireds, sequence_keys, debounce_keys, debounces, debounce_edges) loop
    return next j;
  end loop;
end;
$$;

-- enqueue_jobs is enqueue_specs with the specs as JSON: an array of objects whose keys
-- are job_spec's attribute names (read from the catalog: a key the type does not have
-- is refused, naming it), kind required. It returns the jobs alone, one per element in
-- the array's order, a duplicate's holder in its place. Raises 22023 naming the
-- element (counted from 0) that is not an object, has an unknown key or a value of
-- the wrong type; nothing is written.
create or replace function pgrun.enqueue_jobs(specs jsonb)
returns setof pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  bad    record;
  typed  pgrun.job_spec[];
  j      pgrun.jobs;
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
  where not exists (select 1 from pg_attribute a
                    where a.attrelid = 'pgrun.job_spec'::regclass and a.attnum > 0 and not a.attisdropped
                      and a.attname = k.key)
  order by e.idx
  limit 1;
  if found then
    raise exception 'element % of enqueue_jobs has unknown key %', bad.idx - 1, quote_literal(bad.key)
      using errcode = '22023',
            hint = (select 'Known keys (the attributes of pgrun.job_spec): '
                           || string_agg(a.attname, ', ' order by a.attnum) || '.'
                    from pg_attribute a
                    where a.attrelid = 'pgrun.job_spec'::regclass and a.attnum > 0 and not a.attisdropped);
  end if;

  -- Typed values: one try for the whole array; only if it fails, find the culprit,
  -- trying each key of each element on its own.
  begin
    typed := array(select r from jsonb_populate_recordset(null::pgrun.job_spec, specs) r);
  exception when data_exception then
    for bad in
      select e.idx, a.attname, format_type(a.atttypid, a.atttypmod) as type, e.v -> a.attname::text as v
      from jsonb_array_elements(specs) with ordinality e(v, idx)
      join pg_attribute a on a.attrelid = 'pgrun.job_spec'::regclass and a.attnum > 0 and not a.attisdropped
                         and e.v ? a.attname::text
      order by e.idx, a.attnum
    loop
      begin
        perform jsonb_populate_record(null::pgrun.job_spec, jsonb_build_object(bad.attname, bad.v));
      exception when data_exception then
        raise exception 'element % of enqueue_jobs has %: % of the wrong type (%)', bad.idx - 1, bad.attname, bad.v, sqlerrm
          using errcode = '22023',
                hint = format('Give %s as %s: run_at as a timestamp such as "2030-01-02T15:04:05Z", timeout, unique_window and debounce as an interval such as "30 seconds".',
                              bad.attname, bad.type);
      end;
    end loop;
    raise;
  end;
  -- As in enqueue_batch, the jobs without deduplicated.
  for j in select * from pgrun.enqueue_specs(typed) loop
    return next j;
  end loop;
end;
$$;
