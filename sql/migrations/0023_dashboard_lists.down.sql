create index jobs_parent_one_idx on pgrun.jobs (parent_id) where parent_id is not null;
drop index pgrun.jobs_parent_idx;
alter index pgrun.jobs_parent_one_idx rename to jobs_parent_idx;
drop index if exists pgrun.jobs_running_started_idx;
