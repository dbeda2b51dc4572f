-- 40_dag.sql: DAG workflows. A definition is checked once (define_workflow); a run
-- creates one job per node (start_run); when a node finishes, node_finished releases
-- its dependents in the same transaction: their args are resolved from references,
-- skip_if is evaluated, and they are queued, skipped, fanned out (map) or parked to
-- wait for an input.

-- Limits of a workflow, next to the general ones in 01_common.sql.
--   max_workflow_nodes  1,000 nodes per workflow. define_workflow's checks are linear in
--                       the graph, but every node's dispatch reads the spec, so a run
--                       costs O(nodes^2) in all; 1,000 keeps that in seconds. A bigger
--                       graph is usually one node with a map, or workflows that start
--                       one another.
--   max_map_items       100,000 elements per map node: its children are inserted in one
--                       statement, in the dispatch of its last dependency, which stays
--                       in seconds; more belongs in batches.
create or replace function pgrun.max_workflow_nodes()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 1000 $$;

create or replace function pgrun.max_map_items()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 100000 $$;

-- workflow_refs lists every path a template refers to: the "$from" references and the
-- "$exists" paths of conditions (an over-approximation: one inside a "$value" literal is
-- listed too). Used to cut a run's context down to what a template reads.
create or replace function pgrun.workflow_refs(template jsonb)
returns setof text
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select r #>> '{}' from jsonb_path_query(coalesce(template, 'null'), 'lax $.**."$from"') r
  union all
  select r #>> '{}' from jsonb_path_query(coalesce(template, 'null'), 'lax $.**."$exists"') r
$$;

-- context_for returns the part of ctx that template can read: the entries of ctx named
-- by the first segment of its references. Resolving against it gives the same result as
-- against ctx, without copying every node's output once per map or $filter element.
create or replace function pgrun.context_for(ctx jsonb, template jsonb)
returns jsonb
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select coalesce(jsonb_object_agg(h, ctx -> h), '{}')
  from (select distinct split_part(p, '.', 1) as h from pgrun.workflow_refs(template) p) heads
  where ctx ? h
$$;

-- resolve replaces references in template: {"$from": "a.b.c"} by the value at that
-- path of ctx (JSON null if absent), {"$value": x} by x, and {"$filter": [ARRAY,
-- CONDITION]} by the elements of ARRAY (resolved like args; JSON null if it is not an
-- array) for which CONDITION holds, in order, with item bound to the element in the
-- condition; recursively.
create or replace function pgrun.resolve(template jsonb, ctx jsonb)
returns jsonb
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
declare
  n     integer;
  arr   jsonb;
  cond  jsonb;
  small jsonb;
