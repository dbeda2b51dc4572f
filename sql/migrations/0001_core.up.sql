-- 0001_core: the tables of the core engine. Functions, triggers and views live in
-- sql/functions/ and are re-applied by pgrun.Migrate after the migrations.

create schema pgrun;

create type pgrun.job_status as enum (
  'pending',    -- waiting for DAG dependencies (or an input)
  'queued',     -- claimable once run_at has passed
  'running',    -- claimed by a worker under a lease
  'waiting',    -- parked: waiting for children or an input
  'succeeded',
  'failed',
  'cancelled',
  'skipped'
);

-- queues holds per-queue policy. A row is created the first time a queue is used.
create table pgrun.queues (
  name        text primary key,
  paused      boolean not null default false,
  created_at  timestamptz not null default now(),
  updated_at  timestamptz not null default now()
);

create table pgrun.jobs (
  id                bigint generated always as identity primary key,
  kind              text not null,
  queue             text not null default 'default',
  args              jsonb not null default '{}',
  status            pgrun.job_status not null default 'queued',
  -- priority: lower runs first; 0 is the default and the most urgent.
  priority          smallint not null default 0,
  run_at            timestamptz not null default now(),
  -- attempt counts claims; it is also the claim token every transition checks.
  attempt           integer not null default 0,
  -- failures counts failed attempts; max_attempts bounds it. retry_later and
  -- shutdown requeues do not add to it.
  failures          integer not null default 0,
  max_attempts      integer not null default 25,
  -- lease_expiries counts leases that ran out; maintain() fails the job past its budget.
  lease_expiries    integer not null default 0,
  claimed_by        text,
  lease_expires_at  timestamptz,
  heartbeat_at      timestamptz,
  timeout           interval,
  created_at        timestamptz not null default now(),
  started_at        timestamptz,
  finished_at       timestamptz,
  result            jsonb,
  error             jsonb,
  progress_current  bigint not null default 0,
  progress_total    bigint,
  parent_id         bigint,
  run_id            bigint,
  node              text,
  deps_remaining    integer not null default 0,
  model             text,
  unique_key        text,
  meta              jsonb not null default '{}'
);

-- The claim reads only queued rows in (priority, run_at, id) order, so history never
-- slows it down.
create index jobs_claim_idx on pgrun.jobs (queue, priority, run_at, id)
  where status = 'queued';
-- The reaper reads only running rows. (Lease renewal goes by primary key; a
-- per-worker index would cost every claim a write for no reader on the hot path.)
create index jobs_running_lease_idx on pgrun.jobs (lease_expires_at)
  where status = 'running';
-- One active job per unique_key; finished jobs free the key.
create unique index jobs_unique_key_active_idx on pgrun.jobs (unique_key)
  where unique_key is not null and status in ('pending', 'queued', 'running', 'waiting');
create index jobs_parent_idx on pgrun.jobs (parent_id) where parent_id is not null;
create index jobs_run_idx on pgrun.jobs (run_id) where run_id is not null;
-- Throughput figures and retention read finished rows by time.
create index jobs_finished_idx on pgrun.jobs (finished_at) where finished_at is not null;

-- job_events is the audit log: what a person will want to read later (failures,
-- retries, requeues, lease expiry, cancels) and what handlers emit. Routine
-- transitions live as timestamps on the job row.
create table pgrun.job_events (
  id       bigint generated always as identity primary key,
  job_id   bigint not null,
  at       timestamptz not null default now(),
  event    text not null,
  level    text not null default 'info' check (level in ('debug', 'info', 'warn', 'error')),
  message  text,
  fields   jsonb not null default '{}'
);
create index job_events_job_idx on pgrun.job_events (job_id, id);

-- workers is the registry runners heartbeat into.
create table pgrun.workers (
  id          text primary key,
  host        text not null,
  pid         integer not null,
  queues      text[] not null default '{}',
  models      text[] not null default '{}',
  state       text not null default 'running',
  version     text,
  started_at  timestamptz not null default now(),
  last_seen   timestamptz not null default now()
);

-- function_ledger records the checksum of the sql/functions/ set last applied, so a
-- second Migrate with the same files changes nothing.
create table pgrun.function_ledger (
  checksum    text primary key,
  applied_at  timestamptz not null default now()
);

-- queue_stats counts parked (pending, waiting) jobs by queue without a full scan.
create index jobs_parked_idx on pgrun.jobs (queue) where status in ('pending', 'waiting');
