-- 0015_dashboard: failed jobs by id. The dashboard's dead letters and bulk redrive
-- (retry_jobs) read failed jobs newest or oldest first; without an index that is a
-- scan of the whole history whenever failures are rare. Partial, so only a job that
-- fails for good writes an entry: claims and completions never touch it.
create index jobs_failed_idx on pgrun.jobs (id) where status = 'failed';
