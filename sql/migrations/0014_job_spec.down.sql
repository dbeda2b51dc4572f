-- Reverses 0014_job_spec. The insert trigger's WHEN clause and the enqueue functions
-- use the types: they go with them, and the ledger is cleared so that Migrate
-- re-applies the function set of the version that remains.
drop trigger if exists jobs_before_insert on pgrun.jobs;
drop type if exists pgrun.enqueued cascade;
drop type if exists pgrun.job_spec cascade;
delete from pgrun.function_ledger;
