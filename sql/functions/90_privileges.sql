-- 90_privileges.sql: who may call what. Applied after every other file (its number
-- is the highest). PUBLIC gets nothing in schema pgrun; three roles get what they need:
--   enqueuer  enqueue (functions and a plain INSERT of its own fields), start runs,
--             submit input, read jobs, runs and the views
--   worker    claim, report outcomes, renew leases, heartbeat, progress and events
--   admin     queues, schedules, worker control, cancel, retry, workflows, maintain,
--             the tenant mode, and read everything
-- With the tenant mode on (10_tenants.sql), row-level security limits an enqueuer to its
-- own tenant's rows; its policies are created here, since they name the roles.
-- Functions a role calls that write what the role may not write directly run as
-- the engine (SECURITY DEFINER, search_path pinned with pg_temp last, no SQL built
-- from caller strings); enqueue_job, enqueue_jobs and the insert trigger run as the
-- caller, so the caller's own privileges (and row-level security) apply to them.

-- qualified names function f with its schema and argument types, whatever the
-- search_path (regprocedure's text drops the schema when it is on the path).
create or replace function pgrun.qualified(f oid)
returns text
language sql
stable
-- pg_catalog alone, so that argument types of schema pgrun come out qualified too.
set search_path = pg_catalog
as $$
  select format('%I.%I(%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid))
  from pg_proc p join pg_namespace n on n.oid = p.pronamespace where p.oid = f
$$;

-- definer_functions lists the functions that run as the engine: everything a role is
-- granted except the invoker-rights enqueue path, plus the insert trigger's writer.
create or replace function pgrun.definer_functions()
returns text[]
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select array[
    -- worker
    'claim_jobs', 'renew_leases', 'complete_jobs', 'complete_job', 'fail_job', 'retry_later',
    'requeue_job', 'defer_job', 'set_progress', 'beat', 'emit', 'worker_heartbeat', 'record_hw',
    'release_unheld', 'queue_peers', 'claim_token', 'bind_worker_session', 'handed_jobs',
    -- durable execution (35_durable.sql)
    'step_get', 'step_put', 'recorded_steps', 'sleep_job', 'await_event', 'spawn_job', 'await_job', 'emit_event',
    'watch_job', 'wake_waits',
    -- enqueuer
    'start_run', 'submit_input', 'replace_queued', 'jobs_after_insert', 'job_timeline', 'job_parked', 'caller_tenant',
    -- sequences and debounce (36_sequences.sql, 22_debounce.sql): the insert trigger's
    -- admission, the fold, what holds a sequence, and the recheck step
    'sequence_admit', 'fold_debounced', 'sequence_hold_reason', 'sequences', 'recheck_sequences',
    -- why a job is not claimed (70_stats.sql): it reads the workers
    'job_blocker',
    -- a queue's keys in use and its held sequences (75_queue_view.sql): the rate
    -- windows, and every tenant's keys (refused to a tenant's caller)
    'queue_keys', 'queue_sequences',
    -- admin
    'cancel_job', 'retry_job', 'retry_jobs', 'cancel_run', 'retry_run', 'define_workflow',
    -- bulk actions on what a filter matches (52_bulk.sql)
    'jobs_matching', 'retry_matching', 'cancel_matching', 'delete_matching',
    'pause_queue', 'resume_queue', 'set_queue', 'set_schedule', 'drop_schedule', 'pause_schedule',
    'resume_schedule', 'set_worker_control', 'worker_modes', 'maintain', 'take_maintenance',
    'set_maintenance_step', 'reap_expired_leases', 'fail_overdue', 'flag_dead_workers', 'forget_workers', 'prune_history',
    'drain_outbox', 'fire_schedules', 'dispatch', 'note_server_epoch', 'set_tenant_mode', 'grant_tenant', 'revoke_tenant',
    -- runner liveness by session (12_workers.sql): the maintenance step reads pg_locks
    -- and the workers
    'reap_lost_sessions', 'worker_session_gone',
    -- the queue_stats view's numbers (every tenant's counts, no payload)
    'queue_counts', 'finished_counts',
    -- the database's health (73_health.sql): other sessions' activity, as the engine sees it
    'health',
    -- the rollups (74_rollups.sql): written by maintenance, read as counts of every
    -- tenant's jobs (error_groups, with messages, is the admin's alone)
    'rollup_minutes', 'job_series', 'error_groups', 'typical_run_times']
