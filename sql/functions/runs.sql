-- runs.sql: running a DAG workflow. start_run creates the run and a job per node;
-- node_finished (called by dispatch when a node job finishes) releases dependents,
-- skips what a failure cuts off and ends the run.

-- workflow_node returns the spec of node in run_id's workflow version.
create or replace function pgrun.workflow_node(run_id bigint, node text)
returns jsonb
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select n from pgrun.runs r
  join pgrun.workflows w on w.name = r.workflow and w.version = r.version,
  jsonb_array_elements(w.spec -> 'nodes') n
  where r.id = run_id and n ->> 'name' = node
$$;

-- run_context is what references resolve against: {"input": ..., "NODE": {"output":
-- ..., "status": ...}, ...} for the run's finished nodes.
create or replace function pgrun.run_context(run_id bigint)
returns jsonb
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select jsonb_build_object('input', r.input) || coalesce((
    select jsonb_object_agg(j.node, jsonb_build_object('output', j.result, 'status', j.status))
    from pgrun.jobs j
    where j.run_id = r.id and j.parent_id is null
      and j.status in ('succeeded', 'failed', 'cancelled', 'skipped')), '{}')
  from pgrun.runs r where r.id = run_id
$$;

-- node_ready moves a pending node whose dependencies are all done on: skipped if its
-- skip_if holds; for an input node, succeeded with the submitted input or waiting for
-- it; for a map node, waiting for one child per element of the referenced array;
-- otherwise queued with its args resolved.
create or replace function pgrun.node_ready(j pgrun.jobs)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  nd     jsonb := pgrun.workflow_node(j.run_id, j.node);
  ctx    jsonb := pgrun.run_context(j.run_id);
  v_now  timestamptz := pgrun.clock();
  items  jsonb;
  given  jsonb;
begin
  if nd ? 'skip_if' and pgrun.eval_condition(nd -> 'skip_if', ctx) then
    update pgrun.jobs set status = 'skipped', finished_at = v_now,
      error = jsonb_build_object('class', 'skip_if', 'message', 'skip_if held')
    where id = j.id and status = 'pending';
    return;
  end if;
  if coalesce(nd ->> 'input', 'false') = 'true' then
    select payload into given from pgrun.run_inputs i where i.run_id = j.run_id and i.node = j.node;
    if found then
      update pgrun.jobs set status = 'succeeded', result = given, started_at = v_now, finished_at = v_now
      where id = j.id and status = 'pending';
    else
      update pgrun.jobs set status = 'waiting', started_at = v_now where id = j.id and status = 'pending';
    end if;
    return;
  end if;
  if nd ? 'map' then
    items := pgrun.resolve(nd -> 'map', ctx);
    if jsonb_typeof(items) <> 'array' then
      update pgrun.jobs set status = 'failed', finished_at = v_now,
        error = jsonb_build_object('class', 'bad_map',
                  'message', format('map of node %s resolved to %s, not an array', j.node, jsonb_typeof(items)))
      where id = j.id and status = 'pending';
      return;
    end if;
    update pgrun.jobs set status = 'waiting', started_at = v_now, progress_current = 0,
      progress_total = jsonb_array_length(items), children_failed = 0,
      failure_ratio = coalesce((nd ->> 'failure_ratio')::double precision, 1.0)
    where id = j.id and status = 'pending';
    if jsonb_array_length(items) = 0 then
      update pgrun.jobs set status = 'succeeded', result = '[]', finished_at = v_now
      where id = j.id and status = 'waiting';
      return;
    end if;
    perform pgrun.enqueue_jobs((
      select jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
               'kind', nd ->> 'kind', 'queue', nd ->> 'queue', 'priority', nd -> 'priority',
               'args', pgrun.resolve(coalesce(nd -> 'args', '{}'), ctx || jsonb_build_object('item', x)),
               'model', nd ->> 'model', 'timeout', nd ->> 'timeout', 'max_attempts', nd -> 'max_attempts',
               'parent_id', j.id, 'meta', jsonb_build_object('map_index', i - 1)))
             order by i)
      from jsonb_array_elements(items) with ordinality e(x, i)));
    return;
  end if;
  update pgrun.jobs set status = 'queued', run_at = v_now,
    args = pgrun.resolve(coalesce(nd -> 'args', '{}'), ctx)
  where id = j.id and status = 'pending';
  perform pg_notify('pgrun_jobs', j.queue);
end;
$$;

