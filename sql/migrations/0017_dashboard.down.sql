drop index if exists pgrun.jobs_failed_idx;
