-- Reverses 0010_table_settings.
alter table pgrun.jobs reset (fillfactor, autovacuum_vacuum_scale_factor,
  autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor);
alter table pgrun.job_events reset (autovacuum_vacuum_insert_scale_factor);
