-- 0026_worker_sessions: what maintenance needs to tell a dead runner from a live one
-- at once, and an outage from a quiet spell (docs/reliability.md, "Runner liveness and
-- outages").
--
-- A runner holds a session-level advisory lock keyed on its worker id on a connection
-- it keeps for its life (its LISTEN connection): pgrun.bind_worker_session takes it
-- and records the session's backend pid here. When that session ends (the process was
-- killed, its host went away, its socket closed) the server drops the lock, and
-- maintenance (pgrun.reap_lost_sessions) sees it gone: session_lost_at is when it was
-- first seen gone; a second later the worker is flagged dead and its running jobs
-- are handed back, without waiting for their leases. NULL session_pid: not bound
-- (a worker behind a transaction-mode pooler, an older runner, a worker in another
-- language), judged by its leases alone.
alter table pgrun.workers
  add column session_pid integer,
  add column session_lost_at timestamptz;

-- checked_at is the server's time (now(), not pgrun.clock()) of the latest
-- maintain() round that found this epoch current, and round_every the time between
-- that round and the one before: a round that comes much later than the rounds before
-- it (no maintenance, so no runner got through either, as when every runner lost the
-- network) starts a new epoch of reason 'gap', and leases get their grace after it as
-- after a restart (pgrun.note_server_epoch).
alter table pgrun.server_epochs
  add column checked_at timestamptz,
  add column round_every interval;
alter table pgrun.server_epochs drop constraint server_epochs_reason_check;
alter table pgrun.server_epochs add constraint server_epochs_reason_check
  check (reason in ('start', 'promotion', 'gap'));

insert into pgrun.maintenance_steps (step, every) values ('reap_lost_sessions', interval '0')
on conflict (step) do nothing;
