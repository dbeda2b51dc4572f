-- dag.sql: DAG workflows. A definition is checked once (define_workflow); a run
-- creates one job per node (start_run); when a node finishes, node_finished releases
-- its dependents in the same transaction: their args are resolved from references,
-- skip_if is evaluated, and they are queued, skipped, fanned out (map) or parked to
-- wait for an input.

-- workflow_refs lists every "$from" reference path in a template.
create or replace function pgrun.workflow_refs(template jsonb)
returns setof text
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select r #>> '{}' from jsonb_path_query(coalesce(template, 'null'), 'lax $.**."$from"') r
$$;

-- resolve replaces references in template: {"$from": "a.b.c"} by the value at that
-- path of ctx (JSON null if absent) and {"$value": x} by x, recursively.
create or replace function pgrun.resolve(template jsonb, ctx jsonb)
returns jsonb
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
declare
  n integer;
begin
  case jsonb_typeof(template)
  when 'object' then
    select count(*) into n from jsonb_object_keys(template);
    if n = 1 and template ? '$from' then
      return coalesce(ctx #> string_to_array(template ->> '$from', '.'), 'null');
    elsif n = 1 and template ? '$value' then
      return template -> '$value';
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

-- check_condition raises 22023 naming node unless cond is a well-formed condition.
create or replace function pgrun.check_condition(node text, cond jsonb)
returns void
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
declare
  op text;
  v  jsonb;
  c  jsonb;
begin
  if jsonb_typeof(cond) <> 'object' or (select count(*) from jsonb_object_keys(cond)) <> 1 then
    raise exception 'skip_if of node % is not a condition: %', node, cond
      using errcode = '22023', hint = 'A condition is an object with one operator: $eq, $ne, $not, $and, $or or $exists.';
  end if;
  select k, x into op, v from jsonb_each(cond) e(k, x);
  if op in ('$eq', '$ne') then
    if jsonb_typeof(v) <> 'array' or jsonb_array_length(v) <> 2 then
      raise exception 'skip_if of node %: % takes two operands, got %', node, op, v
        using errcode = '22023', hint = 'Write {"$eq": [{"$from": "fetch.output.n"}, 0]}.';
    end if;
  elsif op = '$not' then
    perform pgrun.check_condition(node, v);
  elsif op in ('$and', '$or') then
    if jsonb_typeof(v) <> 'array' then
      raise exception 'skip_if of node %: % takes an array of conditions', node, op
        using errcode = '22023', hint = 'Write {"$and": [cond, cond]}.';
    end if;
    for c in select * from jsonb_array_elements(v) loop
      perform pgrun.check_condition(node, c);
    end loop;
  elsif op = '$exists' then
    if jsonb_typeof(v) <> 'string' then
      raise exception 'skip_if of node %: $exists takes a path string', node
        using errcode = '22023', hint = 'Write {"$exists": "fetch.output.docs"}.';
    end if;
  else
    raise exception 'skip_if of node % uses unknown operator %', node, quote_literal(op)
      using errcode = '22023', hint = 'Use $eq, $ne, $not, $and, $or or $exists.';
  end if;
end;
$$;

-- check_workflow raises 22023 with a message naming the node unless spec is a valid
-- workflow: {"nodes": [{"name", "kind", "queue", "args", "deps", "model", "timeout",
-- "max_attempts", "priority", "skip_if", "optional", "map", "failure_ratio",
-- "input"}, ...]} with unique names, known dependencies, no cycle, references only
-- to input, item (map nodes) or an upstream node's output, and valid conditions.
create or replace function pgrun.check_workflow(spec jsonb)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  nd     jsonb;
  nm     text;
  k      text;
  ref    text;
  head   text;
  left_  text[];
  names  text[] := '{}';
  done   text[] := '{}';
  progress boolean;
begin
  if jsonb_typeof(spec) is distinct from 'object' or jsonb_typeof(spec -> 'nodes') is distinct from 'array'
     or jsonb_array_length(spec -> 'nodes') = 0 then
    raise exception 'workflow spec must be an object with a non-empty "nodes" array'
      using errcode = '22023', hint = 'Write {"nodes": [{"name": "fetch", "kind": "fetch"}, ...]}.';
  end if;
  for nd in select * from jsonb_array_elements(spec -> 'nodes') loop
    nm := nd ->> 'name';
    if jsonb_typeof(nd) <> 'object' or nm is null or nm !~ '^[a-z][a-z0-9_]{0,62}$' or nm in ('input', 'item') then
      raise exception 'node name % is not valid', coalesce(quote_literal(nm), nd::text)
        using errcode = '22023', hint = 'Name each node with 1 to 63 of a-z, 0-9 and _ starting with a letter; input and item are reserved.';
    end if;
    if nm = any (names) then
      raise exception 'node % is defined twice', nm
        using errcode = '22023', hint = 'Give every node a unique name.';
    end if;
    names := names || nm;
    for k in select * from jsonb_object_keys(nd) loop
      if k <> all (array['name', 'kind', 'queue', 'args', 'deps', 'model', 'timeout', 'max_attempts',
                         'priority', 'skip_if', 'optional', 'map', 'failure_ratio', 'input']) then
        raise exception 'node % has unknown key %', nm, quote_literal(k)
          using errcode = '22023', hint = 'Known keys: name, kind, queue, args, deps, model, timeout, max_attempts, priority, skip_if, optional, map, failure_ratio, input.';
      end if;
    end loop;
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
        or exists (select 1 from jsonb_array_elements(nd -> 'deps') d where jsonb_typeof(d) <> 'string')) then
      raise exception 'deps of node % must be an array of node names', nm
        using errcode = '22023', hint = 'Write "deps": ["fetch"].';
    end if;
    if nd ? 'map' and (jsonb_typeof(nd -> 'map') <> 'object' or not nd -> 'map' ? '$from') then
      raise exception 'map of node % must be a reference such as {"$from": "fetch.output.docs"}', nm
        using errcode = '22023', hint = 'A map node runs one job per element of the referenced array.';
    end if;
    if nd ? 'skip_if' then
      perform pgrun.check_condition(nm, nd -> 'skip_if');
    end if;
  end loop;
  -- Known dependencies.
  for nm, k in
    select n ->> 'name', d #>> '{}'
    from jsonb_array_elements(spec -> 'nodes') n, jsonb_array_elements(coalesce(n -> 'deps', '[]')) d
  loop
    if not k = any (names) then
      raise exception 'node % depends on unknown node %', nm, quote_literal(k)
        using errcode = '22023', hint = format('Known nodes: %s.', array_to_string(names, ', '));
    end if;
  end loop;
  -- No cycle: peel off nodes whose deps are all peeled; what cannot be peeled is on a cycle.
  loop
    progress := false;
    for nm in
      select n ->> 'name' from jsonb_array_elements(spec -> 'nodes') n
      where not (n ->> 'name') = any (done)
        and not exists (select 1 from jsonb_array_elements_text(coalesce(n -> 'deps', '[]')) d(x)
                        where not d.x = any (done))
    loop
      done := done || nm;
      progress := true;
    end loop;
    exit when not progress;
  end loop;
  if cardinality(done) < cardinality(names) then
    select array_agg(x order by x) into left_ from unnest(names) x where not x = any (done);
    raise exception 'node % is on a dependency cycle (with %)', left_[1], array_to_string(left_, ', ')
      using errcode = '22023', hint = 'A workflow is a DAG: remove one of the deps on the cycle.';
  end if;
  -- References: input, item (map nodes' args only) or an upstream node's output.
  for nd in select * from jsonb_array_elements(spec -> 'nodes') loop
    nm := nd ->> 'name';
    for ref in
      select r from pgrun.workflow_refs(nd -> 'args') r
      union all select r from pgrun.workflow_refs(nd -> 'skip_if') r
      union all select r from pgrun.workflow_refs(nd -> 'map') r
      union all select x #>> '{}' from jsonb_path_query(coalesce(nd -> 'skip_if', 'null'), 'lax $.**."$exists"') x
    loop
      head := split_part(ref, '.', 1);
      continue when head = 'input';
      continue when head = 'item' and nd ? 'map' and ref not in (select pgrun.workflow_refs(nd -> 'map'));
      if head = 'item' then
        raise exception 'node % refers to % but is not a map node', nm, quote_literal(ref)
          using errcode = '22023', hint = 'item is the element a map node runs for; use it in a map node''s args.';
      end if;
      if split_part(ref, '.', 2) <> 'output' or not exists (
        with recursive up(x) as (
          select d from jsonb_array_elements_text(coalesce(nd -> 'deps', '[]')) d
          union
          select d from up, jsonb_array_elements(spec -> 'nodes') n, jsonb_array_elements_text(coalesce(n -> 'deps', '[]')) d
          where n ->> 'name' = up.x)
        select 1 from up where x = head) then
        raise exception 'node % refers to % which is not input, item or an upstream node''s output', nm, quote_literal(ref)
          using errcode = '22023', hint = 'Refer to input.PATH, or NODE.output.PATH for a node it depends on (directly or not).';
      end if;
    end loop;
  end loop;
end;
$$;

-- define_workflow checks spec and stores it as the next version of name; defining
-- the same spec as the newest version again changes nothing. Returns the version.
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
