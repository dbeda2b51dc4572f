delete from pgrun.maintenance_steps where step = 'rollup_minutes';
drop table pgrun.rollup_watermark;
drop index pgrun.jobs_failed_finished_idx;
drop table pgrun.error_quarters;
drop table pgrun.error_minutes;
drop table pgrun.job_quarter_totals;
drop table pgrun.job_minute_totals;
drop table pgrun.job_quarters;
drop table pgrun.job_minutes;