$$;

do $$
declare
  f text;
begin
  for f in
    select pgrun.qualified(p.oid) from pg_proc p
    where p.pronamespace = 'pgrun'::regnamespace and p.proname = any (pgrun.definer_functions())
  loop
    -- f is a function's name from the catalog (quoted by format's %I), never a
    -- caller's string.
    execute format('alter function %s security definer set search_path = pgrun, pg_catalog, pg_temp', f);
  end loop;
end;
$$;

-- role_grants returns the statements that give the three roles their privileges, in
-- order. Migrate runs them (grant_roles); `runner migrate grants` prints them for a
-- DBA where the migrating role may not grant.
create or replace function pgrun.role_grants(enqueuer name, worker name, admin name)
returns setof text
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  f text;
begin
  return next format('grant usage on schema pgrun to %I, %I, %I', enqueuer, worker, admin);
  return next format('grant select on pgrun.function_ledger, pgrun.settings, pgrun.queues to %I, %I, %I',
                     enqueuer, worker, admin);
  -- Functions the views call (a view checks function privileges as its reader).
  return query select format('grant execute on function %s to %I, %I, %I', pgrun.qualified(p.oid), enqueuer, worker, admin)
               from pg_proc p where p.pronamespace = 'pgrun'::regnamespace
                 and p.proname in ('worker_alive', 'worker_silence', 'queue_counts', 'stats_exact_limit', 'clock',
                                   -- the finished counts of any span (runner status and top)
                                   'finished_counts',
                                   -- and the version of the API and the shared rules
                                   -- (01_common.sql), which every caller may check
                                   'api_version', 'api_compatible_since', 'active_statuses',
                                   'is_active', 'outcome_error', 'valid_queue_name', 'min_priority',
                                   -- the job filter's rule (52_bulk.sql), a plain
                                   -- expression a dashboard's list inlines
                                   'job_matches',
                                   'max_priority', 'default_lease',
                                   -- a queue's rate window (the runner reads it) and
                                   -- whether its room is announced (any UPDATE's trigger)
                                   'rate_period', 'announces_room',
                                   -- a job's claim token, for its holder (active_jobs)
                                   'claim_token',
                                   -- the bounds of every input (docs/sql-api.md)
                                   'input_bounds', 'max_wait', 'max_lease', 'max_cadence',
                                   'max_retention',
                                   -- the rollups' charts and their helpers (74_rollups.sql),
                                   -- counts as queue_stats has them; error_group is the
                                   -- filter's too (job_matches calls it)
                                   'job_series', 'typical_run_times', 'hist_quantile', 'hist_add',
                                   'error_group', 'rollup_retention', 'max_series_buckets');
  -- enqueuer: its own fields of a job, and reading. (tenant: enqueue_jobs names it once
  -- per statement; row-level security holds it to the caller's own, and with the mode
  -- off jobs_after_insert refuses it.)
  return next format('grant insert (kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id, '
                     'model, model_required, timeout, meta, concurrency_key, tenant, sequence_key, debounce_key) '
                     'on pgrun.jobs to %I', enqueuer);
  return next format('grant select on pgrun.jobs, pgrun.job_events, pgrun.runs, pgrun.run_inputs, pgrun.workflows, '
                     'pgrun.schedules, pgrun.queue_stats, pgrun.active_jobs, pgrun.run_status to %I', enqueuer);
  foreach f in array array['enqueue_job', 'enqueue_jobs', 'enqueue_batch', 'enqueue_specs', 'enqueue_columns',
                           'job_spec', 'spec_at', 'job_spec_fault',
                           'check_job_spec', 'job_exists', 'start_run', 'submit_input', 'replace_queued',
                           'job_timeline', 'job_parked', 'job_blocker', 'clock', 'check_kind', 'check_queue_name', 'check_json_size',
                           'check_key', 'check_positive_interval', 'default_timeout', 'max_json_bytes',
                           'max_key_bytes', 'max_children', 'is_engine', 'job_not_found',
                           -- cancels: refused unless the tenant mode is on, then its own tenant's only
                           'cancel_job', 'cancel_run',
                           -- the tenant mode: the insert trigger and the row-level security policies
                           'caller_role', 'tenant_mode', 'sees_all', 'caller_tenant', 'session_tenant',
                           'new_job_tenant', 'may_touch',
                           -- durable execution: an application emits events and waits for jobs
                           'emit_event', 'watch_job',
                           -- sequences and debounce: the enqueue path's parts, and what is held
                           'max_flow_key_chars', 'min_debounce', 'sequence_lock_id', 'sequence_admit',
                           'debounce_lock_id', 'enqueue_debounced', 'fold_debounced',
                           'sequence_hold_reason', 'sequences', 'queue_sequences'] loop
    return query select format('grant execute on function %s to %I', pgrun.qualified(p.oid), enqueuer)
                 from pg_proc p where p.pronamespace = 'pgrun'::regnamespace and p.proname = f;
  end loop;
  -- worker: the calls of a worker's loop, and reading the jobs it runs: every column
  -- but the claim token (docs/security.md), which a worker gets from its own claims
  -- and reads with claim_token, so that no worker login learns another's. The
  -- table-wide grant of earlier versions goes first; revoking it revokes its column
  -- grants too, so the pair is the same on every re-apply.
  return next format('revoke select on pgrun.jobs from %I', worker);
  return next format('grant select (%s) on pgrun.jobs to %I',
                     (select string_agg(quote_ident(a.attname), ', ' order by a.attnum) from pg_attribute a
                      where a.attrelid = 'pgrun.jobs'::regclass and a.attnum > 0 and not a.attisdropped
                        and a.attname <> 'claim_id'),
                     worker);
  foreach f in array array['claim_jobs', 'claim_job', 'renew_leases', 'complete_jobs', 'complete_job', 'fail_job',
                           'retry_later', 'requeue_job', 'defer_job', 'set_progress', 'beat', 'emit',
                           'worker_heartbeat', 'record_hw', 'worker_modes', 'error_class_permanent',
                           'clock', 'release_unheld', 'queue_peers', 'bind_worker_session', 'handed_jobs',
                           -- the worker's own rows in the tenant mode (its row-level security policy)
                           'caller_tenant',
                           -- durable execution (35_durable.sql)
                           'step_get', 'step_put', 'recorded_steps', 'sleep_job', 'await_event', 'spawn_job',
                           'await_job', 'emit_event', 'watch_job'] loop
    return query select format('grant execute on function %s to %I', pgrun.qualified(p.oid), worker)
                 from pg_proc p where p.pronamespace = 'pgrun'::regnamespace and p.proname = f;
  end loop;
  -- admin: operations, and reading everything.
  return next format('grant select on all tables in schema pgrun to %I', admin);
  foreach f in array array['cancel_job', 'retry_job', 'retry_jobs', 'retryable_jobs', 'cancel_run', 'retry_run',
                           -- bulk actions on what a filter matches (52_bulk.sql)
                           'jobs_matching', 'retry_matching', 'cancel_matching', 'delete_matching', 'max_bulk_batch',
                           'define_workflow', 'pause_queue', 'resume_queue', 'set_queue', 'set_schedule',
                           'drop_schedule', 'pause_schedule', 'resume_schedule', 'set_worker_control',
                           'worker_modes', 'maintain', 'take_maintenance', 'set_maintenance_step',
                           'reap_expired_leases',
                           'fail_overdue', 'flag_dead_workers', 'forget_workers', 'prune_history',
                           'drain_outbox', 'fire_schedules', 'job_timeline', 'job_parked', 'job_blocker', 'cron_next', 'clock',
                           'note_server_epoch', 'reap_lost_sessions', 'worker_session_gone',
                           'set_tenant_mode', 'grant_tenant', 'revoke_tenant', 'administers',
                           'caller_role', 'tenant_mode', 'sees_all', 'caller_tenant', 'may_touch',
                           'emit_event', 'watch_job', 'wake_waits',
                           -- the database's health (73_health.sql) and its thresholds
                           'health', 'dead_rows_floor', 'unseen_xid_age',
                           -- sequences (36_sequences.sql): what holds them, and the recheck step
                           'sequence_hold_reason', 'sequences', 'recheck_sequences',
                           -- a queue's keys in use and held sequences (75_queue_view.sql)
                           'queue_keys', 'queue_sequences',
                           -- the rollups (74_rollups.sql): the maintenance step, and the
                           -- failures by group with their messages
                           'rollup_minutes', 'error_groups', 'max_error_groups'] loop
    return query select format('grant execute on function %s to %I', pgrun.qualified(p.oid), admin)
                 from pg_proc p where p.pronamespace = 'pgrun'::regnamespace and p.proname = f;
  end loop;
  -- Row-level security (in force only with the tenant mode on): an enqueuer reads
  -- its tenant's jobs, events, runs and inputs and inserts for its tenant; workers
  -- and administrators read all. A policy is created only where it is missing, so a
  -- re-apply takes no lock on the tables.
  return query
  select format('create policy %I on pgrun.%I as permissive for %s to %I using (%s)%s',
                p.name, p.tbl, p.cmd, p.who, p.qual,
                case when p.cmd = 'all' then format(' with check (%s)', p.qual) else '' end)
  from (values
    (enqueuer || '_own_tenant', 'jobs', 'all', enqueuer, 'tenant = (select pgrun.caller_tenant())'),
    (enqueuer || '_own_tenant', 'job_events', 'select', enqueuer,
     'exists (select 1 from pgrun.jobs j where j.id = job_id)'),
    (enqueuer || '_own_tenant', 'runs', 'select', enqueuer, 'tenant = (select pgrun.caller_tenant())'),
    (enqueuer || '_own_tenant', 'run_inputs', 'select', enqueuer,
     'exists (select 1 from pgrun.runs r where r.id = run_id)'),
    (worker || '_tenant', 'jobs', 'select', worker,
     '(select pgrun.caller_tenant()) is null or tenant = (select pgrun.caller_tenant())'),
    (admin || '_all', 'jobs', 'select', admin, 'true'),
    (admin || '_all', 'job_events', 'select', admin, 'true'),
    (admin || '_all', 'runs', 'select', admin, 'true'),
    (admin || '_all', 'run_inputs', 'select', admin, 'true')
  ) p(name, tbl, cmd, who, qual)
  where not exists (select 1 from pg_policy x
                    where x.polrelid = format('pgrun.%I', p.tbl)::regclass and x.polname = p.name);
  -- A worker read every tenant's jobs before version 5 (policy <worker>_all); a
  -- worker login mapped to a tenant now reads that tenant's only (<worker>_tenant).
  -- Dropped only where it exists: DROP POLICY locks the table even for nothing.
  return query
  select format('drop policy %I on pgrun.jobs', x.polname) from pg_policy x
  where x.polrelid = 'pgrun.jobs'::regclass and x.polname = worker || '_all';
end;
$$;

-- grant_roles runs role_grants(enqueuer, worker, admin). Returns how many statements ran.
create or replace function pgrun.grant_roles(enqueuer name, worker name, admin name)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  stmt text;
  n    integer := 0;
begin
  for stmt in select * from pgrun.role_grants(enqueuer, worker, admin) loop
    execute stmt; -- built by role_grants with %I and catalog names, never from caller text
    n := n + 1;
  end loop;
  return n;
end;
$$;
-- Last, so that it covers every function above too.
revoke all on schema pgrun from public;
revoke execute on all functions in schema pgrun from public;
alter default privileges in schema pgrun revoke execute on functions from public;
