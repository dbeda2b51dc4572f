-- 0019_refresh_job_stats: maintain()'s step that analyzes pgrun.jobs when the
-- planner's idea of its size has fallen far behind (refresh_job_stats, 62_maintain.sql).
-- It looks every round (one read of the catalog and the table's counters) and
-- analyzes only on a tenfold gap.
insert into pgrun.maintenance_steps (step, every) values ('refresh_job_stats', interval '0')
on conflict (step) do nothing;
