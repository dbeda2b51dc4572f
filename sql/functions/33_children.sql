-- 33_children.sql: coordinator jobs. A running job defers to children and waits; each
-- child that finishes counts towards the parent, which succeeds or fails in the same
-- transaction as the child that decided it. The children one statement finishes (a
-- batch of completions) are counted together, with one write of each parent.

-- defer_job turns running job (id, attempt) into a waiting parent of children (a JSON
-- array of enqueue_jobs objects; parent_id is set for them), atomically. The parent
-- fails as soon as the failed share of its children reaches failure_ratio (default
-- 1.0: only if all fail) and succeeds when all have finished below it. With no
-- children it succeeds at once. Returns the parent, or NULL if (id, attempt) is not
-- running (under worker and claim_id, when given: see 32_transitions.sql).
create or replace function pgrun.defer_job(
  id             bigint,
  attempt        integer,
  children       jsonb,
  failure_ratio  double precision default 1.0,
  worker         text default null,
  claim_id       uuid default null
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
  perform pgrun.check_claim(worker, claim_id is not null);
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
    and (defer_job.claim_id is null or j.claim_id = defer_job.claim_id)
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

-- children_finished counts finished children towards their waiting parents at v_now:
-- element i of the arrays is one child (its parent_id, whether it succeeded or was
-- skipped, and its error message), in the order the children are counted. Each parent
-- whose outcome they decide is finished (settle_parent). The children of one parent
-- are counted together: the parent's row is locked and written once per call, not
-- once per child, so a batch of completions does not queue up on it. Parents are
-- locked in id order, so calls that share parents cannot deadlock. A child finishing
-- is its parent's sign of life for the timeout rule (fail_overdue): heartbeat_at moves
-- to v_now. child_errors keeps the first three distinct messages of failed children.
-- Children of a parent that is no longer waiting (it failed early, or was cancelled)
-- change nothing.
create or replace function pgrun.children_finished(
  parent_ids  bigint[],
  oks         boolean[],
  messages    text[],
  v_now       timestamptz
)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  parents  bigint[];
  done     integer[];
  failed   integer[];
  msgs     jsonb[];
  p        pgrun.jobs;
begin
  -- Per parent: how many succeeded, how many did not, and the first three distinct
  -- messages of the latter (enough to fill child_errors whatever it holds already).
  with kids as materialized (
    select k.parent_id, k.ok, k.msg, k.n
    from unnest(parent_ids, oks, messages) with ordinality k(parent_id, ok, msg, n)
  ), firsts as (
    select d.parent_id, jsonb_agg(d.msg order by d.first) as msgs
    from (select k.parent_id, k.msg, min(k.n) as first,
                 row_number() over (partition by k.parent_id order by min(k.n)) as r
          from kids k where not k.ok
          group by k.parent_id, k.msg) d
    where d.r <= 3
    group by d.parent_id
  )
  select array_agg(a.parent_id order by a.parent_id), array_agg(a.ok order by a.parent_id),
         array_agg(a.bad order by a.parent_id), array_agg(f.msgs order by a.parent_id)
  into parents, done, failed, msgs
  from (select k.parent_id, (count(*) filter (where k.ok))::integer as ok,
               (count(*) filter (where not k.ok))::integer as bad
        from kids k group by k.parent_id) a
  left join firsts f on f.parent_id = a.parent_id;
  if parents is null then
    return;
  end if;
  -- status is compared as text so that the parents go by primary key, not through
  -- the partial index of every parked job.
  perform 1 from pgrun.jobs x
  where x.id = any (parents) and x.status::text = 'waiting'
  order by x.id
  for update;
  for p in
    update pgrun.jobs x
    set heartbeat_at = v_now,
        progress_current = x.progress_current + a.ok,
        children_failed = x.children_failed + a.bad,
        child_errors = case
          when a.msgs is null or cardinality(x.child_errors) >= 3 then x.child_errors
          else (select array_agg(u.m order by u.o)
                from (select t.m, min(t.o) as o
                      from unnest(x.child_errors || array(select jsonb_array_elements_text(a.msgs)))
                           with ordinality t(m, o)
                      group by t.m order by min(t.o) limit 3) u)
        end
    from unnest(parents, done, failed, msgs) a(parent_id, ok, bad, msgs)
    where x.id = a.parent_id and x.status::text = 'waiting'
    returning x.*
  loop
    perform pgrun.settle_parent(p, v_now);
  end loop;
  -- Children that finish after their parent failed sweep up the siblings its failure
  -- could not cancel (cancel_children). Late children are few: the parent's failure
  -- cancelled the others, whose reports then match nothing.
  perform pgrun.cancel_children(x.id)
  from pgrun.jobs x
  where x.id = any (parents) and x.status::text = 'failed' and x.error ->> 'class' = 'children_failed';
end;
$$;

-- cancel_children cancels the unfinished children of failed parent parent_id that no
-- other transaction holds (skip locked). Waiting for a child held by another
-- transaction would deadlock when that transaction is finishing the child and waits,
-- in its turn, for the parent's row, which the caller holds; such a child ends on its
-- own, and one held for a moment by something else (a claim, a lease renewal) is
-- cancelled when the next of its siblings finishes (children_finished).
create or replace function pgrun.cancel_children(parent_id bigint)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.cancel_tree(c.id, 'parent failed')
  from (select x.id from pgrun.jobs x
        where x.parent_id = cancel_children.parent_id and pgrun.is_active(x.status)
        order by x.id
        for update skip locked) c;
end;
$$;

-- child_finished counts one finished child towards its waiting parent: the
-- one-child form of children_finished, used when jobs are dispatched one at a time
-- (the outbox, or a batch whose dispatch failed).
create or replace function pgrun.child_finished(child pgrun.jobs)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.children_finished(array[child.parent_id], array[child.status in ('succeeded', 'skipped')],
    array[coalesce(child.error ->> 'message', child.status::text)], pgrun.clock());
end;
$$;

-- settle_parent finishes waiting parent p, as counted, if its children decided the
-- outcome: failed as soon as the failed share reaches its failure_ratio (an event
-- says why, and its unfinished children are cancelled: cancel_children), succeeded
-- once every child finished (a DAG map node's result is its children's results in
-- element order; a coordinator's result gains the counts). Otherwise, or if p is no
-- longer waiting, nothing changes.
create or replace function pgrun.settle_parent(p pgrun.jobs, v_now timestamptz)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  if p.children_failed > 0
     and p.children_failed::double precision / p.progress_total >= coalesce(p.failure_ratio, 1.0) then
    update pgrun.jobs
    set status = 'failed', finished_at = v_now,
        error = jsonb_build_object('class', 'children_failed',
                  'message', format('%s of %s children failed: %s', p.children_failed, p.progress_total,
                                    array_to_string(p.child_errors, '; ')),
                  'child_errors', to_jsonb(p.child_errors), 'at', v_now)
    where id = p.id and status = 'waiting';
    if not found then
      return;
    end if;
    perform pgrun.add_event(p.id, 'job.failed', 'error',
      format('%s of %s children failed', p.children_failed, p.progress_total),
      jsonb_build_object('class', 'children_failed', 'final', true, 'child_errors', to_jsonb(p.child_errors)));
    perform pgrun.cancel_children(p.id);
  elsif p.progress_current + p.children_failed >= p.progress_total then
    update pgrun.jobs
    set status = 'succeeded', finished_at = v_now,
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
