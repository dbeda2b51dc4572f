-- Reverses 0005_failure_semantics. Views are dropped first (the function set re-creates them).
drop view if exists pgrun.queue_stats, pgrun.active_jobs, pgrun.worker_status, pgrun.run_status, pgrun.host_status;
alter table pgrun.job_events drop constraint if exists job_events_job_fk;
alter table pgrun.workers drop column if exists kinds;
drop table if exists pgrun.maintenance_leader;
delete from pgrun.function_ledger;
