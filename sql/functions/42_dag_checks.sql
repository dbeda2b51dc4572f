-- 42_dag_checks.sql: what define_workflow checks before it stores a definition (40_dag.sql):
-- the graph and its templates (check_workflow, check_template, check_condition) and the
-- type and range of every node field the engine reads later (check_node_fields), so that
-- no accepted definition can make a run, its dispatch or maintenance fail. Each raises
-- 22023 naming the workflow, the node and the bad value, with a HINT.

-- check_template raises 22023, naming the node and the operator, unless template t is
-- well formed where it stands in node (part: 'args', 'map' or 'skip_if'), and returns
-- the paths it refers to. As a value (is_cond false) t is JSON in which {"$from":
-- "path"}, {"$value": x} and {"$filter": [ARRAY, CONDITION]} are replaced; as a
-- condition (is_cond true) it is one of $eq, $ne, $not, $and, $or, $exists. Any other
-- key starting with $ is refused, so that a typo is not passed on as literal JSON.
-- in_filter is true inside a $filter condition, where item is the element tested; it is
-- returned with each path. A NULL t returns nothing.
create or replace function pgrun.check_template(node text, part text, t jsonb, is_cond boolean, in_filter boolean)
returns table (ref text, ref_in_filter boolean)
language plpgsql
immutable
rows 4 -- a template refers to a few paths; the default estimate (1000) makes the
       -- recursive queries below look costly enough to be JIT-compiled at every call
set search_path = pgrun, pg_catalog
as $$
declare
  at  text;
  op  text;
  v   jsonb;
begin
  if t is null then
    return;
  end if;
  if is_cond then
    if jsonb_typeof(t) = 'object' then
      op := jsonb_path_query_first(t, '$.keyvalue().key') #>> '{}';
    end if;
    if op is null or t - op <> '{}' then
      raise exception '% of node % is not a condition: %', part, node, t
        using errcode = '22023', hint = 'A condition is an object with one operator: $eq, $ne, $not, $and, $or or $exists.';
    end if;
    v := t -> op;
    at := format('%s of node %s', part, node);
    case op
    when '$eq', '$ne' then
      if jsonb_typeof(v) <> 'array' or jsonb_array_length(v) <> 2 then
        raise exception '%: % takes two operands, got %', at, op, v
          using errcode = '22023', hint = 'Write {"$eq": [{"$from": "fetch.output.n"}, 0]}.';
      end if;
      return query select * from pgrun.check_template(node, part, v -> 0, false, in_filter)
                   union all select * from pgrun.check_template(node, part, v -> 1, false, in_filter);
    when '$not' then
      return query select * from pgrun.check_template(node, part, v, true, in_filter);
    when '$and', '$or' then
      if jsonb_typeof(v) <> 'array' then
        raise exception '%: % takes an array of conditions', at, op
          using errcode = '22023', hint = 'Write {"$and": [cond, cond]}.';
      end if;
      return query select r.* from jsonb_array_elements(v) c, pgrun.check_template(node, part, c, true, in_filter) r;
    when '$exists' then
      if jsonb_typeof(v) <> 'string' then
        raise exception '%: $exists takes a path string', at
          using errcode = '22023', hint = 'Write {"$exists": "fetch.output.docs"}.';
      end if;
      ref := v #>> '{}';
      ref_in_filter := in_filter;
      return next;
    else
      raise exception '% uses unknown operator %', at, quote_literal(op)
        using errcode = '22023', hint = pgrun.operators_hint();
    end case;
    return;
  end if;

  case jsonb_typeof(t)
  when 'array' then
    return query select r.* from jsonb_array_elements(t) e, pgrun.check_template(node, part, e, false, in_filter) r
                 where jsonb_typeof(e) in ('object', 'array');
  when 'object' then
    op := jsonb_path_query_first(t, '$.keyvalue() ? (@.key starts with "$").key') #>> '{}';
    if op is null then
      return query select r.* from jsonb_each(t) e, pgrun.check_template(node, part, e.value, false, in_filter) r
                   where jsonb_typeof(e.value) in ('object', 'array');
      return;
    end if;
    at := format('%s of node %s', part, node);
    if op in ('$eq', '$ne', '$not', '$and', '$or', '$exists') then
      raise exception '% uses condition operator % where a value goes', at, quote_literal(op)
        using errcode = '22023', hint = pgrun.operators_hint();
    elsif op not in ('$from', '$value', '$filter') then
      raise exception '% uses unknown operator %', at, quote_literal(op)
        using errcode = '22023', hint = pgrun.operators_hint();
    elsif t - op <> '{}' then
      raise exception '%: % must be the only key of its object, got %', at, op, t
        using errcode = '22023', hint = pgrun.operators_hint();
    end if;
    v := t -> op;
    if op = '$from' then
      if jsonb_typeof(v) <> 'string' or v #>> '{}' = '' then
        raise exception '%: $from takes a path string, got %', at, v
          using errcode = '22023', hint = 'Write {"$from": "input.url"} or {"$from": "fetch.output.docs"}.';
      end if;
      ref := v #>> '{}';
      ref_in_filter := in_filter;
      return next;
    elsif op = '$filter' then
      if jsonb_typeof(v) <> 'array' or jsonb_array_length(v) <> 2 then
        raise exception '%: $filter takes [ARRAY, CONDITION], got %', at, v
          using errcode = '22023',
                hint = 'Write {"$filter": [{"$from": "fetch.output.docs"}, {"$eq": [{"$from": "item.lang"}, "en"]}]}.';
      end if;
      return query select * from pgrun.check_template(node, part, v -> 0, false, in_filter)
                   union all select * from pgrun.check_template(node, part, v -> 1, true, true);
    end if;
    return; -- $value: a literal, not looked into
  else
    return;
  end case;
