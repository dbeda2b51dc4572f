-- 01_common.sql: the clock seam, input checks, backoff and the event writer shared by
-- every other file. Files are applied in the order of their names: 00-09 the
-- foundation (the API version, these helpers, the retired signatures), then one band
-- of ten per concern, 80 the views and 90 the grants. A language sql function's body
-- is checked when it is created, so what it calls must sit in an earlier file; a
-- PL/pgSQL body is resolved when it first runs, and may call any file's functions.

-- clock is the engine's notion of "now": the transaction's now(). Test databases may
-- pin it with SET pgrun.now = '2030-01-01 00:00Z' (schedules, backoff, leases and
-- timeouts are then tested at explicit instants instead of with sleeps), but only
-- where an administrator has enabled the seam with a row the callers cannot write:
--   INSERT INTO pgrun.settings (name, value) VALUES ('test_clock', 'true');
-- Elsewhere the session setting is ignored, so no caller can claim jobs due in a
-- month, take leases that never expire or make maintain() reap healthy leases.
-- It is PL/pgSQL, not SQL: a SQL function with SET is never inlined, and each query
-- that calls it parses and plans its body again (about 80 us, in every claim and
-- report), then runs it at about 5 us a row; PL/pgSQL plans once per session and
-- runs at about 2 us. Statements that stamp many rows still take the time once into a
-- variable (complete_jobs, renew_leases).
create or replace function pgrun.clock()
returns timestamptz
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  if coalesce(current_setting('pgrun.now', true), '') = '' then
    return now();
  end if;
  if exists (select 1 from pgrun.settings s where s.name = 'test_clock' and s.value = 'true') then
    return current_setting('pgrun.now', true)::timestamptz;
  end if;
  return now();
end;
$$;

-- The shared rules, each written once. They are bodies bound when created (RETURN,
-- no SET clause: there is nothing to look up at call time), so PostgreSQL inlines
-- them into the query that calls them and plans it exactly as if the rule were
-- written out there. The Go package mirrors them (rules.go), checked by
-- tests/shared_rules_test.go. Where a partial index's predicate spells a rule out,
-- the queries that must match that index spell it out the same way, and say so.

-- active_statuses are the states of a job that is not finished: it holds its unique
-- key, and cancelling it or its parent still means something.
create or replace function pgrun.active_statuses()
returns pgrun.job_status[]
language sql
immutable
parallel safe
return array['pending', 'queued', 'running', 'waiting']::pgrun.job_status[];

