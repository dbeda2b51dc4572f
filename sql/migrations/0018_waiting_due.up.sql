-- 0018_waiting_due: waiting parents that can time out. Every maintain() round looks
-- for parents past their timeout (overdue_jobs, 60_leases.sql); without this index it
-- read them through jobs_parked_idx, with every pending workflow node beside them:
-- 20,000 pending nodes cost each round 10-22 ms with nothing overdue. Partial, so
-- only a parent that waits with a timeout and a failure ratio writes an entry.
create index jobs_waiting_due_idx on pgrun.jobs (started_at)
  where status = 'waiting' and failure_ratio is not null and timeout is not null;
