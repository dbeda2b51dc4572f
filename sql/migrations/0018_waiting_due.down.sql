drop index if exists pgrun.jobs_waiting_due_idx;
