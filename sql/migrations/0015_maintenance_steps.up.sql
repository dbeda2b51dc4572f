-- 0015_maintenance_steps: each maintain() step's cadence. Lease reaping and the
-- timeout rule must run every round, but pruning history or forgetting old workers
-- every second is work for nothing. Operators change a cadence with
-- pgrun.set_maintenance_step (sql/functions/62_maintain.sql).
--
-- every: '0' runs the step every round; otherwise maintain() runs it at most once per
-- every, counted from last_run_at, which maintain() sets when it runs such a step (a
-- step that runs every round is not written each round). A step called alone
-- (select pgrun.prune_history()) ignores its cadence and leaves last_run_at alone.
create table pgrun.maintenance_steps (
  step         text primary key,
  every        interval not null check (every >= interval '0'),
  last_run_at  timestamptz
);
insert into pgrun.maintenance_steps (step, every) values
  ('reap_expired_leases', interval '0'),
  ('fail_overdue',        interval '0'),
  ('flag_dead_workers',   interval '0'),
  ('forget_workers',      interval '1 minute'),
  ('drain_outbox',        interval '0'),
  ('fire_schedules',      interval '0'),
  ('prune_history',       interval '1 minute');
