-- 41_runs.sql: running a DAG workflow. start_run creates the run and a job per node;
-- node_finished (called by dispatch when a node job finishes) releases dependents,
-- skips what a failure cuts off and ends the run; node_redriven (called by retry_job)
-- and retry_run resume a run that ended on a failure.

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

-- run_nodes lists the nodes of run r's workflow version: name, deps (a JSON array) and
-- whether the node is optional.
create or replace function pgrun.run_nodes(r pgrun.runs)
returns table (name text, deps jsonb, optional boolean)
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select n ->> 'name', coalesce(n -> 'deps', '[]'), coalesce((n ->> 'optional')::boolean, false)
  from pgrun.workflows w, jsonb_array_elements(w.spec -> 'nodes') n
  where w.name = r.workflow and w.version = r.version
$$;

-- node_passed says whether a node that ended in status with error lets its dependents
-- run: it succeeded, or was skipped by its skip_if, or it is optional (any end).
create or replace function pgrun.node_passed(status pgrun.job_status, error jsonb, optional boolean)
returns boolean
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select status = 'succeeded'
      or (status = 'skipped' and error ->> 'class' = 'skip_if')
      or (optional and status in ('succeeded', 'failed', 'cancelled', 'skipped'))
$$;

-- run_context is what references resolve against: {"input": ..., "NODE": {"output":
-- ..., "status": ...}, ...} for the run's finished nodes; with heads, only the entries
-- named there ("input" and node names: the first segments of the references a
-- template holds; NULL for all), so that readying a node reads the outputs it refers
-- to and not every finished node's.
create or replace function pgrun.run_context(run_id bigint, heads text[])
returns jsonb
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select case when heads is null or 'input' = any (heads) then jsonb_build_object('input', r.input)
              else '{}'::jsonb end
      || coalesce((
    select jsonb_object_agg(j.node, jsonb_build_object('output', j.result, 'status', j.status))
    from pgrun.jobs j
    where j.run_id = r.id and j.parent_id is null
      and (heads is null or j.node = any (heads))
      and j.status in ('succeeded', 'failed', 'cancelled', 'skipped')), '{}')
  from pgrun.runs r where r.id = run_id
$$;

-- run_context without heads is the whole context.
create or replace function pgrun.run_context(run_id bigint)
returns jsonb
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select pgrun.run_context(run_id, null::text[])
$$;

-- node_spec returns the spec of node in spec, a workflow version's spec.
create or replace function pgrun.node_spec(spec jsonb, node text)
returns jsonb
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select n from jsonb_array_elements(spec -> 'nodes') n where n ->> 'name' = node
$$;

-- fail_node fails DAG node job id, still pending, for a reason of its own (class, and
-- message) at v_now: the node cannot be made ready (bad_map, bad_args). Its dispatch
-- then ends or fails the run as for any failed node.
create or replace function pgrun.fail_node(id bigint, class text, message text, v_now timestamptz)
returns void
language sql
set search_path = pgrun, pg_catalog
as $$
  update pgrun.jobs j set status = 'failed', finished_at = v_now,
    error = jsonb_build_object('class', class, 'message', message)
  where j.id = fail_node.id and j.status = 'pending'
$$;

-- node_ready moves a pending node whose dependencies are all done on: skipped if its
-- skip_if holds; for an input node, succeeded with the submitted input or waiting for
-- it; for a map node, waiting for one child per element of the referenced array (failed,
-- class bad_map, if it is not an array or has more than max_map_items() elements);
-- otherwise queued with its args resolved. A node whose resolved args (a map child's,
-- for a map node) are over max_json_bytes(), or whose references resolve to more than
-- a JSON value can hold, fails with class bad_args: the enqueue rules' bound on args,
-- applied here so that the dispatch that readies it cannot fail.
create or replace function pgrun.node_ready(j pgrun.jobs)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.node_ready(j, null);
end;
$$;

