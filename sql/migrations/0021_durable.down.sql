delete from pgrun.maintenance_steps where step = 'wake_waits';
drop table pgrun.job_waits;
drop table pgrun.events;
drop table pgrun.job_steps;
