-- Reverses 0002_workflows. Functions that use these objects are dropped with them
-- (CASCADE); Migrate re-applies the function set for the remaining version.
drop table if exists pgrun.outbox, pgrun.run_inputs, pgrun.runs, pgrun.workflows cascade;
drop type if exists pgrun.run_state cascade;
alter table pgrun.jobs
  drop column if exists children_failed,
  drop column if exists child_errors,
  drop column if exists failure_ratio,
  drop column if exists dispatched_at;
delete from pgrun.function_ledger;
