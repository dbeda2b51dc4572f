-- 0022_rollups: per-minute rollups of finished jobs, for the dashboard's time-range
-- charts and its errors page (sql/functions/74_rollups.sql). Reading pgrun.jobs for a
-- 7-day chart means reading every job of those 7 days; a rollup row holds a minute
-- of one queue and kind, so the same chart reads some thousands of small rows.
-- maintain()'s step rollup_minutes writes them a few seconds after each minute
-- closes and deletes them after rollup_retention() (8 days).

-- job_minutes counts the jobs of a queue and kind that finished in a minute (by
-- finished_at, truncated to the minute), by status, with log-scale histograms of
-- their wait (run_at to started_at, clamped at 0) and run (started_at to
-- finished_at) times: element i counts the times in [2^(i-1), 2^i) ms, element 1 also
-- [0, 1) ms (hist_bucket). Histograms add up element by element, so the percentiles
-- of any span, queue or kind merge exactly to the bucket. Trailing empty buckets are
-- left off ('{}': no job of the row started).
create table pgrun.job_minutes (
  minute     timestamptz not null,
  queue      text not null,
  kind       text not null,
  succeeded  integer not null default 0,
  failed     integer not null default 0,
  cancelled  integer not null default 0,
  wait_hist  integer[] not null default '{}',
  run_hist   integer[] not null default '{}',
  primary key (minute, queue, kind)
);

-- job_quarters is job_minutes by quarter hour (quarter: its start), written from the
-- minutes once the quarter's last minute is rolled up. A chart of 24 hours in
-- 15-minute buckets or of 7 days in 2-hour buckets reads 15 times fewer rows
-- (job_series): merging histograms costs about 3 us a row.
create table pgrun.job_quarters (
  quarter    timestamptz not null,
  queue      text not null,
  kind       text not null,
  succeeded  integer not null default 0,
  failed     integer not null default 0,
  cancelled  integer not null default 0,
  wait_hist  integer[] not null default '{}',
  run_hist   integer[] not null default '{}',
  primary key (quarter, queue, kind)
);

-- job_minute_totals and job_quarter_totals are job_minutes and job_quarters summed
-- over every queue and kind: a row per minute (quarter hour) with endings, written
-- with them. A chart of everything (job_series grouped by 'all', no queue or kind
-- chosen: the dashboard's overview) reads one row a minute or quarter instead of one
-- per queue and kind: 672 rows for 7 days, not some 23,600 beside 35 queue and kind
-- pairs (docs/benchmarks-log.md, "2026-11-27 — overview at 5M jobs").
create table pgrun.job_minute_totals (
  minute     timestamptz primary key,
  succeeded  integer not null default 0,
  failed     integer not null default 0,
  cancelled  integer not null default 0,
  wait_hist  integer[] not null default '{}',
  run_hist   integer[] not null default '{}'
);

create table pgrun.job_quarter_totals (
  quarter    timestamptz primary key,
  succeeded  integer not null default 0,
  failed     integer not null default 0,
  cancelled  integer not null default 0,
  wait_hist  integer[] not null default '{}',
  run_hist   integer[] not null default '{}'
);

-- error_minutes counts the jobs that ended failed in a minute by queue, kind and
-- error group (pgrun.error_group of the outcome error's message; '' for a failure
-- with no message), with one raw message as a sample (at most 300 characters) and the
-- first and last failure's exact time within the minute.
create table pgrun.error_minutes (
  minute       timestamptz not null,
  queue        text not null,
  kind         text not null,
  error_group  text not null,
  n            integer not null,
  sample       text,
  first_at     timestamptz not null,
  last_at      timestamptz not null,
  primary key (minute, queue, kind, error_group)
);

-- error_quarters is error_minutes by quarter hour, for the errors page over a day
-- or a week (error_groups), written as job_quarters is.
create table pgrun.error_quarters (
  quarter      timestamptz not null,
  queue        text not null,
  kind         text not null,
  error_group  text not null,
  n            integer not null,
  sample       text,
  first_at     timestamptz not null,
  last_at      timestamptz not null,
  primary key (quarter, queue, kind, error_group)
);

-- Failed jobs by the time they failed: rollup_minutes groups a minute's failures by
-- error, and error_groups the minutes not rolled up yet, reading only the failures
-- (the finished index would walk every ending of the span). Partial, so only a job
-- that fails for good writes an entry.
create index jobs_failed_finished_idx on pgrun.jobs (finished_at) where status = 'failed';

-- rollup_watermark is how far rollup_minutes has got: every minute before through
-- is rolled up (NULL until its first run). One row; rollup_minutes locks it, so two
-- calls never roll up the same minutes at once.
create table pgrun.rollup_watermark (
  one      boolean primary key default true check (one),
  through  timestamptz
);
insert into pgrun.rollup_watermark (one, through) values (true, null);

-- Every round: a round with no closed minute to roll up reads one row and returns.
insert into pgrun.maintenance_steps (step, every) values ('rollup_minutes', interval '0')
on conflict (step) do nothing;
