-- 72_bounds.sql: the documented bound of every input of the SQL API. input_bounds()
-- is the table docs/sql-api.md prints ("Limits"); tests/invariant_bounds_test.go holds
-- the two together and probes the bounds at their edges. After every file whose
-- helpers it reads (a SQL body is checked when it is created).

-- input_bounds lists the bound of every input of the SQL API: what the input is, its
-- bound, and the calls that enforce it (each refuses a value out of bounds with 22023,
-- a message naming the value and a HINT, before writing anything). The bounds come
-- from the helpers that enforce them, so the table cannot drift from the code.
create or replace function pgrun.input_bounds()
returns table (input text, bound text, enforced_by text)
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  values
    ('worker id', '1 to 200 characters',
     'claim_jobs, claim_job, renew_leases, every report, beat, set_progress, emit, worker_heartbeat, release_unheld, queue_peers, bind_worker_session'),
    ('host', '1 to 255 characters', 'worker_heartbeat'),
    ('worker lists', '1000 queues, 1000 models, 1000 servable models, 10000 kinds', 'worker_heartbeat'),
    ('cadence', format('above 0, at most %s minutes', extract(epoch from pgrun.max_cadence())::integer / 60), 'worker_heartbeat'),
    ('job kind', '1 to 128 characters: letters, digits, _ . : / -, starting with a letter',
     'enqueue_job, enqueue_jobs, enqueue_specs, enqueue_columns, INSERT'),
    ('queue name', '1 to 63 characters: a-z, 0-9, _ - ., starting with a letter', 'every call that takes a queue'),
    ('args, meta', format('a JSON object of at most %s bytes', pgrun.max_json_bytes()),
     'enqueue functions, INSERT, replace_queued'),
    ('result, event fields, error', format('at most %s bytes (an error over it is stored cut down)', pgrun.max_json_bytes()),
     'complete_jobs, emit, fail_job'),
    ('unique_key, concurrency_key', format('non-empty, at most %s bytes', pgrun.max_key_bytes()),
     'enqueue functions, INSERT, replace_queued, start_run'),
    ('priority', format('%s to %s', pgrun.min_priority(), pgrun.max_priority()), 'enqueue functions, INSERT, replace_queued'),
    ('max_attempts', 'at least 1', 'enqueue functions, INSERT, set_queue'),
    ('run_at', 'a finite time', 'enqueue functions, INSERT, replace_queued'),
    ('timeout', format('0 (none), or above 0 and at most %s', pgrun.max_wait()),
     'enqueue functions, INSERT, set_queue (default_timeout)'),
    ('unique_window', format('above 0, at most %s', pgrun.max_wait()), 'enqueue functions'),
    ('sequence_key', format('non-empty, at most %s characters', pgrun.max_flow_key_chars()), 'enqueue functions, INSERT'),
    ('debounce_key', format('non-empty, at most %s characters; only with debounce', pgrun.max_flow_key_chars()),
     'enqueue functions (INSERT refuses it: it cannot debounce)'),
    ('debounce', format('%s ms to %s; only with debounce_key, never with run_at',
                        (extract(epoch from pgrun.min_debounce()) * 1000)::integer, pgrun.max_wait()),
     'enqueue functions'),
    ('debounce_edge', 'trailing (the default) or leading; only with debounce', 'enqueue functions'),
    ('sequences listed', '1 to 1000 a call', 'sequences'),
    ('retry delay', format('0 to %s', pgrun.max_wait()), 'retry_later'),
    ('backoff_base, backoff_max', format('above 0, at most %s; backoff_base at most backoff_max', pgrun.max_wait()),
     'set_queue'),
    ('rate_period', format('above 0, at most %s', pgrun.max_wait()), 'set_queue'),
    ('lease', format('above 0, at most %s', pgrun.max_lease()), 'claim_jobs, claim_job, renew_leases'),
    ('default_lease', format('15 seconds to %s', pgrun.max_lease()), 'set_queue'),
    ('warm_wait', format('above 0, at most %s', pgrun.max_lease()), 'set_queue'),
    ('fair_by, sequence_on_failure', 'concurrency_key or tenant; hold or continue', 'set_queue'),
    ('key_rate_limit', '1 to 1000000 claims per key and key_rate_period', 'set_queue'),
    ('key_rate_period', format('above 0, at most %s', pgrun.max_wait()), 'set_queue'),
    ('priority_aging', format('1 second to %s', pgrun.max_wait()), 'set_queue'),
    ('retention', format('above 0, at most %s', pgrun.max_retention()), 'set_queue, forget_workers'),
    ('claim size', '1 to 10000 jobs', 'claim_jobs'),
    ('report batch', '10000 jobs', 'complete_jobs, beat'),
    ('children', format('%s per defer_job or map node', pgrun.max_children()), 'defer_job, workflow map nodes'),
    ('held claims', '1000000', 'release_unheld'),
    ('audit event name', '1 to 128 characters: letters, digits, _ . : -, starting with a letter', 'emit'),
    ('progress', '0 or more', 'set_progress, emit'),
    ('workflow nodes', '1000 per workflow', 'define_workflow'),
    ('workflow node fields', format('kind, queue as for jobs; timeout 0 to %s; max_attempts at least 1; priority %s to %s; '
                                    'optional, input true or false; failure_ratio 0 to 1; model a non-empty string',
                                    pgrun.max_wait(), pgrun.min_priority(), pgrun.max_priority()),
     'define_workflow'),
    ('run unique_key', format('non-empty, at most %s bytes', pgrun.max_key_bytes()), 'start_run'),
    ('run input, submitted input', format('at most %s bytes', pgrun.max_json_bytes()), 'start_run, submit_input'),
    ('a node''s resolved args', format('at most %s bytes; over it the node fails with class bad_args', pgrun.max_json_bytes()),
     'the dispatch of a DAG node'),
    ('a run''s output', format('at most %s bytes; over it the output is {"truncated": true}', pgrun.max_json_bytes()),
     'the end of a run'),
    ('cancel reason', '2000 bytes', 'cancel_run'),
    ('bulk filter', 'a JSON object of at most 8192 bytes; text keys 1 to 200 characters (queue 63, kind 128)',
     'job_matches, jobs_matching, retry_matching, cancel_matching, delete_matching'),
    ('bulk batch', format('1 to %s jobs a call', pgrun.max_bulk_batch()),
     'jobs_matching, retry_matching, cancel_matching, delete_matching'),
    ('step name', format('1 to 200 characters; at most %s steps a job', pgrun.max_steps()),
     'step_get, step_put, sleep_job, await_event, spawn_job, await_job'),
    ('step result, event payload', format('at most %s bytes', pgrun.max_json_bytes()), 'step_put, emit_event'),
    ('durable event name', '1 to 200 characters', 'emit_event, await_event'),
    ('sleep, await timeout', format('a sleep ends at most %s ahead; an await waits above 0, at most %s', pgrun.max_wait(), pgrun.max_wait()),
     'sleep_job, await_event, await_job'),
    ('cron expression', format('%s characters, %s parts per field', pgrun.max_cron_chars(), pgrun.max_cron_parts()),
     'set_schedule'),
    ('rollup span', format('above 0, at most %s', pgrun.rollup_retention()), 'job_series, error_groups, typical_run_times'),
    ('series bucket', format('whole minutes from 1 minute to 1 day; at most %s buckets in the span', pgrun.max_series_buckets()),
     'job_series'),
    ('series group_by', 'NULL, queue, kind or all', 'job_series'),
    ('error groups', format('1 to %s groups', pgrun.max_error_groups()), 'error_groups'),
    ('rollup time', 'a finite time', 'rollup_minutes'),
    ('quantile', '0 to 1', 'hist_quantile')
$$;