-- start_run starts a run of the newest version of workflow with input, creating the
-- run and one job per node atomically; nodes without dependencies are made ready at
-- once. With unique_key and a running run holding it, that run is returned instead.
-- Raises P0002 for an unknown workflow.
create or replace function pgrun.start_run(workflow text, input jsonb default '{}', unique_key text default null)
returns pgrun.runs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  w  pgrun.workflows;
  r  pgrun.runs;
  j  pgrun.jobs;
begin
  select * into w from pgrun.workflows x where x.name = start_run.workflow order by version desc limit 1;
  if not found then
    raise exception 'workflow % is not defined', coalesce(quote_literal(workflow), 'NULL')
      using errcode = 'P0002', hint = 'Define it first: SELECT pgrun.define_workflow(name, spec); list them with SELECT DISTINCT name FROM pgrun.workflows;';
  end if;
  if input is null or jsonb_typeof(input) <> 'object' then
    raise exception 'run input must be a JSON object, got %', coalesce(jsonb_typeof(input), 'NULL')
      using errcode = '22023', hint = 'Pass an object such as {"url": "..."}.';
  end if;
  if unique_key is not null then
    select * into r from pgrun.runs x where x.unique_key = start_run.unique_key and x.status = 'running';
    if found then
      return r;
    end if;
  end if;
  insert into pgrun.runs (workflow, version, input, unique_key, created_at)
  values (w.name, w.version, input, unique_key, pgrun.clock())
  returning * into r;
  insert into pgrun.jobs (kind, queue, status, run_id, node, deps_remaining, model, timeout,
                          max_attempts, priority)
  select coalesce(n ->> 'kind', 'pgrun.input'), coalesce(n ->> 'queue', 'default'), 'pending', r.id,
         n ->> 'name', jsonb_array_length(coalesce(n -> 'deps', '[]')), n ->> 'model',
         (n ->> 'timeout')::interval, (n ->> 'max_attempts')::integer, (n ->> 'priority')::smallint
  from jsonb_array_elements(w.spec -> 'nodes') n;
  for j in select * from pgrun.jobs x where x.run_id = r.id and x.deps_remaining = 0 order by id loop
    perform pgrun.node_ready(j);
  end loop;
  select * into r from pgrun.runs x where x.id = r.id;
  return r;
end;
$$;

-- node_dependents lists the nodes of run r's workflow that depend directly on node.
create or replace function pgrun.node_dependents(r pgrun.runs, node text)
returns setof text
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select n ->> 'name'
  from pgrun.workflows w, jsonb_array_elements(w.spec -> 'nodes') n
  where w.name = r.workflow and w.version = r.version and (n -> 'deps') ? node
$$;

-- node_finished releases what depends on node job j. A success (or a skip by
-- skip_if, or any end of an optional node) counts down its dependents and readies
-- those with nothing left to wait for. A required node that failed or was cancelled
-- fails the run, skips its pending dependents (upstream_failed) and cancels what is
-- still unfinished. The run succeeds when every node has ended.
create or replace function pgrun.node_finished(j pgrun.jobs)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  r       pgrun.runs;
  nd      jsonb := pgrun.workflow_node(j.run_id, j.node);
  passed  boolean;
  d       pgrun.jobs;
  v_now   timestamptz := pgrun.clock();
