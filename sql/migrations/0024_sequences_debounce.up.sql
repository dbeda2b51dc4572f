-- 0024_sequences_debounce: flow control per key at enqueue time (docs/operations.md,
-- "Sequences" and "Debounce"; the rules live in sql/functions/20_enqueue.sql,
-- 21_enqueue_batch.sql and 36_sequences.sql).
--
-- sequence_key: jobs of one queue (and tenant) with one key run one at a time, in id
-- order. Only a sequence's head is queued, running or waiting; the jobs behind it are
-- pending (held) until the head ends. debounce_key: enqueues of one key within a window
-- fold into one job (enqueue_job's debounce and debounce_edge, which are not stored).
alter table pgrun.jobs add column sequence_key text, add column debounce_key text;

-- sequence_on_failure: what a job of a sequence that fails for good does to the jobs
-- behind it: 'hold' them (until it is retried, cancelled or deleted) or 'continue'.
alter table pgrun.queues add column sequence_on_failure text not null default 'hold'
  check (sequence_on_failure in ('hold', 'continue'));

-- At most one head per sequence, whatever the isolation level of the writers: the
-- index is the engine's last word on "never two jobs of one sequence at once". Partial,
-- so jobs without a key pay nothing (not even an index entry).
create unique index jobs_sequence_head_idx on pgrun.jobs (queue, sequence_key, tenant) nulls not distinct
  where sequence_key is not null and status in ('queued', 'running', 'waiting');
-- The held jobs of a sequence, in id order: the next to promote is the first.
create index jobs_sequence_held_idx on pgrun.jobs (queue, sequence_key, id)
  where sequence_key is not null and status = 'pending';
-- The latest job of a debounce key (the fold candidate, or the leading edge's window).
create index jobs_debounce_idx on pgrun.jobs (queue, debounce_key, id)
  where debounce_key is not null;

-- sequence_holds records a head that failed for good in a queue whose
-- sequence_on_failure is 'hold': its sequence stays held while that job is still
-- failed (a hold whose job was retried, cancelled or deleted no longer counts, and is
-- cleared when its sequence next moves). One per sequence.
create table pgrun.sequence_holds (
  job_id        bigint primary key,
  queue         text not null,
  sequence_key  text not null,
  tenant        text,
  held_at       timestamptz not null default now()
);
create unique index sequence_holds_key_idx on pgrun.sequence_holds (queue, sequence_key, tenant) nulls not distinct;

-- sequence_rechecks lists sequences a REPEATABLE READ or SERIALIZABLE transaction
-- moved: such a transaction cannot see what committed after it began, so it never
-- makes a head on its own say; maintain() (step recheck_sequences) settles each one
-- in a READ COMMITTED transaction of its own.
create table pgrun.sequence_rechecks (
  queue         text not null,
  sequence_key  text not null,
  tenant        text,
  at            timestamptz not null default now()
);
create unique index sequence_rechecks_key_idx on pgrun.sequence_rechecks (queue, sequence_key, tenant) nulls not distinct;

insert into pgrun.maintenance_steps (step, every) values ('recheck_sequences', interval '0')
on conflict (step) do nothing;

-- job_spec gains the new fields, appended (row(...)::pgrun.job_spec is positional).
alter type pgrun.job_spec
  add attribute sequence_key text,
  add attribute debounce_key text,
  add attribute debounce interval,
  add attribute debounce_edge text;

-- enqueued follows pgrun.jobs (0014's rule: new columns before deduplicated), and says
-- whether a debounced spec folded into an existing job.
alter type pgrun.enqueued
  drop attribute deduplicated,
  add attribute sequence_key text,
  add attribute debounce_key text,
  add attribute deduplicated boolean,
  add attribute folded boolean;