-- outcome_error is a job's error as the outcome of its status: the row's error,
-- except for a job that succeeded or was skipped, whose row may keep the error of an
-- earlier failed attempt (the retries' errors are in job_events). What a reader shows
-- or filters as "the job's error" (job_timeline, the dashboard) is this. A plain
-- expression, inlined where it is used.
create or replace function pgrun.outcome_error(status pgrun.job_status, error jsonb)
returns jsonb
language sql
immutable
parallel safe
return case when status in ('succeeded', 'skipped') then null else error end;

-- is_active reports whether status is one of active_statuses().
create or replace function pgrun.is_active(status pgrun.job_status)
returns boolean
language sql
immutable
parallel safe
return status = any (pgrun.active_statuses());

-- valid_queue_name is the queue-name format: 1 to 63 characters from a-z, 0-9, _, -
-- and . starting with a letter. (The pattern has no bounded repeat, {0,62}: the
-- length is checked apart, since a bounded repeat makes the regex engine several
-- times slower.)
create or replace function pgrun.valid_queue_name(q text)
returns boolean
language sql
immutable
parallel safe
return q ~ '^[a-z][a-z0-9_.-]*$' and octet_length(q) <= 63;

-- min_priority and max_priority bound a job's priority: 0, the default and most
-- urgent, up to 32767 (the column is a smallint); lower runs first.
create or replace function pgrun.min_priority()
returns integer
language sql
immutable
parallel safe
return 0;

create or replace function pgrun.max_priority()
returns integer
language sql
immutable
parallel safe
return 32767;

-- default_lease is the lease of a claim whose caller and queue name none: long enough
-- to survive a GC pause and a slow network, short enough that a dead worker's jobs
-- come back within a minute.
create or replace function pgrun.default_lease()
returns interval
language sql
immutable
parallel safe
return interval '30 seconds';

-- worker_silence is how long a worker may go unheard before it counts as gone: three
-- of its heartbeat cadences (worker_alive below; flag_dead_workers).
create or replace function pgrun.worker_silence(cadence interval)
returns interval
language sql
immutable
parallel safe
return 3 * cadence;

-- check_queue_name raises 22023 unless q is a valid queue name; returns q.
create or replace function pgrun.check_queue_name(q text)
returns text
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if q is null or not pgrun.valid_queue_name(q) then
    raise exception 'queue name % is not valid', coalesce(quote_literal(q), 'NULL')
      using errcode = '22023',
            hint = 'Use 1 to 63 characters from a-z, 0-9, _, - and . starting with a letter.';
  end if;
  return q;
end;
$$;

-- check_kind raises 22023 unless k is a valid job kind; returns k.
create or replace function pgrun.check_kind(k text)
returns text
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if k is null or k !~ '^[A-Za-z][A-Za-z0-9_.:/-]{0,127}$' then
    raise exception 'job kind % is not valid', coalesce(quote_literal(k), 'NULL')
      using errcode = '22023',
            hint = 'Use 1 to 128 characters from letters, digits, _ . : / - starting with a letter.';
  end if;
  return k;
end;
$$;

-- check_positive_interval raises 22023 unless d is NULL or a positive interval.
create or replace function pgrun.check_positive_interval(what text, d interval)
returns interval
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if d is not null and d <= interval '0' then
    raise exception '% % is not positive', what, d
      using errcode = '22023',
            hint = format('Pass a positive interval such as ''30 seconds'', or NULL for the default %s.', what);
  end if;
  return d;
end;
$$;

-- backoff is the delay before retry number failures (1 = first retry): exponential from
-- base, capped at cap, with "equal jitter" (uniform in [d/2, d]) so that a burst of
-- failures does not come back as a burst.
create or replace function pgrun.backoff(
  failures integer,
  base interval default interval '1 second',
  cap interval default interval '1 hour'
)
returns interval
language sql
volatile
set search_path = pgrun, pg_catalog
as $$
  select d / 2 + d / 2 * random()
  from (select least(cap, base * power(2, least(greatest(failures, 1) - 1, 30))) as d) s
$$;

-- job_not_found raises P0002 naming the id. Functions that take a job id from an
-- operator call it when the id does not exist at all.
create or replace function pgrun.job_not_found(job_id bigint)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  raise exception 'job % does not exist', coalesce(job_id::text, 'NULL')
    using errcode = 'P0002',
          hint = 'Check the id with: SELECT id, kind, status FROM pgrun.jobs ORDER BY id DESC LIMIT 20;';
end;
$$;

-- add_event appends one row to the audit log and returns its id.
create or replace function pgrun.add_event(
  job_id bigint,
  event text,
  level text default 'info',
  message text default null,
  fields jsonb default '{}'
)
returns bigint
language sql
set search_path = pgrun, pg_catalog
as $$
  insert into pgrun.job_events (job_id, at, event, level, message, fields)
  values (job_id, pgrun.clock(), event, level, message, coalesce(fields, '{}'))
  returning id
$$;

-- Limits. Every input has a documented bound (docs/sql-api.md, "Limits"), so that
-- hostile but well-formed input is refused at once with an error naming the limit,
-- instead of running until statement_timeout.
--   max_json_bytes     args, meta, result, run input, submitted input, event fields,
--                      a workflow spec: 1 MiB each (pg_column_size of the value)
--   max_key_bytes      unique_key and concurrency_key: 512 bytes (they are indexed;
--                      PostgreSQL cannot index a btree entry over ~2.7 KB)
--   max_children       children of one defer_job, elements of one map node: 100,000
-- max_json_bytes and max_key_bytes are bodies bound when created, without a SET clause
-- (a constant has nothing to look up): PostgreSQL inlines them, so the enqueue rules
-- (job_spec_fault), planned for every insert into pgrun.jobs by the trigger's WHEN
-- clause, fold them to constants instead of running two SQL functions each.
create or replace function pgrun.max_json_bytes()
returns integer
language sql
immutable
parallel safe
return 1048576;

create or replace function pgrun.max_children()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 100000 $$;

create or replace function pgrun.max_key_bytes()
returns integer
language sql
immutable
parallel safe
return 512;

-- default_timeout is the wall-clock backstop of a job whose enqueue and queue name
-- none: an hour. A job that keeps renewing its lease would otherwise run forever.
-- Enqueue with timeout 0 (or set the queue's default_timeout to 0) for no timeout.
create or replace function pgrun.default_timeout()
returns interval
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select interval '1 hour' $$;

-- check_json_size raises 22023 naming what and the limit unless v is NULL or at most
-- max_json_bytes() bytes; returns v.
create or replace function pgrun.check_json_size(what text, v jsonb)
returns jsonb
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if v is not null and pg_column_size(v) > pgrun.max_json_bytes() then
    raise exception '% is % bytes, over the limit of % bytes', what, pg_column_size(v), pgrun.max_json_bytes()
      using errcode = '22023',
            hint = 'Keep payloads small: store large data in a table or object store and pass its key.';
  end if;
  return v;
end;
$$;

-- check_key raises 22023 naming what and the limit unless k is NULL or a non-empty
-- key of at most max_key_bytes() bytes; returns k.
create or replace function pgrun.check_key(what text, k text)
returns text
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if k = '' then
    raise exception '% must not be empty', what
      using errcode = '22023', hint = format('Pass NULL for no %s, or a non-empty key.', what);
  end if;
  if octet_length(k) > pgrun.max_key_bytes() then
    raise exception '% is % bytes, over the limit of % bytes', what, octet_length(k), pgrun.max_key_bytes()
      using errcode = '22023',
            hint = 'Use a short key; for a long natural key pass a digest such as md5(...).';
  end if;
  return k;
end;
$$;

-- check_worker_id raises 22023 unless w is a worker id of 1 to 200 characters;
-- returns w. Worker ids are written on every claimed job (claimed_by).
create or replace function pgrun.check_worker_id(w text)
returns text
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if w is null or w = '' or length(w) > 200 then
    raise exception 'worker id % is not valid', coalesce(quote_literal(left(w, 40) || case when length(w) > 40 then '...' else '' end), 'NULL')
      using errcode = '22023', hint = 'Pass a stable id of 1 to 200 characters such as host:pid.';
  end if;
  return w;
end;
$$;

-- worker_alive is the one rule for a live worker: not stopped, not flagged dead, and
-- heard from within worker_silence (three of its heartbeat cadences) as of at.
create or replace function pgrun.worker_alive(w pgrun.workers, at timestamptz)
returns boolean
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select w.state <> 'stopped' and w.flagged_dead_at is null and w.last_seen > at - pgrun.worker_silence(w.cadence)
$$;

-- is_engine reports whether the current role may write engine-owned columns: the
-- owner of pgrun.jobs (the engine's own functions run as it) or a member of it.
-- Callers with pgrun_enqueuer insert only their own fields.
create or replace function pgrun.is_engine()
returns boolean
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  -- PL/pgSQL: its plan is cached (a SQL function with SET is planned on every call).
  return pg_has_role(current_user, (select c.relowner from pg_class c where c.oid = 'pgrun.jobs'::regclass), 'MEMBER');
end;
$$;

-- session_is_engine reports whether the session's login role is the owner of the
-- engine (or a member of it, or a superuser): psql as the owner, the tests, the
-- engine's own maintenance. Such a session may act under any worker id. The login
-- role, not current_user: inside the engine's SECURITY DEFINER functions current_user
-- is the engine itself.
create or replace function pgrun.session_is_engine()
returns boolean
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  return exists (select 1 from pg_class c where c.oid = 'pgrun.jobs'::regclass
                 and pg_has_role(session_user, c.relowner, 'MEMBER'));
end;
$$;

-- check_worker_login raises 42501 unless the session may act under worker id worker:
-- the id was registered (worker_heartbeat) by the session's login role (session_user,
-- which no SET ROLE or session setting changes), or the session is the engine's
-- (session_is_engine). A NULL worker is the engine's alone. Every call that acts
-- under a worker id or on a claimed job checks it first (claim, report, renew,
-- heartbeat, release, beat, progress, events), so one worker login cannot act for
-- another: the login role is the trust boundary (docs/security.md). A row registered
-- before ids were bound (migration 0020) has no login_role and is adopted by the
-- first login that uses it. registering (worker_heartbeat) lets an id that is not
-- registered yet through. Costs one primary-key read of pgrun.workers.
create or replace function pgrun.check_worker_login(worker text, registering boolean default false)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  if worker is not null then
    perform 1 from pgrun.workers w where w.id = worker and w.login_role = session_user;
    if found then
      return;
    end if;
  end if;
  if pgrun.session_is_engine() then
    return;
  end if;
  if worker is null then
    raise exception 'a call on a claimed job must name the worker that holds the claim'
      using errcode = '42501', hint = 'Pass worker => the id you registered with worker_heartbeat and claimed with.';
  end if;
  update pgrun.workers w set login_role = session_user where w.id = worker and w.login_role is null;
  if found then
    return;
  end if;
  if not exists (select 1 from pgrun.workers w where w.id = worker) then
    if registering then
      return; -- worker_heartbeat registers it, for this login
    end if;
    raise exception 'worker % is not registered', quote_literal(worker)
      using errcode = '42501',
            hint = 'Register it first, as this login: SELECT pgrun.worker_heartbeat(worker, host, pid, queues); the id is then bound to this login role.';
  end if;
  raise exception 'worker % is registered by another login role than %', quote_literal(worker), quote_ident(session_user)
    using errcode = '42501',
          hint = 'A worker id belongs to the login role that registered it: log in as that role, or register an id of your own.';
end;
$$;

-- check_claim raises 42501 unless the session may act on a claimed job as worker:
-- check_worker_login(worker), and, for any session but the engine's, a claim token
-- (has_token) that the call then matches. The per-job calls of a handler (beat,
-- set_progress, emit) take both, so that neither another login nor a stale handler
-- of an earlier claim reaches the job.
create or replace function pgrun.check_claim(worker text, has_token boolean)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.check_worker_login(worker);
  if (worker is null or not has_token) and not pgrun.session_is_engine() then
    raise exception 'a call on a claimed job must present the worker and the claim token'
      using errcode = '42501', hint = 'Pass worker => your worker id and claim_id => the claim_id the claim returned.';
  end if;
end;
$$;

-- ensure_ddl runs ddl, one of the function set's own CREATE OR REPLACE TRIGGER or
-- CREATE VIEW statements (never a caller's text: only the schema owner may execute
-- it), unless the object already exists as that very statement made it. The md5 of the
-- statement is kept as the object's comment. Re-creating a trigger locks pgrun.jobs
-- against every writer (SHARE ROW EXCLUSIVE) and waits behind any transaction that
-- wrote to it, and re-creating a view locks out its readers: a re-apply of an
-- unchanged function set must take neither lock, so that it never stalls claims
-- behind a long transaction. kind is 'trigger' (on_table names its table) or 'view';
-- a changed view is dropped first, since CREATE OR REPLACE VIEW cannot drop or
-- reorder columns. Returns whether it ran ddl.
create or replace function pgrun.ensure_ddl(kind text, name text, on_table regclass, ddl text)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_sum  text := 'pgrun:' || md5(ddl);
  v_same boolean;
begin
  if kind = 'trigger' then
    select obj_description(t.oid, 'pg_trigger') = v_sum into v_same
    from pg_trigger t where t.tgrelid = on_table and t.tgname = name;
  elsif kind = 'view' then
    select obj_description(c.oid, 'pg_class') = v_sum into v_same
    from pg_class c where c.oid = to_regclass('pgrun.' || quote_ident(name)) and c.relkind = 'v';
  else
    raise exception 'ensure_ddl: kind % is not valid', quote_literal(kind)
      using errcode = '22023', hint = 'Use trigger or view.';
  end if;
  if coalesce(v_same, false) then
    return false;
  end if;
  if kind = 'view' then
    execute format('drop view if exists pgrun.%I', name);
  end if;
  execute ddl;
  if kind = 'trigger' then
    execute format('comment on trigger %I on %s is %L', name, on_table, v_sum);
  else
    execute format('comment on view pgrun.%I is %L', name, v_sum);
  end if;
  return true;
end;
$$;
