-- Reverses 0003_operations. Views are dropped first (the function set re-creates them).
drop view if exists pgrun.queue_stats, pgrun.active_jobs, pgrun.worker_status, pgrun.run_status, pgrun.host_status;
alter table pgrun.workers drop column if exists cadence, drop column if exists flagged_dead_at;
drop table if exists pgrun.worker_control, pgrun.schedules, pgrun.jobs_archive cascade;
drop index if exists pgrun.jobs_unique_key_recent_idx;
drop index if exists pgrun.jobs_running_key_idx;
alter table pgrun.jobs drop column if exists concurrency_key;
alter table pgrun.queues
  drop column if exists max_running, drop column if exists rate_limit,
  drop column if exists rate_period, drop column if exists rate_window_start,
  drop column if exists rate_window_count, drop column if exists concurrency_limit,
  drop column if exists default_lease, drop column if exists default_timeout,
  drop column if exists default_max_attempts, drop column if exists backoff_base,
  drop column if exists backoff_max, drop column if exists retention,
  drop column if exists archive;
alter table pgrun.jobs alter column max_attempts set default 25;
delete from pgrun.function_ledger;
