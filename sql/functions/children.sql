-- children.sql: coordinator jobs. A running job defers to children and waits; each
-- child that finishes counts towards the parent, which succeeds or fails in the same
-- transaction as the child that decided it.

-- defer_job turns running job (id, attempt) into a waiting parent of children (a JSON
-- array of enqueue_jobs objects; parent_id is set for them), atomically. The parent
-- fails as soon as the failed share of its children reaches failure_ratio (default
-- 1.0: only if all fail) and succeeds when all have finished below it. With no
-- children it succeeds at once. Returns the parent, or NULL if (id, attempt) is not
-- running.
drop function if exists pgrun.defer_job(bigint, integer, jsonb, double precision);
create or replace function pgrun.defer_job(
  id             bigint,
  attempt        integer,
  children       jsonb,
  failure_ratio  double precision default 1.0,
  worker         text default null
)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j  pgrun.jobs;
  n  integer;
begin
  if children is null or jsonb_typeof(children) <> 'array' then
    raise exception 'children must be a JSON array of job objects, got %', coalesce(jsonb_typeof(children), 'NULL')
      using errcode = '22023', hint = 'Pass ''[{"kind": "resize", "args": {...}}, ...]''.';
  end if;
  if failure_ratio is null or failure_ratio <= 0 or failure_ratio > 1 then
    raise exception 'failure_ratio % is not valid', coalesce(failure_ratio::text, 'NULL')
      using errcode = '22023', hint = 'Use a share in (0, 1]: the parent fails once this share of children failed.';
  end if;
  perform pgrun.check_reporter(worker);
  n := jsonb_array_length(children);
  if n > pgrun.max_children() then
    raise exception 'defer_job got % children, over the limit of %', n, pgrun.max_children()
      using errcode = '22023', hint = 'Fan out in stages: defer to coordinators that each defer to part of the work.';
  end if;
  update pgrun.jobs j
  set status = 'waiting', progress_current = 0, progress_total = n, children_failed = 0,
      child_errors = '{}', failure_ratio = defer_job.failure_ratio, lease_expires_at = null
  where j.id = defer_job.id and j.attempt = defer_job.attempt and j.status = 'running'
    and (defer_job.worker is null or j.claimed_by = defer_job.worker)
  returning j.* into j;
  if not found then
    return null;
  end if;
  if n = 0 then
    update pgrun.jobs j set status = 'succeeded', finished_at = pgrun.clock(),
      result = jsonb_build_object('children', 0)
    where j.id = defer_job.id and j.status = 'waiting'
    returning j.* into j;
    return j;
  end if;
  perform pgrun.enqueue_jobs((
    select jsonb_agg(c - 'parent_id' || jsonb_build_object('parent_id', defer_job.id) order by ord)
    from jsonb_array_elements(children) with ordinality e(c, ord)));
  perform pgrun.add_event(j.id, 'job.deferred', 'info', format('waiting for %s children', n),
    jsonb_build_object('attempt', j.attempt, 'children', n, 'failure_ratio', defer_job.failure_ratio));
  return j;
end;
$$;

-- child_finished counts a finished child towards its waiting parent (row-locked, so
-- concurrent children are counted one at a time) and finishes the parent when the
-- outcome is decided: failed as soon as the failed share reaches its failure_ratio
-- (its unfinished children are then cancelled), succeeded once every child finished.
create or replace function pgrun.child_finished(child pgrun.jobs)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  p      pgrun.jobs;
  ok     boolean := child.status in ('succeeded', 'skipped');
  msg    text := coalesce(child.error ->> 'message', child.status::text);
  v_now  timestamptz := pgrun.clock();
begin
  -- A child finishing is the parent's sign of life for the timeout rule
  -- (fail_overdue): a parent past its timeout is spared while children keep finishing.
  update pgrun.jobs
  set heartbeat_at = v_now,
      progress_current = progress_current + case when ok then 1 else 0 end,
      children_failed = children_failed + case when ok then 0 else 1 end,
      child_errors = case when ok or msg = any (child_errors) or cardinality(child_errors) >= 3
                          then child_errors else child_errors || msg end
  where id = child.parent_id and status = 'waiting'
  returning * into p;
  if not found then
    return; -- the parent already finished (failed early, or cancelled)
  end if;
  if p.children_failed > 0
     and p.children_failed::double precision / p.progress_total >= coalesce(p.failure_ratio, 1.0) then
    update pgrun.jobs
    set status = 'failed', finished_at = v_now,
        error = jsonb_build_object('class', 'children_failed',
                  'message', format('%s of %s children failed: %s', p.children_failed, p.progress_total,
                                    array_to_string(p.child_errors, '; ')),
                  'child_errors', to_jsonb(p.child_errors), 'at', v_now)
    where id = p.id and status = 'waiting';
    perform pgrun.add_event(p.id, 'job.failed', 'error',
      format('%s of %s children failed', p.children_failed, p.progress_total),
      jsonb_build_object('class', 'children_failed', 'final', true, 'child_errors', to_jsonb(p.child_errors)));
    perform pgrun.cancel_tree(c.id, 'parent failed')
    from pgrun.jobs c
    where c.parent_id = p.id and c.status in ('pending', 'queued', 'running', 'waiting');
  elsif p.progress_current + p.children_failed >= p.progress_total then
    update pgrun.jobs
    set status = 'succeeded', finished_at = v_now,
        -- A DAG map node's output is its children's outputs in element order (fan-in);
        -- a coordinator's result gains the children counts.
        result = case
          when p.run_id is not null then
            (select coalesce(jsonb_agg(c.result order by (c.meta ->> 'map_index')::integer), '[]')
             from pgrun.jobs c where c.parent_id = p.id)
          else coalesce(p.result, '{}'::jsonb)
               || jsonb_build_object('children', p.progress_total, 'children_failed', p.children_failed)
        end
    where id = p.id and status = 'waiting';
  end if;
end;
$$;