end;
$$;

-- check_condition raises 22023 naming node unless cond is a well-formed condition.
create or replace function pgrun.check_condition(node text, cond jsonb)
returns void
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select from pgrun.check_template(node, 'skip_if', cond, true, false)
$$;

-- check_workflow raises 22023 with a message naming the node unless spec is a valid
-- workflow: {"nodes": [{"name", "kind", "queue", "args", "deps", "model", "timeout",
-- "max_attempts", "priority", "skip_if", "optional", "map", "failure_ratio",
-- "input"}, ...]} with at most max_workflow_nodes() nodes, unique names (JSON strings),
-- a kind for every node but an input node, known dependencies each listed once, no
-- cycle, well-formed args, map and skip_if (no unknown $ operator), references only to
-- input, item (a map node's args, or a $filter condition anywhere) or an upstream
-- node's output. The types and ranges of the other fields are check_node_fields',
-- which define_workflow calls next. Its cost is linear in the size of the spec: each
-- check is one statement over all nodes, and the graph is walked once as arrays of
-- node numbers (Kahn's algorithm for cycles, ancestor bit strings for references).
create or replace function pgrun.check_workflow(spec jsonb)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  nodes      jsonb := spec -> 'nodes';
  n          integer;
  nd         jsonb;
  i          integer;
  nm         text;
  bad        text;
  names      text[];
  num        jsonb;              -- {"name": node number}
  ref_at     integer[];          -- each reference: the node number, part, path, and
  ref_part   text[];             -- whether it is inside a $filter condition
  ref_path   text[];
  ref_filter boolean[];
  head       text;
  edge_from  integer[];          -- edge ei: node edge_from[ei] depends on node edge_to[ei]
  edge_to    integer[];
  dep_start  integer[];          -- deps of node u: edge_to[dep_start[u] .. dep_start[u+1]-1]
  sub_of     integer[];          -- dependents of node u: sub_of[sub_start[u] .. sub_start[u+1]-1]
  sub_start  integer[];
  indeg      integer[];
  outdeg     integer[];
  queue      integer[];
  tail       integer := 0;
  u          integer;
  v          integer;
  p          integer;
  ei         integer;
  left_      text[];
  anc        bit varying[];
  a          bit varying;
begin
  if jsonb_typeof(spec) is distinct from 'object' or jsonb_typeof(nodes) is distinct from 'array'
     or jsonb_array_length(nodes) = 0 then
    raise exception 'workflow spec must be an object with a non-empty "nodes" array'
      using errcode = '22023', hint = 'Write {"nodes": [{"name": "fetch", "kind": "fetch"}, ...]}.';
  end if;
  n := jsonb_array_length(nodes);
  if n > pgrun.max_workflow_nodes() then
    raise exception 'workflow has % nodes, over the limit of % nodes', n, pgrun.max_workflow_nodes()
      using errcode = '22023',
            hint = 'Fan out with a map node (one node, one job per element) or split the graph into workflows that start one another.';
  end if;

  -- Names: valid, then unique.
  select coalesce(quote_literal(x ->> 'name'), x::text) into bad
  from jsonb_array_elements(nodes) with ordinality e(x, o)
  where jsonb_typeof(x) <> 'object' or jsonb_typeof(x -> 'name') is distinct from 'string'
     or x ->> 'name' !~ '^[a-z][a-z0-9_]{0,62}$' or x ->> 'name' in ('input', 'item')
  order by o limit 1;
  if found then
    raise exception 'node name % is not valid', bad
      using errcode = '22023', hint = 'Name each node with 1 to 63 of a-z, 0-9 and _ starting with a letter; input and item are reserved.';
  end if;
  select x ->> 'name' into bad
  from jsonb_array_elements(nodes) with ordinality e(x, o)
  group by x ->> 'name' having count(*) > 1 order by min(o) limit 1;
  if found then
    raise exception 'node % is defined twice', bad
      using errcode = '22023', hint = 'Give every node a unique name.';
  end if;
  select array_agg(x ->> 'name' order by o), jsonb_object_agg(x ->> 'name', o) into names, num
  from jsonb_array_elements(nodes) with ordinality e(x, o);

  -- Keys, then each node's kind, args, deps and map (the other fields, and the kind's
  -- type: check_node_fields).
  select x ->> 'name', k into nm, bad
  from jsonb_array_elements(nodes) with ordinality e(x, o), jsonb_object_keys(x) k
  where k <> all (array['name', 'kind', 'queue', 'args', 'deps', 'model', 'timeout', 'max_attempts',
                        'priority', 'skip_if', 'optional', 'map', 'failure_ratio', 'input'])
  order by o limit 1;
  if found then
    raise exception 'node % has unknown key %', nm, quote_literal(bad)
      using errcode = '22023', hint = 'Known keys: name, kind, queue, args, deps, model, timeout, max_attempts, priority, skip_if, optional, map, failure_ratio, input.';
  end if;
  for i in 1 .. n loop
    nd := nodes -> (i - 1);
    nm := nd ->> 'name';
    if coalesce(nd ->> 'input', 'false') <> 'true' then
      begin
        perform pgrun.check_kind(nd ->> 'kind');
      exception when invalid_parameter_value then
        raise exception 'node % has no valid kind: %', nm, coalesce(nd ->> 'kind', 'none')
          using errcode = '22023', hint = 'Every node but an input node names the kind of job it runs.';
      end;
    end if;
    if nd ? 'args' and jsonb_typeof(nd -> 'args') <> 'object' then
      raise exception 'args of node % must be a JSON object', nm
        using errcode = '22023', hint = 'Write "args": {"url": {"$from": "input.url"}}.';
    end if;
    if nd ? 'deps' and (jsonb_typeof(nd -> 'deps') <> 'array'
        or jsonb_path_exists(nd -> 'deps', '$[*] ? (@.type() != "string")')) then
      raise exception 'deps of node % must be an array of node names', nm
        using errcode = '22023', hint = 'Write "deps": ["fetch"].';
    end if;
    if nd ? 'map' and (jsonb_typeof(nd -> 'map') <> 'object' or not (nd -> 'map') ?| array['$from', '$filter']) then
      raise exception 'map of node % must be a reference such as {"$from": "fetch.output.docs"} or a $filter', nm
        using errcode = '22023', hint = 'A map node runs one job per element of the referenced array.';
    end if;
  end loop;

  -- Templates (args, map, skip_if): all checked in one statement, which collects their
  -- references; input and item are settled here, the rest once the graph is known.
  select coalesce(array_agg(o::integer order by o, c.pn), '{}'), coalesce(array_agg(c.part order by o, c.pn), '{}'),
         coalesce(array_agg(c.ref order by o, c.pn), '{}'), coalesce(array_agg(c.ref_in_filter order by o, c.pn), '{}')
  into ref_at, ref_part, ref_path, ref_filter
  from jsonb_array_elements(nodes) with ordinality e(x, o),
       lateral (select 1 as pn, 'args' as part, t.* from pgrun.check_template(x ->> 'name', 'args', x -> 'args', false, false) t
                union all
                select 2, 'map', t.* from pgrun.check_template(x ->> 'name', 'map', x -> 'map', false, false) t
                union all
                select 3, 'skip_if', t.* from pgrun.check_template(x ->> 'name', 'skip_if', x -> 'skip_if', true, false) t) c;
  for i in 1 .. cardinality(ref_at) loop
    head := split_part(ref_path[i], '.', 1);
    continue when head = 'input';
    if head = 'item' then
      nd := nodes -> (ref_at[i] - 1);
      continue when ref_filter[i] or (ref_part[i] = 'args' and nd ? 'map');
      if nd ? 'map' then
        raise exception 'node % refers to % in its %, where there is no item', nd ->> 'name', quote_literal(ref_path[i]), ref_part[i]
          using errcode = '22023', hint = 'item is the element a map node runs for, in its args, or the element a $filter condition tests.';
      end if;
      raise exception 'node % refers to % but is not a map node', nd ->> 'name', quote_literal(ref_path[i])
        using errcode = '22023', hint = 'item is the element a map node runs for, in its args, or the element a $filter condition tests.';
    end if;
  end loop;

  -- Dependencies: known, each listed once. Edges go by node number.
  select e.x ->> 'name', d.x into nm, bad
  from jsonb_array_elements(nodes) with ordinality e(x, o),
       jsonb_array_elements_text(coalesce(e.x -> 'deps', '[]')) with ordinality d(x, di)
  where not num ? d.x
  order by e.o, d.di limit 1;
  if found then
    raise exception 'node % depends on unknown node %', nm, quote_literal(bad)
      using errcode = '22023',
            hint = format('Known nodes: %s%s.', array_to_string(names[1:20], ', '),
                          case when n > 20 then format(', … (%s in all)', n) else '' end);
  end if;
  select e.x ->> 'name', d.x into nm, bad
  from jsonb_array_elements(nodes) with ordinality e(x, o),
       jsonb_array_elements_text(coalesce(e.x -> 'deps', '[]')) d(x)
  group by e.o, e.x ->> 'name', d.x having count(*) > 1
  order by e.o limit 1;
  if found then
    raise exception 'node % lists dependency % more than once', nm, quote_literal(bad)
      using errcode = '22023', hint = 'List each dependency once.';
  end if;
  select coalesce(array_agg(e.o::integer order by e.o, (num ->> d.x)::integer), '{}'),
         coalesce(array_agg((num ->> d.x)::integer order by e.o, (num ->> d.x)::integer), '{}')
  into edge_from, edge_to
  from jsonb_array_elements(nodes) with ordinality e(x, o),
       jsonb_array_elements_text(coalesce(e.x -> 'deps', '[]')) d(x);
  -- dep_start and sub_start are prefix sums of the edges per node (deps, dependents).
  select array_agg(y.s order by y.node), array_agg(y.c order by y.node) into dep_start, indeg
  from (select g.node, coalesce(x.c, 0) as c,
               1 + coalesce(sum(x.c) over (order by g.node rows between unbounded preceding and 1 preceding), 0) as s
        from generate_series(1, n + 1) g(node)
        left join (select f, count(*)::integer as c from unnest(edge_from) f group by f) x on x.f = g.node) y;
  select array_agg(y.s order by y.node) into sub_start
  from (select g.node, 1 + coalesce(sum(x.c) over (order by g.node rows between unbounded preceding and 1 preceding), 0) as s
        from generate_series(1, n + 1) g(node)
        left join (select t, count(*)::integer as c from unnest(edge_to) t group by t) x on x.t = g.node) y;
  select coalesce(array_agg(f order by t, f), '{}') into sub_of from unnest(edge_from, edge_to) e(f, t);

  -- No cycle (Kahn): take nodes whose deps are all taken; what is left is on a cycle or
  -- after one. queue ends up in topological order.
  queue := array_fill(0, array[n]);
  for u in 1 .. n loop
    if indeg[u] = 0 then
      tail := tail + 1;
      queue[tail] := u;
    end if;
  end loop;
  p := 1;
  while p <= tail loop
    u := queue[p];
    p := p + 1;
    for ei in sub_start[u] .. sub_start[u + 1] - 1 loop
      v := sub_of[ei];
      indeg[v] := indeg[v] - 1;
      if indeg[v] = 0 then
        tail := tail + 1;
        queue[tail] := v;
      end if;
    end loop;
  end loop;
  if tail < n then
    -- Of what is left, drop (repeatedly) the nodes on which nothing left depends: the
    -- rest are on cycles (or between two). outdeg counts a node's dependents left.
    outdeg := array_fill(0, array[n]);
    for ei in 1 .. cardinality(edge_from) loop
      if indeg[edge_from[ei]] > 0 then
        outdeg[edge_to[ei]] := outdeg[edge_to[ei]] + 1;
      end if;
    end loop;
    tail := 0;
    for u in 1 .. n loop
      if indeg[u] > 0 and outdeg[u] = 0 then
        tail := tail + 1;
        queue[tail] := u;
      end if;
    end loop;
    p := 1;
    while p <= tail loop
      u := queue[p];
      p := p + 1;
      indeg[u] := 0; -- off the cycle
      for ei in dep_start[u] .. dep_start[u + 1] - 1 loop
        v := edge_to[ei];
        if indeg[v] > 0 then
          outdeg[v] := outdeg[v] - 1;
          if outdeg[v] = 0 then
            tail := tail + 1;
            queue[tail] := v;
          end if;
        end if;
      end loop;
    end loop;
    select array_agg(x.name order by x.name) into left_ from unnest(names, indeg) x(name, d) where x.d > 0;
    raise exception 'node % is on a dependency cycle (with %)', left_[1], array_to_string(left_[1:10], ', ')
      || case when cardinality(left_) > 10 then format(', … %s nodes in all', cardinality(left_)) else '' end
      using errcode = '22023', hint = 'A workflow is a DAG: remove one of the deps on the cycle.';
  end if;

  -- References to other nodes: to NODE.output of an ancestor. Ancestor sets are bit
  -- strings filled in topological order, one OR per edge, built only if some
  -- reference is not to a direct dependency.
  for i in 1 .. cardinality(ref_at) loop
    head := split_part(ref_path[i], '.', 1);
    continue when head in ('input', 'item');
    u := ref_at[i];
    v := (num ->> head)::integer;
    if v is not null and split_part(ref_path[i], '.', 2) = 'output' then
      continue when (nodes -> (u - 1) -> 'deps') ? head;
      if anc is null then
        anc := array_fill(lpad('', n, '0')::bit varying, array[n]);
        for p in 1 .. n loop
          a := anc[queue[p]];
          for ei in dep_start[queue[p]] .. dep_start[queue[p] + 1] - 1 loop
            a := a | set_bit(anc[edge_to[ei]], edge_to[ei] - 1, 1);
          end loop;
          anc[queue[p]] := a;
        end loop;
      end if;
      continue when get_bit(anc[u], v - 1) = 1;
    end if;
    raise exception 'node % refers to % which is not input, item or an upstream node''s output', names[u], quote_literal(ref_path[i])
      using errcode = '22023', hint = 'Refer to input.PATH, or NODE.output.PATH for a node it depends on (directly or not).';
  end loop;
end;
$$;

-- refuse_node_field raises 22023 for field of node in workflow: the message names the
-- three, says what the field must be (want) and shows the value as the spec gives it
-- (cut to 100 characters); hint says what to write.
create or replace function pgrun.refuse_node_field(workflow text, node text, field text, v jsonb, want text, hint text)
returns void
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  raise exception 'workflow % node %: % must be %, got %', quote_literal(workflow), node, field, want,
    case when length(v::text) > 100 then left(v::text, 100) || '...' else v::text end
    using errcode = '22023', hint = hint;
end;
$$;

-- check_node_fields raises 22023 (refuse_node_field: naming workflow, the node, the
-- field and its value, with a HINT) unless every field of every node in spec that the
-- engine reads after define_workflow has its JSON type and range, so that no run,
-- dispatch or maintenance step can fail on a definition once it is accepted. A node's
-- fields become its job's (start_run inserts them, a map node enqueues them for each
-- child, dispatch and redrive read optional, input and failure_ratio):
--   kind, queue      JSON strings: a job kind and a queue name (an input node's too,
--                    when given: its job is a row of pgrun.jobs)
--   model            a non-empty JSON string
--   timeout          an interval, as a JSON string ("10 minutes") or a number of
--                    seconds: 0 (no timeout) to max_wait()
--   max_attempts     a JSON integer, 1 to 2147483647
--   priority         a JSON integer, min_priority() to max_priority()
--   optional, input  JSON booleans
--   failure_ratio    a JSON number, 0 to 1, that a double precision holds (1e-400
--                    is in range but not representable, and would fail the dispatch)
-- A field set to JSON null is left out, as the engine reads it.
-- The ranges of kind, queue, timeout, max_attempts and priority are the enqueue rules
-- (job_spec_fault), applied to the job each node becomes, so that start_run's insert
-- cannot refuse a node this let through. check_workflow has run first: every node is
-- an object with a valid, unique name, known keys, and a kind unless it is an input.
create or replace function pgrun.check_node_fields(workflow text, spec jsonb)
returns void
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  nd    jsonb;
  nm    text;
  v     jsonb;
  t     text;
  d     interval;
  prio  integer;
  ma    integer;
  r     double precision;
  js    pgrun.job_spec;
  f     text;
  h_kind  constant text := 'Use 1 to 128 characters from letters, digits, _ . : / - starting with a letter, as a JSON string; an input node may leave it out.';
  h_queue constant text := 'Use 1 to 63 characters from a-z, 0-9, _, - and . starting with a letter, as a JSON string, or leave it out for the queue default.';
  h_ma    constant text := 'Write "max_attempts": 5 (1 means no retries), or leave it out for the queue''s default.';
