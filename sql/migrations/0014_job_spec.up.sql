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
-- reads into a pgrun.jobs variable as it is.
--
-- Its attributes are pgrun.jobs' columns as this migration finds them (names and
-- types from the catalog, never from a caller), so whatever earlier migrations added
-- is there. A later migration that adds a column to pgrun.jobs adds it here before
-- deduplicated, in one statement:
--   alter type pgrun.enqueued drop attribute deduplicated, add attribute <column> <type>,
--     add attribute deduplicated boolean;
-- (tests/invariant_enqueue_paths_test.go checks that the two agree).
do $$
begin
  execute (
    select format('create type pgrun.enqueued as (%s, deduplicated boolean)',
                  string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' order by a.attnum))
    from pg_attribute a
    where a.attrelid = 'pgrun.jobs'::regclass and a.attnum > 0 and not a.attisdropped);
end;
$$;
