-- 0023_dashboard_lists: the dashboard's lists that do not go newest first by id
-- (internal/sqlapi/dashboard_lists.go), each read by an index in its own order.
--
-- Running jobs by start time, for the jobs page filtered on running (oldest start
-- first) and the overview's longest-running jobs. Without it that list read every
-- running row through jobs_running_due_idx (keyed on the lease) and sorted them, or
-- went newest first through the whole history, where a job running for hours hid
-- behind "Search older jobs". Partial, so only running rows have entries; what it
-- costs: one more index entry per claim (the update that claims is not HOT anyway,
-- status being in the claim index's predicate) and per lease renewal (which moves
-- the running index's key, so it is not HOT either). Queued jobs need nothing new:
-- their list goes in claim order by jobs_claim_idx, queue by queue.
--
-- Its predicate says "started_at > '-infinity'", which every running job meets (the
-- claim sets started_at) but which no statement of the engine implies, so that only a
-- statement that says so too can use it: the engine's own reads of running jobs (the
-- lease reaper, the timeout rule, the limits' counts) never meet it. With the plain
-- "status = 'running'", or "started_at is not null" (which any strict comparison of
-- started_at implies), statistics from before a burst of claims made the planner take
-- it for the maintenance round's reads and walk every running row
-- (tests/plan_check_maintain_test.go).
create index jobs_running_started_idx on pgrun.jobs (started_at, id)
  where status = 'running' and started_at > '-infinity';

-- A job's children in id order: jobs_parent_idx gains id as its second column, so
-- that "children of job X below id Y, newest first, 50 of them" (the job page's
-- children, a run's map children in its job list) reads 50 entries, where the old
-- index returned every child unordered and a map of 60,000 children cost a sort of
-- all of them (about 300 ms). Still one entry per child, as before; the lookups by
-- parent alone (children_finished, map_node_resumed, cancel_children) use it as they
-- used the old one.
create index jobs_parent_id_idx on pgrun.jobs (parent_id, id) where parent_id is not null;
drop index pgrun.jobs_parent_idx;
alter index pgrun.jobs_parent_id_idx rename to jobs_parent_idx;