-- node_ready with node_spec is node_ready for callers that have the node's spec at
-- hand (NULL: looked up). References are resolved against the outputs they name only,
-- and a node without references reads none.
create or replace function pgrun.node_ready(j pgrun.jobs, node_spec jsonb)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  nd     jsonb := coalesce(node_spec, pgrun.workflow_node(j.run_id, j.node));
  refs   jsonb := jsonb_build_array(nd -> 'args', nd -> 'skip_if', nd -> 'map');
  -- Every reference and condition is an object key starting with $: without one in
  -- the text there is nothing to look up or resolve.
  plain  boolean := strpos(refs::text, '"$') = 0;
  heads  text[];
  ctx    jsonb := '{}';
  v_now  timestamptz := pgrun.clock();
  skip   boolean := false;
  is_input boolean := coalesce(nd ->> 'input', 'false') = 'true';
  items  jsonb;
  v_args jsonb;
  kids   jsonb;
  given  jsonb;
  small  jsonb;
  fault  text;
  bad    record;
begin
  if plain then
    v_args := coalesce(nd -> 'args', '{}');
  else
    -- What references build is bounded only by what they name (outputs of up to
    -- max_json_bytes() each, a map node's of many); a value past what a jsonb can hold
    -- (program_limit_exceeded) fails the node instead of its dispatch. Nothing is
    -- written in here.
    begin
      heads := array(select distinct split_part(p, '.', 1) from pgrun.workflow_refs(refs) p);
      if cardinality(heads) > 0 then
        ctx := pgrun.run_context(j.run_id, heads);
      end if;
      skip := nd ? 'skip_if' and pgrun.eval_condition(nd -> 'skip_if', ctx);
      if not skip and not is_input then
        if nd ? 'map' then
          items := pgrun.resolve(nd -> 'map', ctx);
          if jsonb_typeof(items) = 'array' and jsonb_array_length(items) between 1 and pgrun.max_map_items() then
            -- Each child's args resolve against the context they read, not a copy of
            -- every node's output per element.
            small := pgrun.context_for(ctx, nd -> 'args');
            select jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                     'kind', nd ->> 'kind', 'queue', nd ->> 'queue', 'priority', nd -> 'priority',
                     'args', pgrun.resolve(coalesce(nd -> 'args', '{}'), small || jsonb_build_object('item', x)),
                     'model', nd ->> 'model', 'timeout', nd ->> 'timeout', 'max_attempts', nd -> 'max_attempts',
                     'parent_id', j.id, 'meta', jsonb_build_object('map_index', i - 1)))
                   order by i)
            into kids
            from jsonb_array_elements(items) with ordinality e(x, i);
          end if;
        else
          v_args := case when nd ? 'args' then pgrun.resolve(nd -> 'args', ctx) else '{}' end;
        end if;
      end if;
    exception when program_limit_exceeded then
      fault := format('the references of node %s resolve to more than a JSON value can hold (%s)', j.node, sqlerrm);
    end;
  end if;

  if fault is not null then
    perform pgrun.fail_node(j.id, 'bad_args', fault, v_now);
    return;
  end if;
  if skip then
    update pgrun.jobs set status = 'skipped', finished_at = v_now,
      error = jsonb_build_object('class', 'skip_if', 'message', 'skip_if held')
    where id = j.id and status = 'pending';
    return;
  end if;
  if is_input then
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
    if jsonb_typeof(items) <> 'array' then
      perform pgrun.fail_node(j.id, 'bad_map',
        format('map of node %s resolved to %s, not an array', j.node, jsonb_typeof(items)), v_now);
      return;
    end if;
    if jsonb_array_length(items) > pgrun.max_map_items() then
      perform pgrun.fail_node(j.id, 'bad_map',
        format('map of node %s resolved to %s elements, over the limit of %s',
               j.node, jsonb_array_length(items), pgrun.max_map_items()), v_now);
      return;
    end if;
    -- A child's args over the limit would fail the enqueue below: the first one is
    -- looked for only when all of them together are over it.
    if pg_column_size(kids) > pgrun.max_json_bytes() then
      select e.i - 1 as at, pg_column_size(e.x -> 'args') as size into bad
      from jsonb_array_elements(kids) with ordinality e(x, i)
      where pg_column_size(e.x -> 'args') > pgrun.max_json_bytes()
      order by e.i limit 1;
      if found then
        perform pgrun.fail_node(j.id, 'bad_args',
          format('args of element %s of map node %s resolved to %s bytes, over the limit of %s bytes',
                 bad.at, j.node, bad.size, pgrun.max_json_bytes()), v_now);
        return;
      end if;
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
    perform pgrun.enqueue_jobs(kids);
    perform pgrun.queue_readied(coalesce(nd ->> 'queue', 'default'));
    return;
  end if;
  if pg_column_size(v_args) > pgrun.max_json_bytes() then
    perform pgrun.fail_node(j.id, 'bad_args',
      format('args of node %s resolved to %s bytes, over the limit of %s bytes',
             j.node, pg_column_size(v_args), pgrun.max_json_bytes()), v_now);
    return;
  end if;
  update pgrun.jobs set status = 'queued', run_at = v_now, args = v_args
  where id = j.id and status = 'pending';
  perform pg_notify('pgrun_jobs', j.queue);
  perform pgrun.queue_readied(j.queue);
