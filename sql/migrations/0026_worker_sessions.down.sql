-- Reverses 0026_worker_sessions. What names the new columns goes first (the session
-- functions, the step); the ledger is cleared so that Migrate re-applies the function
-- set of the version that remains.
drop function if exists pgrun.bind_worker_session(text, integer);
drop function if exists pgrun.reap_lost_sessions(integer);
drop function if exists pgrun.worker_session_gone(text);
drop function if exists pgrun.worker_session_key(text);
drop function if exists pgrun.worker_session_class();
drop function if exists pgrun.session_confirm();
drop function if exists pgrun.lose_leases(bigint[], integer, text, jsonb);
drop function if exists pgrun.after_gap(pgrun.server_epochs, timestamptz);
drop function if exists pgrun.round_gap(interval);
delete from pgrun.maintenance_steps where step = 'reap_lost_sessions';
delete from pgrun.server_epochs where reason = 'gap';
alter table pgrun.server_epochs drop constraint server_epochs_reason_check;
alter table pgrun.server_epochs add constraint server_epochs_reason_check
  check (reason in ('start', 'promotion'));
alter table pgrun.server_epochs drop column round_every, drop column checked_at;
alter table pgrun.workers drop column session_lost_at, drop column session_pid;
delete from pgrun.function_ledger;
