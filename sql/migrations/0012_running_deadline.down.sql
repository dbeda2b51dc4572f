create index if not exists jobs_running_lease_idx on pgrun.jobs (lease_expires_at)
  where status = 'running';
drop index if exists pgrun.jobs_running_due_idx;
alter table pgrun.jobs drop column if exists deadline_at;