end;
$$;

-- start_run starts a run of the newest version of workflow with input, creating the
-- run and one job per node atomically; nodes without dependencies are made ready at
-- once. With unique_key and a running run holding it, that run is returned instead.
-- Raises P0002 for an unknown workflow; 22023, writing nothing, for a name no workflow
-- can have (define_workflow's rule), an input that is not an object or is over
-- max_json_bytes(), or a unique_key that is empty or over max_key_bytes() (check_key,
-- as a job's). In the tenant mode the run and its nodes belong to the caller's
-- tenant, and unique keys are per tenant.
create or replace function pgrun.start_run(workflow text, input jsonb default '{}', unique_key text default null)
returns pgrun.runs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  w  pgrun.workflows;
  r  pgrun.runs;
  x  record;
  t  text := pgrun.session_tenant(); -- the run's tenant (NULL with the mode off)
begin
  if workflow is null or workflow !~ '^[a-z][a-z0-9_.-]{0,62}$' then
    raise exception 'workflow name % is not valid',
      coalesce(quote_literal(left(workflow, 63) || case when length(workflow) > 63 then '...' else '' end), 'NULL')
      using errcode = '22023',
            hint = 'A workflow name has 1 to 63 characters from a-z, 0-9, _, - and . starting with a letter; list them with SELECT DISTINCT name FROM pgrun.workflows;';
  end if;
  select * into w from pgrun.workflows x where x.name = start_run.workflow order by version desc limit 1;
  if not found then
    raise exception 'workflow % is not defined', coalesce(quote_literal(workflow), 'NULL')
      using errcode = 'P0002', hint = 'Define it first: SELECT pgrun.define_workflow(name, spec); list them with SELECT DISTINCT name FROM pgrun.workflows;';
  end if;
  if input is null or jsonb_typeof(input) <> 'object' then
    raise exception 'run input must be a JSON object, got %', coalesce(jsonb_typeof(input), 'NULL')
      using errcode = '22023', hint = 'Pass an object such as {"url": "..."}.';
  end if;
  perform pgrun.check_json_size('run input', input);
  perform pgrun.check_key('unique_key', unique_key); -- indexed (runs_unique_key_tenant_idx)
  if unique_key is not null then
    select * into r from pgrun.runs x
    where x.unique_key = start_run.unique_key and x.tenant is not distinct from t and x.status = 'running';
    if found then
      return r;
    end if;
  end if;
  insert into pgrun.runs (workflow, version, input, unique_key, created_at, tenant)
  values (w.name, w.version, input, unique_key, pgrun.clock(), t)
  returning * into r;
  insert into pgrun.jobs (kind, queue, status, run_id, node, deps_remaining, model, timeout,
                          max_attempts, priority, tenant)
  select coalesce(n ->> 'kind', 'pgrun.input'), coalesce(n ->> 'queue', 'default'), 'pending', r.id,
         n ->> 'name', jsonb_array_length(coalesce(n -> 'deps', '[]')), n ->> 'model',
         (n ->> 'timeout')::interval, (n ->> 'max_attempts')::integer, (n ->> 'priority')::smallint, t
  from jsonb_array_elements(w.spec -> 'nodes') n;
  for x in
    select j as job, n as spec
    from pgrun.jobs j join jsonb_array_elements(w.spec -> 'nodes') n on n ->> 'name' = j.node
    where j.run_id = r.id and j.deps_remaining = 0
    order by j.id
  loop
    perform pgrun.node_ready(x.job, x.spec);
  end loop;
  select * into r from pgrun.runs x where x.id = r.id;
  return r;
end;
$$;

-- (node_dependents, unused since node_finished reads the spec once.)

-- node_downstream lists the nodes of run r's workflow that depend on node, directly
-- or not. Each step looks the next nodes up in a map built once ({"node":
-- [dependents]}), so a long chain costs linear time, not a scan of every edge per step.
create or replace function pgrun.node_downstream(r pgrun.runs, node text)
returns setof text
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  with recursive subs as materialized (
    select coalesce(jsonb_object_agg(g.dep, g.names), '{}') as m
    from (select d.dep, jsonb_agg(n.name) as names
          from pgrun.run_nodes(r) n, jsonb_array_elements_text(n.deps) d(dep)
          group by d.dep) g
  ), down(name) as (
    select x from subs, jsonb_array_elements_text(subs.m -> node) x
    union
    select x from down, subs, jsonb_array_elements_text(subs.m -> down.name) x
  )
  select name from down
$$;

-- node_finished releases what depends on node job j. A success (or a skip by
-- skip_if, or any end of an optional node) counts down its dependents and readies
-- those with nothing left to wait for. A required node that failed or was cancelled
-- fails the run, skips every pending node downstream of it (class upstream_failed) and
-- cancels what is still unfinished elsewhere (error "cause": "run_failed", which a
-- redrive looks for). When no node is active any more the run ends: succeeded if every
-- required node passed (its output: the leaf nodes' outputs, or {"truncated": true,
-- ...} past max_json_bytes() in all), else failed naming the first that did not (a
-- redriven run can end so). Takes the run's row lock; does nothing once the run has
-- ended.
create or replace function pgrun.node_finished(j pgrun.jobs)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  r       pgrun.runs;
  spec    jsonb;
  nd      jsonb;
  passed  boolean;
  d       record;
  todo    bigint;
  c       pgrun.jobs;
  bad     pgrun.jobs;
  v_output jsonb;
  v_now   timestamptz := pgrun.clock();
begin
  select * into r from pgrun.runs where id = j.run_id for update;
  if not found or r.status <> 'running' then
    return;
  end if;
  select w.spec into spec from pgrun.workflows w where w.name = r.workflow and w.version = r.version;
  nd := pgrun.node_spec(spec, j.node);
  passed := pgrun.node_passed(j.status, j.error, coalesce((nd ->> 'optional')::boolean, false));

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
      and x.node in (select pgrun.node_downstream(r, j.node));
    for todo in
      select y.id from pgrun.jobs y
      where y.run_id = r.id and y.parent_id is null and pgrun.is_active(y.status)
      order by y.id
    loop
      c := pgrun.cancel_tree(todo, format('run %s failed at node %s', r.id, j.node));
      if c.id is not null then
        update pgrun.jobs set error = error || '{"cause": "run_failed"}' where id = c.id;
      end if;
    end loop;
    return;
  end if;

  -- Count down the dependents; ready those with nothing left to wait for. The UPDATE
  -- completes before any of them is readied, so a nested dispatch sees them all.
  for d in
    update pgrun.jobs x
    set deps_remaining = x.deps_remaining - 1
    from jsonb_array_elements(spec -> 'nodes') n
    -- status as text: as "status = 'pending'" the planner may AND the run's few rows
    -- with the partial index of every parked job.
    where x.run_id = r.id and x.parent_id is null and x.status::text = 'pending'
      and n -> 'deps' ? j.node and x.node = n ->> 'name'
    returning x as job, n as spec
  loop
    if (d.job).deps_remaining = 0 then
      perform pgrun.node_ready(d.job, d.spec);
    end if;
  end loop;

  if not exists (select 1 from pgrun.jobs x where x.run_id = r.id and x.parent_id is null
                 and pgrun.is_active(x.status)) then
    -- The run's jobs are read first (OFFSET 0 keeps them a subquery of their own), by
    -- jobs_run_idx, and then ordered: as one query, "order by id limit 1" let the
    -- planner walk the primary key from the table's first job, filtering for the run,
    -- whenever stale statistics made a run look like a thousand rows or more (a table
    -- vacuumed while nearly empty and refilled since): 30-190 ms for each finished run
    -- on a table of 37,000 jobs, a chain of three nodes at 35-90 runs/s instead of 250.
    select x.* into bad
    from (select * from pgrun.jobs y where y.run_id = r.id and y.parent_id is null offset 0) x
    join pgrun.run_nodes(r) n on n.name = x.node
    where not pgrun.node_passed(x.status, x.error, n.optional)
    order by x.id limit 1;
    if found then
      update pgrun.runs set status = 'failed', finished_at = v_now,
        error = jsonb_build_object('node', bad.node, 'job_id', bad.id, 'status', bad.status, 'error', bad.error)
      where id = r.id and status = 'running';
      return;
    end if;
    -- Every node passed: the run's output is its leaf nodes' outputs, up to
    -- max_json_bytes() in all. A result is within that bound (a map node's is its
    -- children's), but a run has up to max_workflow_nodes() leaves: past the bound (or
    -- past what a jsonb holds, which would fail this dispatch and leave the run
    -- running) the output says so instead, and each leaf's result stays on its job.
    begin
      select coalesce(jsonb_object_agg(x.node, x.result), '{}') into v_output
      from pgrun.jobs x, pgrun.workflows w
      where x.run_id = r.id and x.parent_id is null
        and w.name = r.workflow and w.version = r.version
        and not exists (select 1 from jsonb_array_elements(w.spec -> 'nodes') n
                        where (n -> 'deps') ? x.node);
    exception when program_limit_exceeded then
      v_output := null;
    end;
    if v_output is null or pg_column_size(v_output) > pgrun.max_json_bytes() then
      v_output := jsonb_build_object('truncated', true,
        'message', format('the outputs of the leaf nodes are over the limit of %s bytes in all: read each node''s result from pgrun.jobs',
                          pgrun.max_json_bytes()));
    end if;
    update pgrun.runs set status = 'succeeded', finished_at = v_now, output = v_output
    where id = r.id and status = 'running';
  end if;
end;
$$;

-- map_node_resumed makes map node m, which ended failed or cancelled after it fanned
-- out and has just been put back (pending or queued), wait for its children again: the
-- children that succeeded (or were skipped) count as done and keep their results, the
-- failed and cancelled ones are retried with retry_job. Returns false, changing
-- nothing, if m has no children (it never fanned out: node_ready must map it again).
create or replace function pgrun.map_node_resumed(m pgrun.jobs)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  c      pgrun.jobs;
  v_now  timestamptz := pgrun.clock();
begin
  if not exists (select 1 from pgrun.jobs x where x.parent_id = m.id) then
    return false;
  end if;
  update pgrun.jobs x
  set status = 'waiting', started_at = coalesce(x.started_at, v_now), finished_at = null, result = null,
      error = null, dispatched_at = null, lease_expires_at = null, children_failed = 0, child_errors = '{}',
      progress_current = (select count(*) from pgrun.jobs y where y.parent_id = m.id and y.status in ('succeeded', 'skipped'))
  where x.id = m.id and x.status in ('pending', 'queued');
  for c in select * from pgrun.jobs x where x.parent_id = m.id and x.status in ('failed', 'cancelled') order by x.id loop
    perform pgrun.retry_job(c.id);
    -- Its first end was counted by a parent that has since been reset: count it again.
    update pgrun.jobs set dispatched_at = null where id = c.id;
  end loop;
  -- Nothing to retry and nothing running (not seen in practice): it is done.
  update pgrun.jobs x
  set status = 'succeeded', finished_at = v_now,
      result = (select coalesce(jsonb_agg(y.result order by (y.meta ->> 'map_index')::integer), '[]')
                from pgrun.jobs y where y.parent_id = m.id)
  where x.id = m.id and x.status = 'waiting' and x.progress_current >= x.progress_total;
  return true;
end;
$$;

-- node_redriven resumes the run of DAG node j, which retry_job has just put back in
-- the queue after it failed or was cancelled. A run that had ended runs again
-- (finished_at, error and output cleared; 23505 if another running run has taken its
-- unique_key meanwhile). What the end of the run cut off goes back to pending: nodes
-- skipped as upstream_failed and nodes cancelled when the run failed or was cancelled
-- (error "cause" run_failed or run_cancelled; for runs that ended before causes were
-- recorded, nodes cancelled at the instant the run ended). Every pending node's
-- deps_remaining is recomputed as the number of its deps that have not passed
-- (succeeded, skipped by skip_if, or any end of an optional node) and those at zero
-- are made ready. j stays queued as retry_job left it, unless it cannot run as a plain
-- job: a map node waits for its children again (map_node_resumed), an input node
-- waits for its input again, a node whose deps have not all passed waits for them, and
-- a node that failed as bad_args (its args never resolved) is made ready again.
-- Takes the run's row lock.
create or replace function pgrun.node_redriven(j pgrun.jobs)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  r    pgrun.runs;
  nd   jsonb := pgrun.workflow_node(j.run_id, j.node);
  d    pgrun.jobs;
begin
  select * into r from pgrun.runs where id = j.run_id for update;
  if not found then
    return;
  end if;
  if r.status <> 'running' then
    begin
      update pgrun.runs set status = 'running', finished_at = null, error = null, output = null where id = r.id;
    exception when unique_violation then
      raise exception 'run % cannot resume: another running run holds its unique_key %', r.id, quote_literal(r.unique_key)
        using errcode = '23505',
              hint = 'Wait for or cancel the run that holds the key: SELECT id FROM pgrun.runs WHERE unique_key = ... AND status = ''running'';';
    end;
  end if;

  -- Back to pending: what the end of the run cut off, and j if it cannot stay queued.
  update pgrun.jobs x
  set status = 'pending', error = null, result = null, started_at = null, finished_at = null,
      dispatched_at = null, lease_expires_at = null, failures = 0, lease_expiries = 0
  where x.run_id = r.id and x.parent_id is null and x.id <> j.id
    and ((x.status = 'skipped' and x.error ->> 'class' = 'upstream_failed')
      or (x.status = 'cancelled' and (x.error ->> 'cause' in ('run_failed', 'run_cancelled')
          or (not x.error ? 'cause' and x.finished_at = r.finished_at
              and x.id::text is distinct from r.error ->> 'job_id'))));
  update pgrun.jobs set dispatched_at = null where id = j.id;

  -- deps_remaining of every pending node (and of j), from what has passed now. This
  -- UPDATE completes before any node is readied, so nested dispatches count down from it.
  update pgrun.jobs x set deps_remaining = c.n
  from (select p.id, count(dj.id) filter (where not pgrun.node_passed(dj.status, dj.error, dn.optional))::integer as n
        from pgrun.jobs p
        join pgrun.run_nodes(r) pn on pn.name = p.node
        left join lateral jsonb_array_elements_text(pn.deps) dep(name) on true
        left join pgrun.run_nodes(r) dn on dn.name = dep.name
        left join pgrun.jobs dj on dj.run_id = r.id and dj.parent_id is null and dj.node = dep.name
        where p.run_id = r.id and p.parent_id is null and (p.status = 'pending' or p.id = j.id)
        group by p.id) c
  where x.id = c.id;

  select * into d from pgrun.jobs where id = j.id;
  if d.status = 'queued' and (nd ? 'map' or coalesce(nd ->> 'input', 'false') = 'true' or d.deps_remaining > 0
                              or d.error ->> 'class' = 'bad_args') then
    if not (nd ? 'map' and d.deps_remaining = 0 and pgrun.map_node_resumed(d)) then
      update pgrun.jobs set status = 'pending', started_at = null where id = j.id and status = 'queued';
    end if;
  end if;

  for d in
    select * from pgrun.jobs x
    where x.run_id = r.id and x.parent_id is null and x.status = 'pending' and x.deps_remaining = 0
    order by x.id
  loop
    -- An earlier node_ready may have moved it on (a skip that released it, say).
    continue when (select status from pgrun.jobs where id = d.id) <> 'pending';
    if not (pgrun.workflow_node(r.id, d.node) ? 'map' and pgrun.map_node_resumed(d)) then
      perform pgrun.node_ready(d);
    end if;
  end loop;
end;
$$;

-- retry_run redrives run_id after it failed or was cancelled: every failed or cancelled
-- node is retried (retry_job), which puts the run back to running and what its end cut
-- off back to pending (node_redriven). Returns the run; NULL, changing nothing, if it is
-- running or succeeded; P0002 for an unknown run; 23505 if another running run has
-- taken its unique_key.
create or replace function pgrun.retry_run(run_id bigint)
returns pgrun.runs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  r  pgrun.runs;
  x  bigint;
begin
  select * into r from pgrun.runs y where y.id = retry_run.run_id for update;
  if not found then
    raise exception 'run % does not exist', coalesce(run_id::text, 'NULL')
      using errcode = 'P0002', hint = 'List runs with: SELECT id, workflow, status FROM pgrun.runs ORDER BY id DESC LIMIT 20;';
  end if;
  if r.status in ('running', 'succeeded') then
    return null;
  end if;
  for x in
    select y.id from pgrun.jobs y
    where y.run_id = r.id and y.parent_id is null and y.status in ('failed', 'cancelled')
    order by y.id
  loop
    perform pgrun.retry_job(x); -- NULL for a node an earlier redrive already put back
  end loop;
  select * into r from pgrun.runs y where y.id = r.id;
  return r;
end;
$$;

-- submit_input gives input node of run_id its payload. If the node is waiting it
-- succeeds with the payload now (returns true); if it is not reached yet the payload
-- is kept and used when it is (returns false). Refused, writing nothing: an unknown run
-- (P0002); a node that is not an input node or a NULL payload (22023); a second input
-- for the same node (23505); a run that has ended (55000: redrive it first); a payload
-- over max_json_bytes() (22023). A node name that no node can have is refused as not an
-- input node, named cut to 63 characters. Takes the run's row lock, so that the run cannot end
-- between the check and the write, and two inputs for one node are one after the other.
create or replace function pgrun.submit_input(run_id bigint, node text, payload jsonb)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  nd  jsonb;
  st  pgrun.run_state;
  t   text;
begin
  select r.status, r.tenant into st, t from pgrun.runs r where r.id = submit_input.run_id for update;
  if not found or not pgrun.may_touch(t) then
    raise exception 'run % does not exist', coalesce(run_id::text, 'NULL')
      using errcode = 'P0002', hint = 'List runs with: SELECT id, workflow, status FROM pgrun.runs ORDER BY id DESC LIMIT 20;';
  end if;
  if node ~ '^[a-z][a-z0-9_]{0,62}$' then
    nd := pgrun.workflow_node(run_id, node);
  end if;
  if nd is null or coalesce(nd ->> 'input', 'false') <> 'true' then
    raise exception 'node % of run % is not an input node',
      coalesce(quote_literal(left(node, 63) || case when length(node) > 63 then '...' else '' end), 'NULL'), run_id
      using errcode = '22023', hint = 'Only nodes declared with "input": true take inputs; see SELECT * FROM pgrun.run_status WHERE run_id = ...;';
  end if;
  if payload is null then
    raise exception 'input payload must not be NULL'
      using errcode = '22023', hint = 'Pass a JSON value, for example {"approved": true}.';
  end if;
  if exists (select 1 from pgrun.run_inputs i where i.run_id = submit_input.run_id and i.node = submit_input.node) then
    raise exception 'input for node % of run % was already submitted', node, run_id
      using errcode = '23505', hint = 'Each input node takes one input.';
  end if;
  if st <> 'running' then
    raise exception 'run % is %: it takes no more input', run_id, st
      using errcode = '55000',
            hint = case when st = 'succeeded' then 'Start a new run: SELECT pgrun.start_run(workflow, input);'
                        else 'Resume it first with SELECT pgrun.retry_run(run_id); then submit the input.' end;
  end if;
  perform pgrun.check_json_size(format('input for node %s of run %s', node, run_id), payload);
  insert into pgrun.run_inputs (run_id, node, payload, submitted_at)
  values (run_id, node, payload, pgrun.clock());
  update pgrun.jobs j set status = 'succeeded', result = payload, finished_at = pgrun.clock()
  where j.run_id = submit_input.run_id and j.node = submit_input.node and j.parent_id is null
    and j.status = 'waiting';
  return found;
end;
$$;

-- cancel_run cancels a running run and every unfinished node (map children too; the
-- nodes' errors carry "cause": "run_cancelled", so that retry_run can resume them).
-- Returns the run; NULL if it had already ended; P0002 for an unknown run (or, in the
-- tenant mode, another tenant's); 22023, writing nothing, for a reason over 2,000
-- bytes (it is stored on the run and on every node and child it cancels, and 2,000 is
-- where put_back cuts a worker's reason). Who may cancel: as cancel_job.
create or replace function pgrun.cancel_run(run_id bigint, reason text default null)
returns pgrun.runs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  r     pgrun.runs;
  todo  bigint;
  c     pgrun.jobs;
begin
  select x.* into r from pgrun.runs x where x.id = cancel_run.run_id;
  if not found or not pgrun.may_touch(r.tenant) then
    raise exception 'run % does not exist', coalesce(run_id::text, 'NULL')
      using errcode = 'P0002', hint = 'List runs with: SELECT id, workflow, status FROM pgrun.runs ORDER BY id DESC LIMIT 20;';
  end if;
  perform pgrun.check_may_cancel(format('run %s', run_id));
  if octet_length(reason) > 2000 then
    raise exception 'cancel reason is % bytes, over the limit of 2000 bytes', octet_length(reason)
      using errcode = '22023', hint = 'Say why in a sentence; keep details elsewhere and refer to them.';
  end if;
  update pgrun.runs x set status = 'cancelled', finished_at = pgrun.clock(),
    error = jsonb_build_object('class', 'cancelled', 'message', coalesce(reason, 'cancelled'))
  where x.id = cancel_run.run_id and x.status = 'running'
  returning x.* into r;
  if not found then
    return null;
  end if;
  for todo in
    select j.id from pgrun.jobs j
    where j.run_id = r.id and j.parent_id is null and pgrun.is_active(j.status)
    order by j.id
  loop
    c := pgrun.cancel_tree(todo, coalesce(reason, format('run %s cancelled', r.id)));
    if c.id is not null then
      update pgrun.jobs j set error = j.error || '{"cause": "run_cancelled"}' where j.id = c.id;
    end if;
  end loop;
  return r;
end;
$$;
