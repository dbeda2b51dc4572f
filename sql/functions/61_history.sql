-- 61_history.sql: what happens to finished jobs: kept for their queue's retention,
-- then deleted with their events or moved to jobs_archive. prune_history is a
-- maintain() step (62_maintain.sql), callable alone.

-- prune_history deletes finished jobs past their queue's retention (default_retention
-- when the queue sets none) with their events and durable steps (a finished job needs
-- them no more; a parked one is not finished), or moves them to jobs_archive for
-- queues with archive; jobs of running runs and children of active parents are kept.
-- Durable events emitted more than default_retention ago go too (a job that awaits one
-- later waits for a new emit). At most batch jobs per queue per call; it returns at
-- once unless the oldest
-- finished job is past the shortest retention in force. Returns how many were pruned.
create or replace function pgrun.prune_history(
  default_retention  interval default interval '7 days',
  batch              integer default 1000
)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now       timestamptz := pgrun.clock();
  v_oldest    timestamptz;
  v_shortest  interval;
  v_pruned    integer := 0;
  v_n         integer;
  qr          record;
begin
  select min(j.finished_at) into v_oldest from pgrun.jobs j where j.finished_at is not null;
  select least(min(q.retention), default_retention) into v_shortest from pgrun.queues q;
  for qr in
    select q.name, coalesce(q.retention, default_retention) as keep, q.archive from pgrun.queues q
    where v_oldest < v_now - coalesce(v_shortest, default_retention)
  loop
    with victims as (
      select j.id from pgrun.jobs j
      where j.queue = qr.name and j.finished_at < v_now - qr.keep
        and (j.run_id is null or not exists (select 1 from pgrun.runs r where r.id = j.run_id and r.status = 'running'))
        and (j.parent_id is null or not exists (select 1 from pgrun.jobs p where p.id = j.parent_id
                                                and pgrun.is_active(p.status)))
      order by j.finished_at
      limit batch
      for update skip locked
    ),
    events as (delete from pgrun.job_events e using victims v where e.job_id = v.id),
    steps as (delete from pgrun.job_steps s using victims v where s.job_id = v.id),
    waits as (delete from pgrun.job_waits w using victims v where w.job_id = v.id),
    gone as (delete from pgrun.jobs j using victims v where j.id = v.id returning j.*),
    archived as (insert into pgrun.jobs_archive (id, queue, kind, status, finished_at, archived_at, job)
                 select g.id, g.queue, g.kind, g.status, g.finished_at, v_now, to_jsonb(g)
                 from gone g where qr.archive)
    select count(*) into v_n from gone;
    v_pruned := v_pruned + v_n;
  end loop;
  -- Durable events (35_durable.sql) are kept for default_retention too, in batches.
  delete from pgrun.events e
  where (e.tenant, e.name) in (select x.tenant, x.name from pgrun.events x
                               where x.emitted_at < v_now - default_retention
                               order by x.emitted_at limit batch);
  return v_pruned;
end;
$$;
