-- Reverses 0024_sequences_debounce. What names the new columns and attributes goes
-- first (the insert trigger's WHEN clause, the sequence triggers, job_spec_fault's
-- body); the ledger is cleared so that Migrate re-applies the function set of the
-- version that remains.
drop trigger if exists jobs_before_insert on pgrun.jobs;
drop trigger if exists jobs_sequence_rejoin on pgrun.jobs;
drop trigger if exists jobs_sequence_gone on pgrun.jobs;
drop function if exists pgrun.job_spec_fault(pgrun.job_spec) cascade;
drop function if exists pgrun.sequence_hold_reason(pgrun.jobs) cascade;
delete from pgrun.maintenance_steps where step = 'recheck_sequences';
drop table pgrun.sequence_rechecks;
drop table pgrun.sequence_holds;
alter type pgrun.enqueued
  drop attribute folded,
  drop attribute deduplicated,
  drop attribute debounce_key,
  drop attribute sequence_key,
  add attribute deduplicated boolean;
alter type pgrun.job_spec
  drop attribute debounce_edge,
  drop attribute debounce,
  drop attribute debounce_key,
  drop attribute sequence_key;
alter table pgrun.queues drop column sequence_on_failure;
alter table pgrun.jobs drop column debounce_key, drop column sequence_key;
delete from pgrun.function_ledger;
