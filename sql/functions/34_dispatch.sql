-- 34_dispatch.sql: what happens when a job finishes. Fan-in to a parent and DAG
-- expansion run in the transaction of the transition that finished the job, at the end
-- of the statement that finished it (for all the jobs it finished at once), inside a
-- subtransaction: if they fail, the finish still commits and the dispatch goes to the
-- outbox, which maintain() retries with backoff until it succeeds or is poisoned.

-- queue_readied records, until the end of the transaction, that a job became ready to
-- run in queue, in the setting pgrun.readied (",q1,q2,", each queue once). A runner
-- reads it after its complete_jobs call and wakes its own fetchers for those queues as
-- soon as the call commits, ahead of the pgrun_jobs notification (sent all the same,
-- for every runner).
create or replace function pgrun.queue_readied(queue text)
returns void
language sql
set search_path = pgrun, pg_catalog
as $$
  select set_config('pgrun.readied',
                    coalesce(nullif(current_setting('pgrun.readied', true), ''), ',') || queue || ',', true)
  where strpos(coalesce(current_setting('pgrun.readied', true), ''), ',' || queue || ',') = 0
$$;

-- dispatch applies the consequences of job_id having finished, once: a job whose
-- dispatched_at is already set is skipped, so a retried dispatch never counts a child
-- twice or releases a dependent twice. Returns whether it did anything.
create or replace function pgrun.dispatch(job_id bigint)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  j pgrun.jobs;
begin
  update pgrun.jobs
  set dispatched_at = pgrun.clock()
  where id = job_id and dispatched_at is null
    and status in ('succeeded', 'failed', 'cancelled', 'skipped')
  returning * into j;
  if not found then
    return false;
  end if;
  if j.parent_id is not null then
    perform pgrun.child_finished(j);
  end if;
  if j.run_id is not null then
    perform pgrun.node_finished(j);
  end if;
  return true;
end;
$$;

-- dispatch_finished applies the consequences of the workflow jobs (children and DAG
-- nodes) that one statement finished, as one set. The children, described by element
-- i of parent_ids, oks (succeeded or skipped) and messages, are counted towards their
-- parents together (children_finished: each parent's row is locked and written once,
-- however many of its children are in the set); then the DAG nodes are released one
-- after the other in id order (node_finished). The jobs are already marked dispatched
-- (jobs_mark_dispatched). Raises whatever a consequence raises; the caller then falls
-- back to one dispatch per job.
create or replace function pgrun.dispatch_finished(
  parent_ids  bigint[],
  oks         boolean[],
  messages    text[],
  nodes       bigint[]
)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  j  pgrun.jobs;
begin
  if parent_ids is not null then
    perform pgrun.children_finished(parent_ids, oks, messages, pgrun.clock());
  end if;
  if nodes is not null then
    for j in select * from pgrun.jobs x where x.id = any (nodes) order by x.id loop
      perform pgrun.node_finished(j);
    end loop;
  end if;
end;
$$;

-- jobs_mark_dispatched marks a workflow job (a child or a DAG node) dispatched in the
-- very write that finishes it, rather than with a second write of the row: its
-- consequences are applied at the end of that statement (jobs_dispatch), in the same
-- transaction, or the mark is taken back and the dispatch goes to the outbox.
create or replace function pgrun.jobs_mark_dispatched()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  -- Checked here, not in the trigger's WHEN: a WHEN on dispatched_at would keep
  -- migration 0002's down step from dropping the column.
  if new.dispatched_at is null then
    new.dispatched_at := coalesce(new.finished_at, pgrun.clock());
  end if;
  return new;
end;
$$;

-- This trigger has the name of the row trigger that dispatched each job on its own
-- before jobs_dispatch: the function set of an older release, applied over this one,
-- drops it by that name, so its own dispatch (which skips jobs already marked) still
-- sees every job finish, and jobs_dispatch, left behind, finds no marked rows.
-- (02_retired.sql drops the trigger it replaced, jobs_before_finish.)
select pgrun.ensure_ddl('trigger', 'jobs_after_finish', 'pgrun.jobs', $ddl$
create or replace trigger jobs_after_finish
  before update of status on pgrun.jobs
  for each row
  when (new.status in ('succeeded', 'failed', 'cancelled', 'skipped')
        and old.status not in ('succeeded', 'failed', 'cancelled', 'skipped')
        and (new.parent_id is not null or new.run_id is not null))
  execute function pgrun.jobs_mark_dispatched();
$ddl$);