begin
  select * into r from pgrun.runs where id = j.run_id for update;
  if not found or r.status <> 'running' then
    return;
  end if;
  passed := j.status = 'succeeded'
         or (j.status = 'skipped' and j.error ->> 'class' = 'skip_if')
         or coalesce((nd ->> 'optional')::boolean, false);

  if not passed then
    -- A required node failed or was cancelled. The run fails first, so that the
    -- dispatches of the nodes skipped or cancelled below find it over.
    update pgrun.runs set status = 'failed', finished_at = v_now,
      error = jsonb_build_object('node', j.node, 'job_id', j.id, 'status', j.status, 'error', j.error)
    where id = r.id and status = 'running';
    update pgrun.jobs x
    set status = 'skipped', finished_at = v_now,
        error = jsonb_build_object('class', 'upstream_failed',
                  'message', format('upstream node %s ended %s', j.node, j.status))
    where x.run_id = r.id and x.parent_id is null and x.status = 'pending'
      and x.node in (select pgrun.node_dependents(r, j.node));
    perform pgrun.cancel_job(x.id, format('run %s failed at node %s', r.id, j.node))
    from pgrun.jobs x
    where x.run_id = r.id and x.parent_id is null and x.status in ('pending', 'queued', 'running', 'waiting');
    return;
  end if;

  -- Count down the dependents; ready those with nothing left to wait for. The UPDATE
  -- completes before any of them is readied, so a nested dispatch sees them all.
  for d in
    update pgrun.jobs x
    set deps_remaining = x.deps_remaining - 1
    where x.run_id = r.id and x.parent_id is null and x.status = 'pending'
      and x.node in (select pgrun.node_dependents(r, j.node))
    returning x.*
  loop
    if d.deps_remaining = 0 then
      perform pgrun.node_ready(d);
    end if;
  end loop;

  if not exists (select 1 from pgrun.jobs x where x.run_id = r.id and x.parent_id is null
                 and x.status in ('pending', 'queued', 'running', 'waiting')) then
    -- Every node is done: the run's output is its leaf nodes' outputs.
    update pgrun.runs set status = 'succeeded', finished_at = v_now,
      output = (select coalesce(jsonb_object_agg(x.node, x.result), '{}')
                from pgrun.jobs x, pgrun.workflows w
                where x.run_id = r.id and x.parent_id is null
                  and w.name = r.workflow and w.version = r.version
                  and not exists (select 1 from jsonb_array_elements(w.spec -> 'nodes') n
                                  where (n -> 'deps') ? x.node))
    where id = r.id and status = 'running';
  end if;
end;
$$;

-- submit_input gives input node of run_id its payload. If the node is waiting it
-- succeeds with the payload now (returns true); if it is not reached yet the payload
-- is kept and used when it is (returns false). A second input for the same node is
-- refused.
create or replace function pgrun.submit_input(run_id bigint, node text, payload jsonb)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  nd jsonb;
begin
  perform 1 from pgrun.runs r where r.id = submit_input.run_id;
  if not found then
    raise exception 'run % does not exist', coalesce(run_id::text, 'NULL')
      using errcode = 'P0002', hint = 'List runs with: SELECT id, workflow, status FROM pgrun.runs ORDER BY id DESC LIMIT 20;';
  end if;
  nd := pgrun.workflow_node(run_id, node);
  if nd is null or coalesce(nd ->> 'input', 'false') <> 'true' then
    raise exception 'node % of run % is not an input node', coalesce(quote_literal(node), 'NULL'), run_id
      using errcode = '22023', hint = 'Only nodes declared with "input": true take inputs; see SELECT * FROM pgrun.run_status WHERE run_id = ...;';
  end if;
  if payload is null then
    raise exception 'input payload must not be NULL'
      using errcode = '22023', hint = 'Pass a JSON value, for example {"approved": true}.';
  end if;
  insert into pgrun.run_inputs (run_id, node, payload, submitted_at)
  values (run_id, node, payload, pgrun.clock())
  on conflict do nothing;
  if not found then
    raise exception 'input for node % of run % was already submitted', node, run_id
      using errcode = '23505', hint = 'Each input node takes one input.';
  end if;
  update pgrun.jobs j set status = 'succeeded', result = payload, finished_at = pgrun.clock()
  where j.run_id = submit_input.run_id and j.node = submit_input.node and j.parent_id is null
    and j.status = 'waiting';
  return found;
end;
$$;

-- cancel_run cancels a running run and every unfinished node (map children too).
-- Returns the run; NULL if it had already ended; P0002 for an unknown run.
create or replace function pgrun.cancel_run(run_id bigint, reason text default null)
returns pgrun.runs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  r pgrun.runs;
begin
  perform 1 from pgrun.runs x where x.id = cancel_run.run_id;
  if not found then
    raise exception 'run % does not exist', coalesce(run_id::text, 'NULL')
      using errcode = 'P0002', hint = 'List runs with: SELECT id, workflow, status FROM pgrun.runs ORDER BY id DESC LIMIT 20;';
  end if;
  update pgrun.runs x set status = 'cancelled', finished_at = pgrun.clock(),
    error = jsonb_build_object('class', 'cancelled', 'message', coalesce(reason, 'cancelled'))
  where x.id = cancel_run.run_id and x.status = 'running'
  returning x.* into r;
  if not found then
    return null;
  end if;
  perform pgrun.cancel_job(j.id, coalesce(reason, format('run %s cancelled', r.id)))
  from pgrun.jobs j
  where j.run_id = r.id and j.parent_id is null and j.status in ('pending', 'queued', 'running', 'waiting');
  return r;
end;
$$;