begin
  case jsonb_typeof(template)
  when 'object' then
    select count(*) into n from jsonb_object_keys(template);
    if n = 1 and template ? '$from' then
      return coalesce(ctx #> string_to_array(template ->> '$from', '.'), 'null');
    elsif n = 1 and template ? '$value' then
      return template -> '$value';
    elsif n = 1 and template ? '$filter' and jsonb_typeof(template -> '$filter') = 'array'
          and jsonb_array_length(template -> '$filter') = 2 then
      arr := pgrun.resolve(template #> '{$filter,0}', ctx);
      if jsonb_typeof(arr) is distinct from 'array' then
        return 'null';
      end if;
      cond := template #> '{$filter,1}';
      small := pgrun.context_for(ctx, cond);
      return (select coalesce(jsonb_agg(e order by i), '[]')
              from jsonb_array_elements(arr) with ordinality a(e, i)
              where pgrun.eval_condition(cond, small || jsonb_build_object('item', e)));
    end if;
    return (select coalesce(jsonb_object_agg(k, pgrun.resolve(v, ctx)), '{}')
            from jsonb_each(template) e(k, v));
  when 'array' then
    return (select coalesce(jsonb_agg(pgrun.resolve(v, ctx) order by i), '[]')
            from jsonb_array_elements(template) with ordinality a(v, i));
  else
    return template;
  end case;
end;
$$;

-- eval_condition evaluates a skip_if condition over ctx: {"$eq": [a, b]},
-- {"$ne": [a, b]}, {"$not": c}, {"$and": [c, ...]}, {"$or": [c, ...]},
-- {"$exists": "path"}; operands are resolved like args.
create or replace function pgrun.eval_condition(cond jsonb, ctx jsonb)
returns boolean
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
declare
  op text;
  v  jsonb;
begin
  select k, x into op, v from jsonb_each(cond) e(k, x) limit 1;
  case op
  when '$eq' then return pgrun.resolve(v -> 0, ctx) = pgrun.resolve(v -> 1, ctx);
  when '$ne' then return pgrun.resolve(v -> 0, ctx) <> pgrun.resolve(v -> 1, ctx);
  when '$not' then return not pgrun.eval_condition(v, ctx);
  when '$and' then
    return coalesce(bool_and(pgrun.eval_condition(c, ctx)), true) from jsonb_array_elements(v) c;
  when '$or' then
    return coalesce(bool_or(pgrun.eval_condition(c, ctx)), false) from jsonb_array_elements(v) c;
  when '$exists' then
    return coalesce(ctx #> string_to_array(v #>> '{}', '.'), 'null') <> 'null';
  else
    raise exception 'condition operator % is not known', coalesce(quote_literal(op), 'NULL')
      using errcode = '22023', hint = 'Use $eq, $ne, $not, $and, $or or $exists.';
  end case;
end;
$$;

-- operators_hint is the HINT of every error about an operator in a workflow spec.
create or replace function pgrun.operators_hint()
returns text
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select 'Known operators: $from, $value and $filter where a value goes (args, map, operands); '
      || '$eq, $ne, $not, $and, $or and $exists where a condition goes (skip_if, the second element of $filter). '
      || 'To pass an object with a key starting with $ as it is, wrap it: {"$value": {...}}.'
$$;

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
-- "input"}, ...]} with at most max_workflow_nodes() nodes, unique names, known
-- dependencies each listed once, no cycle, well-formed args, map and skip_if (no
-- unknown $ operator), references only to input, item (a map node's args, or a $filter
-- condition anywhere) or an upstream node's output. Its cost is linear in the size of
-- the spec: each check is one statement over all nodes, and the graph is walked once
-- as arrays of node numbers (Kahn's algorithm for cycles, ancestor bit strings for
-- references).
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
  where jsonb_typeof(x) <> 'object' or x ->> 'name' is null or x ->> 'name' !~ '^[a-z][a-z0-9_]{0,62}$'
     or x ->> 'name' in ('input', 'item')
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

  -- Keys, then each node's plain fields.
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
    if nd ? 'queue' then
      perform pgrun.check_queue_name(nd ->> 'queue');
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

-- define_workflow checks spec and stores it as the next version of name; defining
-- the same spec as the newest version again changes nothing. Returns the version.
-- A spec over max_json_bytes() or with more than max_workflow_nodes() nodes is refused
-- (22023).
create or replace function pgrun.define_workflow(name text, spec jsonb)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  latest pgrun.workflows;
begin
  if name is null or name !~ '^[a-z][a-z0-9_.-]{0,62}$' then
    raise exception 'workflow name % is not valid', coalesce(quote_literal(name), 'NULL')
      using errcode = '22023', hint = 'Use 1 to 63 characters from a-z, 0-9, _, - and . starting with a letter.';
  end if;
  perform pgrun.check_json_size('workflow spec', spec);
  perform pgrun.check_workflow(spec);
  perform pg_advisory_xact_lock(hashtext('pgrun.workflow:' || name));
  select * into latest from pgrun.workflows w where w.name = define_workflow.name order by version desc limit 1;
  if found and latest.spec = spec then
    return latest.version;
  end if;
  insert into pgrun.workflows (name, version, spec)
  values (define_workflow.name, coalesce(latest.version, 0) + 1, spec);
  return coalesce(latest.version, 0) + 1;
end;
$$;
