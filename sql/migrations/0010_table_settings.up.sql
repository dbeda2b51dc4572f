-- 0010_table_settings: storage settings for a table that is a queue. (docs/operations.md)
--
-- fillfactor 90 leaves room on each page so that the updates that touch no indexed
-- column (progress, heartbeats, events' bookkeeping) stay on the page (HOT) and write
-- no index entries. Claims and completions change status, which the partial indexes
-- read, so they are never HOT whatever the fillfactor.
--
-- Autovacuum at 1% of the table instead of 20%: every job is inserted, updated twice
-- and eventually deleted, so dead rows and dead index entries pile up in proportion to
-- throughput, not to the table's size; the default waits for a fifth of a large table
-- to be dead. Durability is untouched: nothing here changes what is written or when
-- it is flushed.
alter table pgrun.jobs set (
  fillfactor = 90,
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_insert_scale_factor = 0.01,
  autovacuum_analyze_scale_factor = 0.02
);
alter table pgrun.job_events set (
  autovacuum_vacuum_insert_scale_factor = 0.05
);
