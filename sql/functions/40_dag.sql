-- 40_dag.sql: DAG workflows. A definition is checked once (define_workflow, with the
-- checks of 42_dag_checks.sql); a run
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

-- define_workflow checks spec and stores it as the next version of name; defining
-- the same spec as the newest version again changes nothing. Returns the version.
-- A spec over max_json_bytes() or with more than max_workflow_nodes() nodes is refused
-- (22023), as is one that check_workflow (the graph, the templates) or
-- check_node_fields (each field's type and range) refuses; nothing is written then.
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
  perform pgrun.check_node_fields(define_workflow.name, spec);
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