-- jobs_dispatch dispatches the workflow jobs (children and DAG nodes) that an
-- UPDATE statement finished, once per statement: the moment they finish, in the
-- transaction that finished them, as one set (dispatch_finished), so that a batch of
-- completions updates each parent once. If the set fails, the marks are taken back and
-- each job is dispatched on its own; a job whose dispatch fails is queued in the
-- outbox with the error, and its finish commits all the same. Every UPDATE of
-- pgrun.jobs runs it; one that finished no workflow job costs a scan of its new rows.
create or replace function pgrun.jobs_dispatch()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
-- The planner's own choices, whatever the UPDATE that fired it pinned (claim_locked).
set plan_cache_mode = auto
set enable_seqscan = on
set enable_nestloop = on
as $$
declare
  before    jsonb;
  ids       bigint[];
  parents   bigint[];
  oks       boolean[];
  messages  text[];
  nodes     bigint[];
  job       bigint;
  hand      record;
begin
  -- Durable awaits (35_durable.sql): jobs and clients waiting for a job this statement
  -- finished are answered. One look at an index of job_waits when nobody waits. (Only
  -- with such jobs: wake_awaiters' own UPDATE fires this trigger again.)
  if pgrun.awaits_jobs() then
    ids := pgrun.awaited_among(array(select n.id from finished_new n
                                     where n.status in ('succeeded', 'failed', 'cancelled', 'skipped')));
    if cardinality(ids) > 0 then
      perform pgrun.wake_awaiters(ids);
    end if;
    ids := null;
  end if;
  -- Sequences (36_sequences.sql): a job of a sequence that this statement took from
  -- its head (queued, running, waiting) or its failed hold to a final state lets the
  -- next one go (sequences_ended; the ids are those that failed from the head, and
  -- those that succeeded from running under the worker of a handoff that named them,
  -- handoff_request). One look at the new rows when none has a sequence_key.
  if exists (select 1 from finished_new n where n.sequence_key is not null
             and n.status in ('succeeded', 'failed', 'cancelled', 'skipped')) then
    select jsonb_object_agg(o.id::text, o.status) into before from finished_old o where o.sequence_key is not null;
    select * into hand from pgrun.handoff_request();
    perform pgrun.sequences_ended(array_agg(n.queue), array_agg(n.sequence_key), array_agg(n.tenant),
                                  array_agg(n.id) filter (where n.status = 'failed' and o.status <> 'failed'),
                                  case when hand.worker is not null then array_agg(case when e.hand then n.kind end) end,
                                  case when hand.worker is not null then array_agg(case when e.hand then n.model end) end,
                                  hand.worker, hand.lease)
    from finished_new n
    cross join lateral (select before ->> n.id::text as status) o
    cross join lateral (select n.status = 'succeeded' and o.status = 'running'
                               and n.claimed_by = hand.worker and hand.heads ? n.id::text as hand) e
    where n.sequence_key is not null and n.status in ('succeeded', 'failed', 'cancelled', 'skipped')
      and o.status in ('queued', 'running', 'waiting', 'failed') and o.status <> n.status::text
    having count(*) > 0;
    before := null;
  end if;
  -- The new rows first (cheap): most statements finish no workflow job.
  if not exists (select 1 from finished_new n
                 where n.dispatched_at is not null
                   and n.status in ('succeeded', 'failed', 'cancelled', 'skipped')
                   and (n.parent_id is not null or n.run_id is not null)) then
    return null;
  end if;
  -- Jobs this statement did not finish: those that had finished, or been dispatched,
  -- before it (usually none). A jsonb object serves as the set, not a join of the two
  -- transition tables: the function's plan is cached from its first statement, and
  -- planned for one row it joins them row by row (150 ms for a batch of 1000).
  select jsonb_object_agg(o.id::text, true) into before
  from finished_old o
  where (o.status in ('succeeded', 'failed', 'cancelled', 'skipped') or o.dispatched_at is not null)
    and (o.parent_id is not null or o.run_id is not null);
  -- Scalars only: an array of whole rows costs more to build than the fan-in itself.
  select array_agg(n.id order by n.id),
         array_agg(n.parent_id order by n.id) filter (where n.parent_id is not null),
         array_agg(n.status in ('succeeded', 'skipped') order by n.id) filter (where n.parent_id is not null),
         array_agg(coalesce(n.error ->> 'message', n.status::text) order by n.id) filter (where n.parent_id is not null),
         array_agg(n.id order by n.id) filter (where n.run_id is not null)
  into ids, parents, oks, messages, nodes
  from finished_new n
  where n.status in ('succeeded', 'failed', 'cancelled', 'skipped')
    and (n.parent_id is not null or n.run_id is not null)
    and n.dispatched_at is not null
    and not coalesce(before ? n.id::text, false);
  if ids is null then
    return null;
  end if;
  begin
    perform pgrun.dispatch_finished(parents, oks, messages, nodes);
  exception when others then
    update pgrun.jobs x set dispatched_at = null where x.id = any (ids);
    foreach job in array ids loop
      begin
        perform pgrun.dispatch(job);
      exception when others then
        insert into pgrun.outbox (job_id, event, attempts, next_attempt_at, last_error)
        select x.id, 'job.' || x.status, 1, pgrun.clock() + pgrun.backoff(1), sqlerrm
        from pgrun.jobs x where x.id = job;
      end;
    end loop;
  end;
  return null;
end;
$$;

-- Per statement, not per row: transition tables cannot be combined with a column
-- list, so it fires for every UPDATE and filters the rows itself.
select pgrun.ensure_ddl('trigger', 'jobs_dispatch', 'pgrun.jobs', $ddl$
create or replace trigger jobs_dispatch
  after update on pgrun.jobs
  referencing old table as finished_old new table as finished_new
  for each statement
  execute function pgrun.jobs_dispatch();
$ddl$);

-- drain_outbox retries up to batch due dispatches, each in its own subtransaction.
-- A success marks the row processed; a failure backs off, and after max_attempts the
-- row is flagged poison and an event on the job says why. Returns
-- {"dispatched": n, "retried": n, "poisoned": n}.
create or replace function pgrun.drain_outbox(batch integer default 100, max_attempts integer default 5)
returns jsonb
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  o          pgrun.outbox;
  v_now      timestamptz := pgrun.clock();
  dispatched integer := 0;
  retried    integer := 0;
  poisoned   integer := 0;
begin
  for o in
    select * from pgrun.outbox
    where processed_at is null and poisoned_at is null and next_attempt_at <= v_now
    order by next_attempt_at
    limit batch
    for update skip locked
  loop
    begin
      perform pgrun.dispatch(o.job_id);
      update pgrun.outbox set processed_at = v_now where id = o.id;
      dispatched := dispatched + 1;
    exception when others then
      if o.attempts + 1 >= max_attempts then
        update pgrun.outbox
        set attempts = o.attempts + 1, last_error = sqlerrm, poisoned_at = v_now
        where id = o.id;
        perform pgrun.add_event(o.job_id, 'job.dispatch_poisoned', 'error',
          format('dispatch of %s failed %s times; giving up: %s', o.event, o.attempts + 1, sqlerrm),
          jsonb_build_object('outbox_id', o.id, 'attempts', o.attempts + 1));
        poisoned := poisoned + 1;
      else
        update pgrun.outbox
        set attempts = o.attempts + 1, last_error = sqlerrm,
            next_attempt_at = v_now + pgrun.backoff(o.attempts + 1)
        where id = o.id;
        retried := retried + 1;
      end if;
    end;
  end loop;
  return jsonb_build_object('dispatched', dispatched, 'retried', retried, 'poisoned', poisoned);
end;
$$;
