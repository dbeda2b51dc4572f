-- 22_debounce.sql: debounce and throttle at enqueue time (docs/operations.md,
-- "Debounce"). enqueue_columns (21_enqueue_batch.sql) hands each spec with a
-- debounce_key to enqueue_debounced; the key is stored on the job (debounce_key), the
-- window and the edge are not: each enqueue brings its own.

-- debounce_lock_id is the advisory lock of one debounce key of a queue (and tenant).
-- Two keys whose hashes collide share a lock: their enqueues only wait for each other,
-- they never fold into each other (the fold reads the key itself).
create or replace function pgrun.debounce_lock_id(queue text, debounce_key text, tenant text)
returns bigint
language sql
immutable
parallel safe
return hashtextextended('pgrun.debounce:' || coalesce(tenant, '') || ':' || queue || ':' || debounce_key, 0);

-- fold_debounced folds an enqueue into job id: if it is still waiting for its
-- debounce window to end (queued, or pending behind its sequence, never claimed, due
-- after now) under debounce_key, it takes args and meta (NULL: {}) and runs at
-- run_at, or later if it was already due later (a window only ever moves on).
-- Returns the job, or NULL, changing nothing, if it is no longer waiting (claimed,
-- due, cancelled) or, in the tenant mode, belongs to another tenant. enqueue_debounced
-- finds the job with the caller's privileges; this part runs as the engine and checks
-- what it writes by the enqueue rules (22023 before writing anything).
create or replace function pgrun.fold_debounced(id bigint, debounce_key text, args jsonb, meta jsonb,
                                                run_at timestamptz)
returns pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j pgrun.jobs;
begin
  perform pgrun.check_job_spec(row('job', coalesce(args, '{}'), 'default', 0, run_at, null, null, null, null, null,
                                   coalesce(meta, '{}'), null, null, null, null, null, null, null,
                                   null)::pgrun.job_spec);
  if run_at is null or run_at > pgrun.clock() + pgrun.max_wait() then
    raise exception 'fold run_at % is out of bounds', coalesce(run_at::text, 'NULL')
      using errcode = '22023', hint = format('Fold into a job due within %s.', pgrun.max_wait());
  end if;
  update pgrun.jobs x
  set args = coalesce(fold_debounced.args, '{}'), meta = coalesce(fold_debounced.meta, '{}'),
      run_at = greatest(x.run_at, fold_debounced.run_at)
  where x.id = fold_debounced.id and x.debounce_key = fold_debounced.debounce_key
    and x.status in ('queued', 'pending') and x.attempt = 0 and x.run_at > pgrun.clock()
    and pgrun.may_touch(x.tenant)
  returning x.* into j;
  return j;
end;
$$;

-- enqueue_debounced enqueues spec s, which has a debounce_key and a debounce window,
-- for for_tenant (the one enqueue_columns works out; NULL with the mode off), and returns
-- what it did as a row of pgrun.enqueued. Under the key's lock (debounce_lock_id), so
-- that concurrent enqueuers of one key are answered one after the other:
--   unique_key first: a spec whose unique_key is held (an active job, or one that
--     finished within unique_window) returns the holder, deduplicated, as any enqueue
--     does (with on_conflict 'replace' a queued holder takes the args); debounce
--     applies only when no job holds the unique key.
--   trailing (the default edge): if the key's latest job is still waiting for its
--     window to end (fold_debounced), the spec folds into it (folded): the job takes
--     the spec's args and meta and now runs at now + debounce. Otherwise a new job is
--     inserted, due at now + debounce.
--   leading: if the key's latest job was enqueued within debounce of now, it is
--     returned, folded, and nothing is written (the throttle); otherwise a new job is
--     inserted, due now.
-- Runs with the caller's privileges (the insert is the caller's, checked by the insert
-- trigger; fold_debounced's update is the engine's). Exact in READ COMMITTED
-- transactions, the default: each enqueuer reads the key's latest job after taking
-- the lock. In REPEATABLE READ or SERIALIZABLE a transaction reads what was committed
-- when it began, and two of them may each insert a job for one window.
create or replace function pgrun.enqueue_debounced(s pgrun.job_spec, for_tenant text)
returns pgrun.enqueued
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  q      text := coalesce(s.queue, 'default');
  edge   text := coalesce(s.debounce_edge, 'trailing');
  v_now  timestamptz;
  j      pgrun.jobs;
  e      pgrun.enqueued;
