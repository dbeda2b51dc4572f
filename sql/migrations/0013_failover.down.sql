-- Reverses 0013_failover. What depends on the new objects goes first (note_server_epoch
-- returns a row of server_epochs; the insert trigger's WHEN and the view active_jobs
-- name the new columns); Migrate re-applies the function set, triggers and views
-- included.
drop function if exists pgrun.note_server_epoch();
drop trigger if exists jobs_before_insert on pgrun.jobs;
drop view if exists pgrun.active_jobs;
drop table pgrun.server_epochs;
alter table pgrun.jobs drop column lease_length;
alter table pgrun.jobs drop column claim_id;
delete from pgrun.function_ledger;
