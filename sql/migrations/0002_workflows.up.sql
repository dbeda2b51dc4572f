-- 0002_workflows: parent/child fan-in, DAG workflows and the outbox.

-- Fan-in state on a parent job: children that failed for good, the first distinct
-- error messages, and the share of failed children at which the parent fails.
alter table pgrun.jobs
  add column children_failed integer not null default 0,
  add column child_errors text[] not null default '{}',
  add column failure_ratio double precision,
  -- dispatched_at marks a finished job whose consequences (parent fan-in, DAG
  -- expansion) were applied, so a retried dispatch never applies them twice.
  add column dispatched_at timestamptz;

-- workflows holds versioned DAG definitions; start_run uses the newest version.
create table pgrun.workflows (
  name        text not null,
  version     integer not null,
  spec        jsonb not null,
  created_at  timestamptz not null default now(),
  primary key (name, version)
);

create type pgrun.run_state as enum ('running', 'succeeded', 'failed', 'cancelled');

create table pgrun.runs (
  id           bigint generated always as identity primary key,
  workflow     text not null,
  version      integer not null,
  input        jsonb not null default '{}',
  status       pgrun.run_state not null default 'running',
  unique_key   text,
  output       jsonb,
  error        jsonb,
  created_at   timestamptz not null default now(),
  finished_at  timestamptz,
  foreign key (workflow, version) references pgrun.workflows (name, version)
);
create unique index runs_unique_key_active_idx on pgrun.runs (unique_key)
  where unique_key is not null and status = 'running';

-- run_inputs holds payloads for input nodes, kept even when they arrive before the
-- node is reached.
create table pgrun.run_inputs (
  run_id        bigint not null references pgrun.runs (id) on delete cascade,
  node          text not null,
  payload       jsonb not null,
  submitted_at  timestamptz not null default now(),
  primary key (run_id, node)
);

-- outbox holds dispatches (fan-in, DAG expansion) whose first try failed; maintain()
-- retries them with backoff and flags them poison after too many attempts.
create table pgrun.outbox (
  id               bigint generated always as identity primary key,
  job_id           bigint not null,
  event            text not null,
  attempts         integer not null default 0,
  next_attempt_at  timestamptz not null default now(),
  last_error       text,
  created_at       timestamptz not null default now(),
  processed_at     timestamptz,
  poisoned_at      timestamptz
);
create index outbox_due_idx on pgrun.outbox (next_attempt_at)
  where processed_at is null and poisoned_at is null;