begin
  for nd in select x from jsonb_array_elements(spec -> 'nodes') x loop
    nm := nd ->> 'name';
    d := null;
    prio := null;
    ma := null;

    -- Types: the JSON each field must be for its use.
    v := nullif(nd -> 'kind', 'null');
    if v is not null and jsonb_typeof(v) <> 'string' then
      perform pgrun.refuse_node_field(workflow, nm, 'kind', v, 'a job kind', h_kind);
    end if;
    v := nullif(nd -> 'queue', 'null');
    if v is not null and jsonb_typeof(v) <> 'string' then
      perform pgrun.refuse_node_field(workflow, nm, 'queue', v, 'a queue name', h_queue);
    end if;
    v := nullif(nd -> 'model', 'null');
    if v is not null and (jsonb_typeof(v) <> 'string' or v #>> '{}' = '') then
      perform pgrun.refuse_node_field(workflow, nm, 'model', v, 'a non-empty JSON string',
        'Name the model the job needs, such as "hash-384", or leave it out.');
    end if;
    v := nullif(nd -> 'timeout', 'null');
    if v is not null then
      if jsonb_typeof(v) in ('string', 'number') then
        begin
          d := (v #>> '{}')::interval;
        exception when data_exception then
          d := null;
        end;
      end if;
      if d is null then
        perform pgrun.refuse_node_field(workflow, nm, 'timeout', v, format('an interval from 0 to %s', pgrun.max_wait()),
          format('Write "timeout": "10 minutes" (or a number of seconds), at most %s; 0 for no timeout; leave it out for the queue''s default.',
                 pgrun.max_wait()));
      end if;
    end if;
    v := nullif(nd -> 'max_attempts', 'null');
    if v is not null then
      t := v #>> '{}';
      if (case when jsonb_typeof(v) <> 'number' or t !~ '^-?[0-9]{1,10}$' then true
               else t::bigint not between 1 and 2147483647 end) then
        perform pgrun.refuse_node_field(workflow, nm, 'max_attempts', v, 'an integer from 1 to 2147483647', h_ma);
      end if;
      ma := t::integer;
    end if;
    v := nullif(nd -> 'priority', 'null');
    if v is not null then
      t := v #>> '{}';
      if (case when jsonb_typeof(v) <> 'number' or t !~ '^-?[0-9]{1,10}$' then true
               else t::bigint not between pgrun.min_priority() and pgrun.max_priority() end) then
        perform pgrun.refuse_node_field(workflow, nm, 'priority', v,
          format('an integer from %s to %s', pgrun.min_priority(), pgrun.max_priority()),
          format('Write "priority": 10; %s (the default) is the most urgent, and lower runs first.', pgrun.min_priority()));
      end if;
      prio := t::integer;
    end if;
    v := nullif(nd -> 'optional', 'null');
    if v is not null and jsonb_typeof(v) <> 'boolean' then
      perform pgrun.refuse_node_field(workflow, nm, 'optional', v, 'true or false',
        'Write "optional": true for a node whose failure neither fails the run nor blocks its dependents; leave it out for false.');
    end if;
    v := nullif(nd -> 'input', 'null');
    if v is not null and jsonb_typeof(v) <> 'boolean' then
      perform pgrun.refuse_node_field(workflow, nm, 'input', v, 'true or false',
        'Write "input": true for a node that waits for pgrun.submit_input; leave it out for false.');
    end if;
    v := nullif(nd -> 'failure_ratio', 'null');
    if v is not null then
      r := null;
      if jsonb_typeof(v) = 'number' then
        begin
          r := (v #>> '{}')::double precision; -- as node_ready reads it
        exception when data_exception then
          r := null;
        end;
      end if;
      if r is null or r < 0 or r > 1 then
        perform pgrun.refuse_node_field(workflow, nm, 'failure_ratio', v, 'a number from 0 to 1',
          'Write "failure_ratio": 0.1 to fail a map node once a tenth of its children failed; leave it out for 1 (only if all fail).');
      end if;
    end if;

    -- Ranges: the enqueue rules, as start_run's insert and a map node's enqueue apply
    -- them to the node's job (the fields of the spec are set by name, the rest NULL).
    js := null;
    js.kind := coalesce(nd ->> 'kind', 'pgrun.input');
    js.args := '{}';
    js.meta := '{}';
    js.queue := coalesce(nd ->> 'queue', 'default');
    js.priority := prio;
    js.max_attempts := ma;
    js.model := nd ->> 'model';
    js.timeout := d;
    f := pgrun.job_spec_fault(js);
    case f
    when 'kind' then
      perform pgrun.refuse_node_field(workflow, nm, 'kind', nd -> 'kind', 'a job kind', h_kind);
    when 'queue' then
      perform pgrun.refuse_node_field(workflow, nm, 'queue', nd -> 'queue', 'a queue name', h_queue);
    when 'timeout' then
      perform pgrun.refuse_node_field(workflow, nm, 'timeout', nd -> 'timeout', format('an interval from 0 to %s', pgrun.max_wait()),
        format('Write "timeout": "10 minutes" (or a number of seconds), at most %s; 0 for no timeout; leave it out for the queue''s default.',
               pgrun.max_wait()));
    when 'max_attempts' then
      perform pgrun.refuse_node_field(workflow, nm, 'max_attempts', nd -> 'max_attempts', 'an integer from 1 to 2147483647', h_ma);
    when 'priority' then
      perform pgrun.refuse_node_field(workflow, nm, 'priority', nd -> 'priority',
        format('an integer from %s to %s', pgrun.min_priority(), pgrun.max_priority()),
        format('Write "priority": 10; %s (the default) is the most urgent, and lower runs first.', pgrun.min_priority()));
    else
      if f is not null then
        -- A rule of the enqueue path this list does not know yet: its own words.
        begin
          perform pgrun.check_job_spec(js);
        exception when invalid_parameter_value then
          get stacked diagnostics t = message_text, f = pg_exception_hint;
          raise exception 'workflow % node %: %', quote_literal(workflow), nm, t using errcode = '22023', hint = f;
        end;
      end if;
    end case;
  end loop;
end;
$$;
