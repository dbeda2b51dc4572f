-- dispatch.sql: what happens when a job finishes. Fan-in to a parent and DAG
-- expansion run in the transaction of the transition that finished the job, at the end
-- of the statement that finished it (for all the jobs it finished at once), inside a
-- subtransaction: if they fail, the finish still commits and the dispatch goes to the
-- outbox, which maintain() retries with backoff until it succeeds or is poisoned.

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

-- dispatch_finished applies the consequences of the finished jobs ids (children and
-- DAG nodes) as one set, once each: the jobs whose dispatched_at is still NULL are
-- marked, their children are counted towards their parents together
-- (children_finished: each parent's row is locked and written once, however many of
-- its children are in ids), and the DAG nodes are released one after the other in id
-- order (node_finished). Raises whatever a consequence raises; the caller then falls
-- back to one dispatch per job. Sequential scans are off here: for "id = any (ids)"
-- with a thousand ids the planner reads a whole jobs table of 60,000 cached rows
-- (10 ms) rather than probe the primary key (1 ms), and the table only grows.
create or replace function pgrun.dispatch_finished(ids bigint[])
returns void
language plpgsql
set search_path = pgrun, pg_catalog
set enable_seqscan = off
as $$
declare
  v_now     timestamptz := pgrun.clock();
  parents   bigint[];
  oks       boolean[];
  messages  text[];
  nodes     bigint[];
  j         pgrun.jobs;
begin
  with marked as (
    update pgrun.jobs x
    set dispatched_at = v_now
    where x.id = any (ids) and x.dispatched_at is null
      and x.status in ('succeeded', 'failed', 'cancelled', 'skipped')
    returning x.id, x.parent_id, x.run_id, x.status, x.error ->> 'message' as message
  )
  select array_agg(m.parent_id order by m.id) filter (where m.parent_id is not null),
         array_agg(m.status in ('succeeded', 'skipped') order by m.id) filter (where m.parent_id is not null),
         array_agg(coalesce(m.message, m.status::text) order by m.id) filter (where m.parent_id is not null),
         array_agg(m.id order by m.id) filter (where m.run_id is not null)
  into parents, oks, messages, nodes
  from marked m;
  if parents is not null then
    perform pgrun.children_finished(parents, oks, messages, v_now);
  end if;
  for j in
    select * from pgrun.jobs x where x.id = any (nodes) order by x.id
  loop
    perform pgrun.node_finished(j);
  end loop;
end;
$$;

-- jobs_after_finish dispatches the workflow jobs (children and DAG nodes) that an
-- UPDATE statement finished, once per statement: the moment they finish, in the
-- transaction that finished them, as one set (dispatch_finished), so that a batch of
-- completions updates each parent once. If the set fails, each job is dispatched on
-- its own, and a job whose dispatch fails is queued in the outbox with the error; its
-- finish commits all the same. Every UPDATE of pgrun.jobs runs it; one that finished
-- no workflow job costs a scan of its new rows.
create or replace function pgrun.jobs_after_finish()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  ids  bigint[];
  job  bigint;
begin
  -- The new rows first (cheap); the old ones only for candidates, to keep the jobs
  -- that moved into a final status in this statement.
  if not exists (select 1 from finished_new n
                 where n.status in ('succeeded', 'failed', 'cancelled', 'skipped')
                   and n.dispatched_at is null
                   and (n.parent_id is not null or n.run_id is not null)) then
    return null;
  end if;
  select array_agg(n.id order by n.id) into ids
  from finished_new n join finished_old o on o.id = n.id
  where n.status in ('succeeded', 'failed', 'cancelled', 'skipped')
    and o.status not in ('succeeded', 'failed', 'cancelled', 'skipped')
    and n.dispatched_at is null
    and (n.parent_id is not null or n.run_id is not null);
  if ids is null then
    return null;
  end if;
  begin
    perform pgrun.dispatch_finished(ids);
  exception when others then
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

-- One trigger per statement, not per row: transition tables cannot be combined with
-- a column list, so it fires for every UPDATE and filters the rows itself.
drop trigger if exists jobs_after_finish on pgrun.jobs;
create trigger jobs_after_finish
  after update on pgrun.jobs
  referencing old table as finished_old new table as finished_new
  for each statement
  execute function pgrun.jobs_after_finish();

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