begin
  perform pg_advisory_xact_lock(pgrun.debounce_lock_id(q, s.debounce_key, for_tenant));
  -- Read after the lock (a statement of its own), so that the jobs of the enqueuers
  -- that held it before are seen.
  v_now := pgrun.clock();
  loop
    if s.unique_key is not null then
      if s.unique_window is not null then
        select * into j from pgrun.jobs x
        where x.unique_key = s.unique_key and x.tenant is not distinct from for_tenant
          and x.finished_at > v_now - s.unique_window
        order by x.finished_at desc limit 1;
        if found then
          select (j).*, true, false into e;
          return e;
        end if;
      end if;
      select * into j from pgrun.jobs x -- by jobs_unique_key_tenant_idx, as enqueue_columns reads it
      where x.unique_key = s.unique_key and x.tenant is not distinct from for_tenant
        and x.status in ('pending', 'queued', 'running', 'waiting');
      if found then
        if s.on_conflict = 'replace' and j.status = 'queued' then
          j := coalesce(pgrun.replace_queued(j.id, s.unique_key, s.args, s.priority, null), j);
        end if;
        select (j).*, true, false into e;
        return e;
      end if;
    end if;

    -- The key's latest job: the fold's candidate, or the leading edge's window. By
    -- jobs_debounce_idx, the key bounded as a range and the order naming the index's
    -- columns (as sequences_promote reads a sequence's next job, which says why): with
    -- an equality, in a table whose statistics saw one busy key, the generic plan read
    -- every job for a rare key (a sequential scan, 22 ms an enqueue at 20,000 jobs).
    select * into j from pgrun.jobs x
    where x.queue = q and x.debounce_key >= s.debounce_key and x.debounce_key <= s.debounce_key
      and x.tenant is not distinct from for_tenant
    order by x.queue desc, x.debounce_key desc, x.id desc limit 1;
    if found then
      if edge = 'leading' then
        if j.created_at > v_now - s.debounce then
          select (j).*, false, true into e;
          return e;
        end if;
      elsif j.status in ('queued', 'pending') and j.attempt = 0 and j.run_at > v_now then
        j := pgrun.fold_debounced(j.id, s.debounce_key, s.args, s.meta, v_now + s.debounce);
        if j.id is not null then
          select (j).*, false, true into e;
          return e;
        end if;
      end if;
    end if;

    -- A new job. The insert trigger refuses a debounce_key without a window (a plain
    -- INSERT cannot debounce) unless this statement says it is debounce's own.
    perform set_config('pgrun.debouncing', 'on', true);
    insert into pgrun.jobs (kind, args, queue, priority, run_at, max_attempts, unique_key, parent_id, model,
                            timeout, meta, concurrency_key, model_required, tenant, sequence_key, debounce_key)
    values (s.kind, coalesce(s.args, '{}'), q, s.priority,
            case when edge = 'leading' then v_now else v_now + s.debounce end, s.max_attempts, s.unique_key,
            s.parent_id, s.model, s.timeout, coalesce(s.meta, '{}'), s.concurrency_key,
            coalesce(s.model_required, false), for_tenant, s.sequence_key, s.debounce_key)
    -- The predicate of jobs_unique_key_tenant_idx, as enqueue_columns spells it.
    on conflict (unique_key, tenant)
      where unique_key is not null and status in ('pending', 'queued', 'running', 'waiting')
      do nothing
    returning * into j;
    perform set_config('pgrun.debouncing', '', true);
    if j.id is not null then
      select (j).*, false, false into e;
      return e;
    end if;
    -- A job of the unique key committed between the look and the insert: answer with it.
  end loop;
end;
$$;
