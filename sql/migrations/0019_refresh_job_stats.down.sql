delete from pgrun.maintenance_steps where step = 'refresh_job_stats';
