-- Reverses 0004_gpu. Views are dropped first (the function set re-creates them).
drop view if exists pgrun.queue_stats, pgrun.active_jobs, pgrun.worker_status, pgrun.run_status, pgrun.host_status;
drop table if exists pgrun.hw_metrics cascade;
alter table pgrun.workers drop column if exists servable;
alter table pgrun.jobs drop column if exists model_required;
alter table pgrun.queues drop column if exists warm_wait;
delete from pgrun.function_ledger;
