-- dispatch.sql: what happens when a job finishes. Fan-in to a parent and DAG
-- expansion run in the transaction of the transition that finished the job, inside a
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

-- jobs_after_finish dispatches a workflow job (a child or a DAG node) the moment it
-- finishes. An error in the dispatch is caught: the finish commits and the dispatch
-- is queued in the outbox with the error.
create or replace function pgrun.jobs_after_finish()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  begin
    perform pgrun.dispatch(new.id);
  exception when others then
    insert into pgrun.outbox (job_id, event, attempts, next_attempt_at, last_error)
    values (new.id, 'job.' || new.status, 1, pgrun.clock() + pgrun.backoff(1), sqlerrm);
  end;
  return null;
end;
$$;

drop trigger if exists jobs_after_finish on pgrun.jobs;
create trigger jobs_after_finish
  after update of status on pgrun.jobs
  for each row
  when (new.status in ('succeeded', 'failed', 'cancelled', 'skipped')
        and old.status not in ('succeeded', 'failed', 'cancelled', 'skipped')
        and (new.parent_id is not null or new.run_id is not null))
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
