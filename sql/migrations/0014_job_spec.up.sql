-- 0014_job_spec: one description of a job, and one shape for what enqueueing it
-- returned (pgrun.enqueue_specs in sql/functions/enqueue_batch.sql).
--
-- job_spec holds every field a caller may set when enqueueing: the job's own columns
-- (kind ... model_required) and the two options that shape deduplication
-- (unique_window, on_conflict). Its attributes are the contract: enqueue_specs takes an
-- array of them, enqueue_jobs' JSON keys are their names (read from the catalog), and
-- the insert trigger checks a plain INSERT against the same rules. The order follows
-- enqueue_job's parameters, since row(...)::pgrun.job_spec is positional; attributes
-- are only ever appended.
create type pgrun.job_spec as (
  kind             text,
  args             jsonb,
  queue            text,
  priority         integer,
  run_at           timestamptz,
  max_attempts     integer,
  unique_key       text,
  parent_id        bigint,
  model            text,
  timeout          interval,
  meta             jsonb,
  concurrency_key  text,
  unique_window    interval,
  on_conflict      text,
  model_required   boolean
);

-- enqueued is one row of enqueue_specs' answer: the job, every column of pgrun.jobs
-- in its order, then whether it was deduplicated (returned in place of a new job
-- because it holds the spec's unique_key). Flat rather than (job pgrun.jobs,
-- deduplicated): a caller selects id, status, deduplicated directly, and expanding a
-- nested row costs microseconds a job; and deduplicated last, so that a row of it
-- reads into a pgrun.jobs variable as it is. A migration that adds a column to
-- pgrun.jobs adds it here before deduplicated, in one statement:
--   alter type pgrun.enqueued drop attribute deduplicated, add attribute <column> <type>,
--     add attribute deduplicated boolean;
-- (tests/invariant_enqueue_paths_test.go checks that the two agree).
create type pgrun.enqueued as (
  id                bigint,
  kind              text,
  queue             text,
  args              jsonb,
  status            pgrun.job_status,
  priority          smallint,
  run_at            timestamptz,
  attempt           integer,
  failures          integer,
  max_attempts      integer,
  lease_expiries    integer,
  claimed_by        text,
  lease_expires_at  timestamptz,
  heartbeat_at      timestamptz,
  timeout           interval,
  created_at        timestamptz,
  started_at        timestamptz,
  finished_at       timestamptz,
  result            jsonb,
  error             jsonb,
  progress_current  bigint,
  progress_total    bigint,
  parent_id         bigint,
  run_id            bigint,
  node              text,
  deps_remaining    integer,
  model             text,
  unique_key        text,
  meta              jsonb,
  children_failed   integer,
  child_errors      text[],
  failure_ratio     double precision,
  dispatched_at     timestamptz,
  concurrency_key   text,
  model_required    boolean,
  tenant            text,
  deadline_at       timestamptz,
  claim_id          uuid,
  lease_length      interval,
  deduplicated      boolean
);
