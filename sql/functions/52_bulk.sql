-- 52_bulk.sql: operator actions on every job a filter matches: retry, cancel and
-- delete, each counted first (a dry run) and done in bounded batches. The filter is
-- one jsonb object, and job_matches is its rule: the one statement of which jobs a
-- filter means, shared by the dashboard's list, jobs_matching, the actions here and
-- the CLI, so that an action touches exactly the jobs the list shows.
--
-- A filter's keys (each optional; a key left out, or JSON null, does not filter):
--   queue          text    the job's queue
--   kind           text    the job's kind
--   states         array   the job's status is one of these: ["failed"], ["queued", "running"]
--   error          text    the message of the job's outcome error contains this text,
--                          case-insensitively: pgrun.outcome_error, so the stale error of a
--                          job that failed and then succeeded (or was skipped) never matches
--   error_group    text    the error group (pgrun.error_group, 05_errors.sql) of that same
--                          message is exactly this: one group of the errors page
--   args           object  the job's args contain this object (jsonb @>)
--   arg            text    the job's args have this top-level key
--   arg_value      text    with arg: that key's value, as text, is this
--   created_from, created_to    enqueued at or after, and before (a timestamptz)
--   finished_from, finished_to  finished at or after, and before
--   parent         number  a child of this job
--   run            number  a job of this workflow run: its nodes and their children (map
--                          items, spawned jobs), which carry parent_id but no run_id, as the
--                          dashboard's list of the run shows them. check_job_filter expands it
--                          with run_nodes (the run's node ids), which job_matches reads: call
--                          job_matches with a checked filter
--   id_min, id_max number  ids from, and up to, these (inclusive). The dashboard sets
--                          id_max to the last job its count saw, so that a confirmed action
--                          touches no job that came after the count.
-- check_job_filter holds the bounds of each key.

-- max_bulk_batch is the most jobs one call of jobs_matching, retry_matching,
-- cancel_matching or delete_matching takes: a batch is one short transaction whose
-- row locks a claim never waits for long (docs/benchmarks.md, "Bulk actions").
create or replace function pgrun.max_bulk_batch()
returns integer
language sql
immutable
parallel safe
return 10000;

-- job_matches is the filter rule: whether the job with these columns matches filter
-- (the keys above). It takes the columns, not the row, as rate_period does, and is a
-- plain expression bound when created (no SET clause), so that a statement that
-- calls it inlines it: with the filter a constant, each key's test folds to a plain
-- comparison or drops out, and the planner can bound the scan by id_min and id_max.
-- NULL (a job with no error, filtered on error) counts as no match: use it in WHERE
-- or FILTER, never under NOT. The filter is not checked here (check_job_filter is).
create or replace function pgrun.job_matches(
  filter       jsonb,
  id           bigint,
  queue        text,
  kind         text,
  status       pgrun.job_status,
  args         jsonb,
  error        jsonb,
  created_at   timestamptz,
  finished_at  timestamptz,
  parent_id    bigint,
  run_id       bigint
)
returns boolean
language sql
stable
parallel safe
return (filter ->> 'queue' is null or queue = filter ->> 'queue')
  and (filter ->> 'kind' is null or kind = filter ->> 'kind')
  and (filter -> 'states' is null or filter -> 'states' ? status::text)
  and (filter ->> 'error' is null
       or strpos(lower(pgrun.outcome_error(status, error) ->> 'message'), lower(filter ->> 'error')) > 0)
  and (filter ->> 'error_group' is null
       or pgrun.error_group(pgrun.outcome_error(status, error) ->> 'message') = filter ->> 'error_group')
  and (filter -> 'args' is null or args @> (filter -> 'args'))
  and (filter ->> 'arg' is null or args ? (filter ->> 'arg'))
  and (filter ->> 'arg_value' is null or args ->> (filter ->> 'arg') = filter ->> 'arg_value')
  and (filter ->> 'created_from' is null or created_at >= (filter ->> 'created_from')::timestamptz)
  and (filter ->> 'created_to' is null or created_at < (filter ->> 'created_to')::timestamptz)
  and (filter ->> 'finished_from' is null or finished_at >= (filter ->> 'finished_from')::timestamptz)
  and (filter ->> 'finished_to' is null or finished_at < (filter ->> 'finished_to')::timestamptz)
  and (filter ->> 'parent' is null or parent_id = (filter ->> 'parent')::bigint)
  and (filter ->> 'run' is null or run_id = (filter ->> 'run')::bigint
       or (filter -> 'run_nodes') @> to_jsonb(parent_id))
  and (filter ->> 'id_min' is null or id >= (filter ->> 'id_min')::bigint)
  and (filter ->> 'id_max' is null or id <= (filter ->> 'id_max')::bigint);

-- bad_job_filter raises 22023 saying what is wrong with filter key key, with the
-- filter's documented form as the hint.
create or replace function pgrun.bad_job_filter(key text, what text)
returns void
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  raise exception 'job filter %: %', key, what
    using errcode = '22023',
          hint = 'A filter is a JSON object of at most 8192 bytes with any of: queue, kind (text), states (an array of job '
                 'states), error, error_group (1 to 200 characters), args (an object), arg (a key) and arg_value, created_from, '
                 'created_to, finished_from, finished_to (times), parent, run, id_min, id_max (job ids): '
                 '''{"queue": "emails", "states": ["failed"], "error": "421"}''.';
end;
$$;

-- check_job_filter checks filter against the keys above and returns it without its
-- JSON nulls ('{}' for NULL: every job). Raises 22023 naming the key for an unknown
-- key, a value of the wrong type or out of bounds (text keys 1 to 200 characters,
-- a queue name 1 to 63, a kind 1 to 128; times finite; ids positive), a range whose
-- start is not before its end, or arg_value without arg.
create or replace function pgrun.check_job_filter(filter jsonb)
returns jsonb
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  f     jsonb := jsonb_strip_nulls(coalesce(filter, '{}'));
  k     text;
  v     jsonb;
  t     timestamptz;
  lens  constant jsonb := '{"queue": 63, "kind": 128, "error": 200, "error_group": 200, "arg": 200, "arg_value": 200}';
begin
  if jsonb_typeof(f) <> 'object' then
    perform pgrun.bad_job_filter('', format('%s is not a JSON object', left(f::text, 100)));
  end if;
  f := f - 'run_nodes'; -- this function's own expansion of run (below), made again each time
  if octet_length(f::text) > 8192 then
    perform pgrun.bad_job_filter('', format('it is %s bytes, over 8192', octet_length(f::text)));
  end if;
  for k, v in select * from jsonb_each(f) loop
    case
    when lens ? k then
      if jsonb_typeof(v) <> 'string' or length(v #>> '{}') not between 1 and (lens ->> k)::integer then
        perform pgrun.bad_job_filter(k, format('%s is not a string of 1 to %s characters', left(v::text, 100), lens ->> k));
      end if;
    when k = 'states' then
      if jsonb_typeof(v) <> 'array' or jsonb_array_length(v) = 0
         or exists (select 1 from jsonb_array_elements(v) s
                    where jsonb_typeof(s) <> 'string' or not (s #>> '{}') = any (enum_range(null::pgrun.job_status)::text[])) then
        perform pgrun.bad_job_filter(k, format('%s is not a non-empty array of job states (%s)', left(v::text, 100),
                                               array_to_string(enum_range(null::pgrun.job_status), ', ')));
      end if;
    when k = 'args' then
      if jsonb_typeof(v) <> 'object' then
        perform pgrun.bad_job_filter(k, format('%s is not a JSON object', left(v::text, 100)));
      end if;
    when k in ('created_from', 'created_to', 'finished_from', 'finished_to') then
      begin
        t := case when jsonb_typeof(v) = 'string' then (v #>> '{}')::timestamptz end;
      exception when others then
        t := null;
      end;
      if t is null or not isfinite(t) then
        perform pgrun.bad_job_filter(k, format('%s is not a time such as "2026-11-24T10:00:00Z"', left(v::text, 100)));
      end if;
    when k in ('parent', 'run', 'id_min', 'id_max') then
      if jsonb_typeof(v) <> 'number' or v::numeric <> trunc(v::numeric) or v::numeric not between 1 and 9223372036854775807 then
        perform pgrun.bad_job_filter(k, format('%s is not a job id (a whole number from 1)', left(v::text, 100)));
      end if;
    else
      perform pgrun.bad_job_filter(k, 'no such key');
    end case;
  end loop;
  if f ? 'arg_value' and not f ? 'arg' then
    perform pgrun.bad_job_filter('arg_value', 'it needs arg, the key whose value it is');
  end if;
  foreach k in array array['created', 'finished'] loop
    if (f ->> (k || '_from'))::timestamptz >= (f ->> (k || '_to'))::timestamptz then
      perform pgrun.bad_job_filter(k || '_from', format('%s is not before %s_to %s', f ->> (k || '_from'), k, f ->> (k || '_to')));
    end if;
  end loop;
  if (f ->> 'id_min')::bigint > (f ->> 'id_max')::bigint then
    perform pgrun.bad_job_filter('id_min', format('%s is above id_max %s', f ->> 'id_min', f ->> 'id_max'));
  end if;
  -- A run's jobs are its nodes and their children: the node ids, by the run index
  -- (a run has at most max_workflow_nodes of them), let job_matches take a child by
  -- its parent_id.
  if f ? 'run' then
    f := f || jsonb_build_object('run_nodes', coalesce(
           (select jsonb_agg(n.id order by n.id) from pgrun.jobs n where n.run_id = (f ->> 'run')::bigint), '[]'));
  end if;
  return f;
end;
$$;

-- check_bulk_batch raises 22023 unless after_id is NULL or at least 0 and max_jobs is
-- 1 to max_bulk_batch().
create or replace function pgrun.check_bulk_batch(after_id bigint, max_jobs integer)
returns void
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  if after_id < 0 then
    raise exception 'after_id % is negative', after_id
      using errcode = '22023', hint = 'Pass 0 (or NULL) for the first batch, then the last_id of the batch before.';
  end if;
  if max_jobs is null or max_jobs not between 1 and pgrun.max_bulk_batch() then
    raise exception 'max_jobs % is out of bounds', coalesce(max_jobs::text, 'NULL')
      using errcode = '22023',
            hint = format('Take 1 to %s jobs per call and call again from the last_id returned.', pgrun.max_bulk_batch());
  end if;
end;
$$;

-- jobs_matching lists, in id order, the ids of the jobs that filter matches
-- (job_matches) above after_id (NULL: 0), at most max_jobs (1 to max_bulk_batch()).
-- Page on with after_id => the last id returned; an empty set is the end. Raises 22023
-- for a filter or a batch out of bounds. It takes no locks.
--
-- It reads windows of 50,000 ids, oldest first, until it has max_jobs or passes the
-- newest job (or the filter's id_max): each statement a range scan of the primary key
-- (of the index of failed jobs when the filter's states are ["failed"] alone) whatever
-- the planner guesses of the filter, which it cannot estimate (it once chose to read
-- every failed job and sort them, for each batch). Each window is planned with the
-- filter's values, so each key is tested as a plain comparison.
create or replace function pgrun.jobs_matching(
  filter    jsonb,
  after_id  bigint default 0,
  max_jobs  integer default 1000
)
returns setof bigint
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  by_id constant text := 'select j.id from pgrun.jobs j
    where j.id > $2 and j.id <= $3
      and pgrun.job_matches($1, j.id, j.queue, j.kind, j.status, j.args, j.error, j.created_at, j.finished_at,
                            j.parent_id, j.run_id)
    order by j.id limit $4';
  failed constant text := 'select j.id from pgrun.jobs j
    where j.status = ''failed'' and j.id > $2 and j.id <= $3
      and pgrun.job_matches($1, j.id, j.queue, j.kind, j.status, j.args, j.error, j.created_at, j.finished_at,
                            j.parent_id, j.run_id)
    order by j.id limit $4';
  -- A run's jobs by the run and parent indexes, whatever their ids' spread.
  by_run constant text := 'select j.id from pgrun.jobs j
    where j.id > $2 and j.id <= $3
      and (j.run_id = ($1 ->> ''run'')::bigint
           or j.parent_id = any (array(select jsonb_array_elements_text($1 -> ''run_nodes''))::bigint[]))
      and pgrun.job_matches($1, j.id, j.queue, j.kind, j.status, j.args, j.error, j.created_at, j.finished_at,
                            j.parent_id, j.run_id)
    order by j.id limit $4';
  scan_window  constant bigint := 50000;
  f            jsonb := pgrun.check_job_filter(filter);
  v_from       bigint;
  v_last       bigint;
  v_left       integer := max_jobs;
  v_n          integer;
begin
  perform pgrun.check_bulk_batch(after_id, max_jobs);
  v_from := greatest(coalesce(after_id, 0), (f ->> 'id_min')::bigint - 1);
  select max(j.id) into v_last from pgrun.jobs j;
  v_last := least(v_last, (f ->> 'id_max')::bigint);
  if f ? 'run' then
    return query execute by_run using f, v_from, v_last, v_left;
    return;
  end if;
  while v_left > 0 and v_from < v_last loop
    if f -> 'states' = '["failed"]' then
      return query execute failed using f, v_from, least(v_from + scan_window, v_last), v_left;
    else
      return query execute by_id using f, v_from, least(v_from + scan_window, v_last), v_left;
    end if;
    get diagnostics v_n = row_count;
    v_left := v_left - v_n;
    v_from := v_from + scan_window;
  end loop;
end;
$$;

-- bulk_verdicts says, for each of the jobs ids, why action (retry, cancel or delete)
-- would leave it as it is, NULL where it would not:
--   no_longer_matches        filter no longer matches it, or the action no longer applies
--                            (another transaction changed it since it was picked)
--   not_failed_or_cancelled  retry: only a failed or cancelled job is redriven
--   unique_key_held          retry: an active job holds its unique key (or an older job
--                            of the same batch takes it first)
--   already_finished         cancel: it has finished
--   not_finished             delete: it is still active; cancel it first
--   workflow_in_progress     delete: a node of a running run or a child of an active
--                            parent, which that run or parent still reads
-- (as prune_history keeps them). Granted to nobody.
create or replace function pgrun.bulk_verdicts(action text, filter jsonb, ids bigint[])
returns table (id bigint, why text)
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select j.id,
         case
         when not coalesce(pgrun.job_matches(filter, j.id, j.queue, j.kind, j.status, j.args, j.error, j.created_at,
                                             j.finished_at, j.parent_id, j.run_id), false)
           then 'no_longer_matches'
         when action = 'retry' and j.status not in ('failed', 'cancelled')
           then 'not_failed_or_cancelled'
         when action = 'retry' and j.unique_key is not null
              and (exists (select 1 from pgrun.jobs a
                           where a.unique_key = j.unique_key and a.tenant is not distinct from j.tenant
                             and pgrun.is_active(a.status))
                   or row_number() over (partition by j.unique_key, j.tenant, j.status in ('failed', 'cancelled')
                                         order by j.id) > 1)
           then 'unique_key_held'
         when action = 'cancel' and not pgrun.is_active(j.status)
           then 'already_finished'
         when action = 'delete' and pgrun.is_active(j.status)
           then 'not_finished'
         when action = 'delete'
              and ((j.run_id is not null and exists (select 1 from pgrun.runs r where r.id = j.run_id and r.status = 'running'))
                or (j.parent_id is not null and exists (select 1 from pgrun.jobs p where p.id = j.parent_id
                                                        and pgrun.is_active(p.status))))
           then 'workflow_in_progress'
         end
  from pgrun.jobs j
  where j.id = any (ids)
$$;

-- bulk_sort sorts the jobs ids by bulk_verdicts: todo, those action would change (in
-- id order, '{}' for none), todo_count, their number, and reasons, a JSON object of
-- reason to count for the others. Granted to nobody.
create or replace function pgrun.bulk_sort(action text, filter jsonb, ids bigint[])
returns table (todo bigint[], todo_count integer, reasons jsonb)
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  with v as (select * from pgrun.bulk_verdicts(action, filter, ids))
  select coalesce((select array_agg(v.id order by v.id) from v where v.why is null), '{}'),
         (select count(*)::integer from v where v.why is null),
         coalesce((select jsonb_object_agg(g.why, g.n)
                   from (select v.why, count(*) as n from v where v.why is not null group by v.why) g), '{}')
$$;

-- act_on_matching is the body of retry_matching, cancel_matching and delete_matching:
-- action on the next batch of jobs that filter matches (jobs_matching from after_id,
-- at most max_jobs). Granted to nobody.
--
-- A dry run changes nothing and takes no lock: changed is how many the action would
-- change as the jobs stand. Otherwise, for a cancel or a delete, the batch's jobs are
-- locked FOR UPDATE SKIP LOCKED (a job another transaction holds, a claim or a
-- report, is skipped as busy rather than waited for) and checked again
-- (bulk_verdicts); a retry checks them and writes each with the check repeated (a
-- failed job is nobody else's to hold). Then each action is a few set-wide
-- statements:
--   retry   as retry_job: queued to run now with a full attempt budget, a
--           job.retried event, a wake-up on pgrun_jobs per queue; a workflow node
--           goes through retry_job itself, which resumes its run
--   cancel  as cancel_job: cancelled with reason, a job.cancelled event, a running
--           job's runner told on pgrun_cancel, unfinished descendants cancelled too
--   delete  as prune_history: deleted with its events, durable steps and waits
-- Returns matched (the batch's size), changed, skipped (a JSON object of reason to
-- count: bulk_verdicts' reasons and busy) and last_id, the cursor of the next batch
-- (NULL when nothing matched: the end).
create or replace function pgrun.act_on_matching(
  action    text,
  filter    jsonb,
  dry_run   boolean,
  after_id  bigint,
  max_jobs  integer,
  reason    text default null
)
returns table (matched integer, changed integer, skipped jsonb, last_id bigint)
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now      timestamptz := pgrun.clock();
  v_filter   jsonb := pgrun.check_job_filter(filter);
  v_ids      bigint[];
  v_locked   bigint[];
  v_todo     bigint[];
  v_nodes    bigint[] := '{}';
  v_done     bigint[] := '{}';
  v_running  text[];
  v_queues   text[];
  v_id       bigint;
  v_n        integer;
  v_expect   integer;
begin
  if action is null or action not in ('retry', 'cancel', 'delete') then
    raise exception 'bulk action % is not valid', coalesce(quote_literal(action), 'NULL')
      using errcode = '22023', hint = 'Call retry_matching, cancel_matching or delete_matching.';
  end if;
  if octet_length(reason) > 2000 then
    raise exception 'cancel reason is % bytes, over 2000', octet_length(reason)
      using errcode = '22023', hint = 'Say why in at most 2000 bytes; the details belong in a ticket.';
  end if;
  v_ids := array(select m.id from pgrun.jobs_matching(v_filter, after_id, max_jobs) m(id) order by m.id);
  matched := cardinality(v_ids);
  last_id := v_ids[matched];
  changed := 0;
  skipped := '{}';
  if matched = 0 then
    return next;
    return;
  end if;

  if dry_run then
    select v.todo_count, v.reasons into changed, skipped from pgrun.bulk_sort(action, v_filter, v_ids) v;
    return next;
    return;
  end if;

  if action = 'retry' then
    -- No lock first: nothing holds a failed job for long (claims take queued ones),
    -- so the UPDATE below, which checks each job again as it writes it, writes each
    -- row once; a lock first would write each twice, and the WAL of a batch is what
    -- the claims' commits wait behind.
    select v.todo, v.reasons into v_todo, skipped from pgrun.bulk_sort(action, v_filter, v_ids) v;
  else
    v_locked := array(select j.id from pgrun.jobs j where j.id = any (v_ids) order by j.id for update skip locked);
    if cardinality(v_locked) < matched then
      skipped := jsonb_build_object('busy', matched - cardinality(v_locked));
    end if;
    select v.todo, skipped || v.reasons into v_todo, skipped from pgrun.bulk_sort(action, v_filter, v_locked) v;
  end if;
  v_expect := cardinality(v_todo);

  if action = 'retry' then
    -- A workflow node resumes its run (node_redriven): retry_job does that, one job
    -- at a time.
    v_nodes := array(select j.id from pgrun.jobs j
                     where j.id = any (v_todo) and j.run_id is not null and j.parent_id is null order by j.id);
    v_todo := array(select t.id from unnest(v_todo) t(id) where t.id <> all (v_nodes) order by t.id);
    begin
      with redriven as (
        update pgrun.jobs j
        set status = 'queued', run_at = v_now, failures = 0, lease_expires_at = null, lease_expiries = 0,
            finished_at = null, result = null
        where j.id = any (v_todo) and j.status in ('failed', 'cancelled')
          and pgrun.job_matches(v_filter, j.id, j.queue, j.kind, j.status, j.args, j.error, j.created_at,
                                j.finished_at, j.parent_id, j.run_id)
        returning j.id, j.attempt, j.queue
      ), logged as (
        insert into pgrun.job_events (job_id, at, event, level, message, fields)
        select r.id, v_now, 'job.retried', 'info', 'manual redrive', jsonb_build_object('attempt', r.attempt, 'bulk', true)
        from redriven r
      )
      select count(*), array_agg(distinct r.queue), coalesce(array_agg(r.id), '{}') into v_n, v_queues, v_done
      from redriven r;
      changed := v_n;
    exception when unique_violation then
      -- An active holder of a unique key came in since the check: each job on its
      -- own, below, so that only the ones whose key is held are left.
      v_nodes := v_nodes || v_todo;
    end;
    -- A durable await left behind by a cancel starts afresh, as retry_job has it.
    if cardinality(v_done) > 0 and exists (select 1 from pgrun.job_waits) then
      delete from pgrun.job_waits w where w.job_id = any (v_done);
    end if;
    perform pg_notify('pgrun_jobs', q.name) from unnest(v_queues) q(name);
    foreach v_id in array v_nodes loop
      begin
        if (pgrun.retry_job(v_id)).id is not null then
          changed := changed + 1;
        end if;
      exception when unique_violation then
        skipped := jsonb_set(skipped, '{unique_key_held}', to_jsonb(coalesce((skipped ->> 'unique_key_held')::integer, 0) + 1));
        v_expect := v_expect - 1;
      end;
    end loop;

  elsif action = 'cancel' then
    with cur as (
      select j.id, j.status as prev from pgrun.jobs j where j.id = any (v_todo)
    ), cancelled as (
      update pgrun.jobs j
      set status = 'cancelled', finished_at = v_now, lease_expires_at = null,
          error = jsonb_build_object('class', 'cancelled', 'message', coalesce(reason, 'cancelled'))
      from cur
      where j.id = cur.id and pgrun.is_active(j.status)
      returning j.id, j.attempt, cur.prev
    ), logged as (
      insert into pgrun.job_events (job_id, at, event, level, message, fields)
      select c.id, v_now, 'job.cancelled', 'warn', reason, jsonb_build_object('previous_status', c.prev, 'attempt', c.attempt)
      from cancelled c
    )
    select count(*), coalesce(array_agg(c.id), '{}'), array_agg(c.id || ':' || c.attempt) filter (where c.prev = 'running')
    into v_n, v_done, v_running
    from cancelled c;
    changed := v_n;
    -- The runners of the running ones are told, on commit, to stop their handlers.
    perform pg_notify('pgrun_cancel', r.claim) from unnest(v_running) r(claim);
    -- Unfinished descendants go too, as cancel_tree takes them.
    perform pgrun.cancel_tree(c.id, 'parent cancelled')
    from pgrun.jobs c
    where c.parent_id = any (v_done) and pgrun.is_active(c.status);

  else -- delete
    with events as (delete from pgrun.job_events e where e.job_id = any (v_todo)),
         steps as (delete from pgrun.job_steps s where s.job_id = any (v_todo)),
         waits as (delete from pgrun.job_waits w where w.job_id = any (v_todo)),
         gone as (delete from pgrun.jobs j where j.id = any (v_todo) returning j.id)
    select count(*) into v_n from gone;
    changed := v_n;
  end if;
  -- What the writes found changed since the check (another transaction's work).
  if changed < v_expect then
    skipped := skipped || jsonb_build_object('no_longer_matches',
                 coalesce((skipped ->> 'no_longer_matches')::integer, 0) + v_expect - changed);
  end if;
  return next;
end;
$$;

-- retry_matching redrives the next batch of failed or cancelled jobs that filter
-- matches (the keys at the top of this file), as retry_job does each: above after_id
-- (0: the first batch), at most max_jobs (1 to max_bulk_batch()). With dry_run it
-- changes nothing and says how many it would. Returns matched, changed, skipped (a
-- JSON object of reason to count: not_failed_or_cancelled, unique_key_held,
-- no_longer_matches) and last_id, from which the next call goes on (NULL: nothing
-- matched, the end). Each call is its own short transaction when called alone: a
-- caller loops, and can show progress between calls.
--   select * from pgrun.retry_matching('{"queue": "emails", "states": ["failed"], "error": "421"}');
create or replace function pgrun.retry_matching(
  filter    jsonb,
  dry_run   boolean default false,
  after_id  bigint default 0,
  max_jobs  integer default 1000
)
returns table (matched integer, changed integer, skipped jsonb, last_id bigint)
language sql
set search_path = pgrun, pg_catalog
as $$
  select * from pgrun.act_on_matching('retry', filter, dry_run, after_id, max_jobs)
$$;

-- cancel_matching cancels the next batch of unfinished jobs that filter matches, as
-- cancel_job does each (with reason, at most 2000 bytes); as retry_matching for the
-- rest. Skipped reasons: already_finished, busy, no_longer_matches.
create or replace function pgrun.cancel_matching(
  filter    jsonb,
  dry_run   boolean default false,
  after_id  bigint default 0,
  max_jobs  integer default 1000,
  reason    text default null
)
returns table (matched integer, changed integer, skipped jsonb, last_id bigint)
language sql
set search_path = pgrun, pg_catalog
as $$
  select * from pgrun.act_on_matching('cancel', filter, dry_run, after_id, max_jobs, reason)
$$;

-- delete_matching deletes the next batch of finished jobs that filter matches, with
-- their events, durable steps and waits, keeping what a workflow still reads (as
-- prune_history does); as retry_matching for the rest. Skipped reasons: not_finished,
-- workflow_in_progress, busy, no_longer_matches.
create or replace function pgrun.delete_matching(
  filter    jsonb,
  dry_run   boolean default false,
  after_id  bigint default 0,
  max_jobs  integer default 1000
)
returns table (matched integer, changed integer, skipped jsonb, last_id bigint)
language sql
set search_path = pgrun, pg_catalog
as $$
  select * from pgrun.act_on_matching('delete', filter, dry_run, after_id, max_jobs)
$$;
