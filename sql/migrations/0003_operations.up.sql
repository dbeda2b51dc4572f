-- 0003_operations: queue policy, concurrency keys, schedules, worker control and
-- health, deduplication windows and retention.

alter table pgrun.queues
  add column max_running integer check (max_running is null or max_running >= 0),
  add column rate_limit integer check (rate_limit is null or rate_limit >= 0),
  add column rate_period interval,
  add column rate_window_start timestamptz,
  add column rate_window_count integer not null default 0,
  add column concurrency_limit integer check (concurrency_limit is null or concurrency_limit >= 1),
  add column default_lease interval,
  add column default_timeout interval,
  add column default_max_attempts integer,
  add column backoff_base interval,
  add column backoff_max interval,
  add column retention interval,
  add column archive boolean not null default false;

alter table pgrun.jobs add column concurrency_key text;
-- claim_jobs counts running jobs per key only for keyed jobs.
create index jobs_running_key_idx on pgrun.jobs (concurrency_key)
  where status = 'running' and concurrency_key is not null;
-- unique_window looks for recently finished holders of a key.
create index jobs_unique_key_recent_idx on pgrun.jobs (unique_key, finished_at)
  where unique_key is not null and finished_at is not null;

-- jobs_archive receives pruned jobs of queues with archive = true: the searchable
-- columns, and the whole row as JSON (so later columns need no archive migration).
create table pgrun.jobs_archive (
  id           bigint primary key,
  queue        text not null,
  kind         text not null,
  status       pgrun.job_status not null,
  finished_at  timestamptz,
  archived_at  timestamptz not null default now(),
  job          jsonb not null
);
create index jobs_archive_queue_idx on pgrun.jobs_archive (queue, finished_at);

create table pgrun.schedules (
  name          text primary key,
  cron          text not null,
  kind          text not null,
  args          jsonb not null default '{}',
  queue         text not null default 'default',
  timezone      text not null default 'UTC',
  enabled       boolean not null default true,
  next_fire_at  timestamptz,
  last_fire_at  timestamptz,
  last_job_id   bigint,
  created_at    timestamptz not null default now(),
  updated_at    timestamptz not null default now()
);
create index schedules_due_idx on pgrun.schedules (next_fire_at) where enabled;

-- worker_control is the operator's switch per (host, queue); queue '*' is every queue.
create table pgrun.worker_control (
  host        text not null,
  queue       text not null,
  mode        text not null check (mode in ('on', 'drain', 'off')),
  updated_at  timestamptz not null default now(),
  primary key (host, queue)
);

alter table pgrun.workers
  add column cadence interval not null default interval '10 seconds',
  add column flagged_dead_at timestamptz;

-- The enqueue trigger fills max_attempts from the queue's default (then 25).
alter table pgrun.jobs alter column max_attempts drop default;
