-- 0012_running_deadline: one index answers both maintenance questions about running
-- jobs, "whose lease ran out?" and "who is past its timeout?", with a range scan.
--
-- deadline_at is started_at + timeout, set by the claim (NULL without a timeout). The
-- timeout rule used to find overdue jobs by reading every running entry and its row
-- (started_at + timeout cannot be indexed: it depends on the time zone); during a
-- large burn-down that index holds tens of thousands of dead entries, and the check
-- cost 50-85 ms a second. The running index is now keyed on the earlier of the lease
-- and the deadline, so both steps stop at the first entry that is not yet due, and
-- claims still write one entry per job into it. (deadline_at is not guarded at insert:
-- it is read only while a job runs, and every claim sets it.)
alter table pgrun.jobs add column deadline_at timestamptz;

update pgrun.jobs set deadline_at = started_at + timeout
where status = 'running' and timeout is not null;

create index jobs_running_due_idx on pgrun.jobs (least(lease_expires_at, deadline_at))
  where status = 'running';

drop index pgrun.jobs_running_lease_idx;
