-- 50_queues.sql: per-queue policy an operator sets from psql, and bulk redrive of dead
-- letters.

-- queue_row returns queue q's row, creating it with no policy if it does not exist.
create or replace function pgrun.queue_row(q text)
returns pgrun.queues
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  r pgrun.queues;
begin
  perform pgrun.check_queue_name(q);
  insert into pgrun.queues (name) values (q) on conflict do nothing;
  select * into r from pgrun.queues where name = q;
  return r;
end;
$$;

-- queue_not_found raises P0002 naming queue q. pause_queue and resume_queue call it
-- so that a mistyped name fails instead of creating (and pausing) a queue no job
-- uses.
create or replace function pgrun.queue_not_found(q text)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  raise exception 'queue % does not exist', coalesce(quote_literal(q), 'NULL')
    using errcode = 'P0002',
          hint = 'List queues with: SELECT name, paused FROM pgrun.queues ORDER BY name; create one before its first job with: SELECT pgrun.set_queue(''name'');';
end;
$$;

-- pause_queue stops claims from existing queue q (running jobs go on); pausing twice
-- is harmless. A queue exists once a job was enqueued into it or
-- set_queue named it. Returns the queue; raises 22023 for a name that is not valid
-- and P0002 for one that does not exist, creating nothing.
create or replace function pgrun.pause_queue(q text)
returns pgrun.queues
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  r pgrun.queues;
begin
  perform pgrun.check_queue_name(q);
  update pgrun.queues x set paused = true, updated_at = now() where x.name = q returning x.* into r;
  if not found then
    perform pgrun.queue_not_found(q);
  end if;
  return r;
end;
$$;

-- resume_queue lets claims from existing queue q start again and wakes the runners
-- listening on pgrun_jobs (on commit). Returns the queue; raises like pause_queue.
create or replace function pgrun.resume_queue(q text)
returns pgrun.queues
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  r pgrun.queues;
begin
  perform pgrun.check_queue_name(q);
  update pgrun.queues x set paused = false, updated_at = now() where x.name = q returning x.* into r;
  if not found then
    perform pgrun.queue_not_found(q);
  end if;
  perform pg_notify('pgrun_jobs', q);
  return r;
end;
$$;

-- set_queue sets queue name's policy. Each argument left NULL keeps its value; name
-- settings in reset to clear them (back to no limit or the engine default):
--   max_running        at most this many of the queue's jobs run at once, across runners
--   rate_limit         at most this many starts per rate_period (default 1 second)
--   concurrency_limit  at most this many running jobs per concurrency_key
--   default_lease      the claim lease when the claimer passes none (15 s to a day:
--                      runners renew every 10 s)
--   default_timeout, default_max_attempts   for jobs enqueued without their own
--                      (default_timeout 0: no timeout; reset: the engine's hour)
--   backoff_base, backoff_max               retry delays (default 1 second, 1 hour;
--                      base at most max, each at most 366 days)
--   retention          how long finished jobs are kept (maintain's default otherwise)
--   archive            move pruned jobs to pgrun.jobs_archive instead of deleting them
--   warm_wait          how long a job is left for a worker with its model warm (5 s)
--   ephemeral          delete a job as it succeeds, in the statement that completes it,
--                      for high-volume work whose history nobody reads (no audit
--                      trail, no result kept, unique keys freed at once). Children and
--                      workflow nodes are kept whatever the queue: their parents and
--                      runs read them; so are parents finished by their children, and
--                      failed and cancelled jobs.
--   sequence_on_failure  'hold' (the default): a job of a sequence that fails for good
--                      holds the jobs behind it until it is retried or cancelled;
--                      'continue': the next one runs (36_sequences.sql)
--   fair_by            'concurrency_key' or 'tenant': claims take jobs round-robin
--                      across that key's values instead of in one global order
--                      (38_claim_keys.sql); changing it starts the round afresh
--   key_rate_limit     at most this many claims per concurrency_key per key_rate_period
--                      (default 1 second), 1 to 1,000,000; reset forgets the windows
--   priority_aging     a due job's effective priority rises one level per this much
--                      waiting (1 second to max_wait())
-- Intervals are bounded (input_bounds()); 22023 for one out of bounds, nothing changed.
-- Returns the queue.
create or replace function pgrun.set_queue(
  name                  text,
  max_running           integer default null,
  rate_limit            integer default null,
  rate_period           interval default null,
  concurrency_limit     integer default null,
  default_lease         interval default null,
  default_timeout       interval default null,
  default_max_attempts  integer default null,
  backoff_base          interval default null,
  backoff_max           interval default null,
  retention             interval default null,
  archive               boolean default null,
  reset                 text[] default '{}',
  warm_wait             interval default null,
  ephemeral             boolean default null,
  sequence_on_failure   text default null,
  fair_by               text default null,
  key_rate_limit        integer default null,
  key_rate_period       interval default null,
  priority_aging        interval default null
)
returns pgrun.queues
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  r       pgrun.queues;
  k       text;
  v_base  interval;
  v_max   interval;
begin
  perform pgrun.queue_row(name);
  foreach k in array coalesce(reset, '{}') loop
    if k <> all (array['max_running', 'rate_limit', 'concurrency_limit', 'default_lease', 'default_timeout',
                       'default_max_attempts', 'backoff_base', 'backoff_max', 'retention', 'warm_wait',
                       'sequence_on_failure', 'fair_by', 'key_rate_limit', 'key_rate_period', 'priority_aging']) then
      raise exception 'setting % cannot be reset', quote_literal(k)
        using errcode = '22023', hint = 'Reset one of max_running, rate_limit, concurrency_limit, default_lease, default_timeout, default_max_attempts, backoff_base, backoff_max, retention, warm_wait, sequence_on_failure, fair_by, key_rate_limit, key_rate_period, priority_aging.';
    end if;
  end loop;
  if sequence_on_failure not in ('hold', 'continue') then
    raise exception 'sequence_on_failure % of queue % is not valid', quote_literal(sequence_on_failure), name
      using errcode = '22023', hint = 'Use hold (the jobs behind a failed one wait for it) or continue (they run on).';
  end if;
  if fair_by not in ('concurrency_key', 'tenant') then
    raise exception 'fair_by % of queue % is not valid', quote_literal(fair_by), name
      using errcode = '22023', hint = 'Use concurrency_key or tenant, or reset fair_by to claim in one global order.';
  end if;
  if key_rate_limit < 1 or key_rate_limit > 1000000 then
    raise exception 'key_rate_limit % of queue % is out of bounds', key_rate_limit, name
      using errcode = '22023', hint = 'Use 1 to 1000000 claims per key and key_rate_period, or reset key_rate_limit for none.';
  end if;
  perform pgrun.check_interval('key_rate_period', key_rate_period, pgrun.max_wait());
  perform pgrun.check_interval('priority_aging', priority_aging, pgrun.max_wait(), interval '1 second');
  if max_running < 0 or rate_limit < 0 or concurrency_limit < 1 or default_max_attempts < 1 then
    raise exception 'queue % limits must not be negative (max_running %, rate_limit %, concurrency_limit %, default_max_attempts %)',
      name, max_running, rate_limit, concurrency_limit, default_max_attempts
      using errcode = '22023', hint = 'Use 0 or more for max_running and rate_limit, 1 or more for concurrency_limit and default_max_attempts.';
  end if;
  if default_lease < interval '15 seconds' then
    raise exception 'default_lease % of queue % is too short', default_lease, name
      using errcode = '22023', hint = 'Use 15 seconds or more: runners renew leases every 10 seconds.';
  end if;
  perform pgrun.check_interval('default_lease', default_lease, pgrun.max_lease());
  perform pgrun.check_interval('rate_period', rate_period, pgrun.max_wait());
  if default_timeout <> interval '0' then -- 0: no timeout
    perform pgrun.check_interval('default_timeout', default_timeout, pgrun.max_wait());
  end if;
  perform pgrun.check_interval('backoff_base', backoff_base, pgrun.max_wait());
  perform pgrun.check_interval('backoff_max', backoff_max, pgrun.max_wait());
  perform pgrun.check_interval('retention', retention, pgrun.max_retention());
  perform pgrun.check_interval('warm_wait', warm_wait, pgrun.max_lease());
  -- The backoff as it will be (what is not set keeps its value, a reset one its
  -- default): a base above the cap would make every retry wait the cap.
  select case when 'backoff_base' = any (reset) then null else coalesce(set_queue.backoff_base, x.backoff_base) end,
         case when 'backoff_max' = any (reset) then null else coalesce(set_queue.backoff_max, x.backoff_max) end
  into v_base, v_max
  from pgrun.queues x where x.name = set_queue.name;
  if coalesce(v_base, interval '1 second') > coalesce(v_max, interval '1 hour') then
    raise exception 'backoff_base % of queue % is above its backoff_max %', coalesce(v_base, interval '1 second'), name,
      coalesce(v_max, interval '1 hour')
      using errcode = '22023',
            hint = 'Retries wait from backoff_base, doubling up to backoff_max: pass a backoff_max at least as long (default 1 hour).';
  end if;
  update pgrun.queues x set
    max_running = case when 'max_running' = any (reset) then null else coalesce(set_queue.max_running, x.max_running) end,
    rate_limit = case when 'rate_limit' = any (reset) then null else coalesce(set_queue.rate_limit, x.rate_limit) end,
    rate_period = coalesce(set_queue.rate_period, x.rate_period),
    concurrency_limit = case when 'concurrency_limit' = any (reset) then null else coalesce(set_queue.concurrency_limit, x.concurrency_limit) end,
    default_lease = case when 'default_lease' = any (reset) then null else coalesce(set_queue.default_lease, x.default_lease) end,
    default_timeout = case when 'default_timeout' = any (reset) then null else coalesce(set_queue.default_timeout, x.default_timeout) end,
    default_max_attempts = case when 'default_max_attempts' = any (reset) then null else coalesce(set_queue.default_max_attempts, x.default_max_attempts) end,
    backoff_base = case when 'backoff_base' = any (reset) then null else coalesce(set_queue.backoff_base, x.backoff_base) end,
    backoff_max = case when 'backoff_max' = any (reset) then null else coalesce(set_queue.backoff_max, x.backoff_max) end,
    retention = case when 'retention' = any (reset) then null else coalesce(set_queue.retention, x.retention) end,
    archive = coalesce(set_queue.archive, x.archive),
    warm_wait = case when 'warm_wait' = any (reset) then null else coalesce(set_queue.warm_wait, x.warm_wait) end,
    ephemeral = coalesce(set_queue.ephemeral, x.ephemeral),
    sequence_on_failure = case when 'sequence_on_failure' = any (reset) then 'hold'
                               else coalesce(set_queue.sequence_on_failure, x.sequence_on_failure) end,
    fair_by = case when 'fair_by' = any (reset) then null else coalesce(set_queue.fair_by, x.fair_by) end,
    key_rate_limit = case when 'key_rate_limit' = any (reset) then null
                          else coalesce(set_queue.key_rate_limit, x.key_rate_limit) end,
    key_rate_period = case when 'key_rate_period' = any (reset) then null
                           else coalesce(set_queue.key_rate_period, x.key_rate_period) end,
    priority_aging = case when 'priority_aging' = any (reset) then null
                          else coalesce(set_queue.priority_aging, x.priority_aging) end,
    updated_at = now()
  where x.name = set_queue.name
  returning x.* into r;
  -- Its claims find the cursor's row there (as no row, key NULL starts at the first
  -- key): a fair queue's claims run at once, as a per-key rate's choose theirs
  -- (claim_optimistic), and two first claims that each inserted it would wait on one
  -- another (claim_keyed). The row, once there, is never touched here, nor is it
  -- inserted over one a claim is writing: a claim of a per-key rate alone holds the
  -- row while it waits for the queue's, which this holds (the insert's check of the
  -- key would wait for that claim: a deadlock). A change of the key to be fair by
  -- keeps it too: the cursor's key is a place in the walk (its slot), whatever the
  -- key names, and the next claim walks on from there.
  if (r.fair_by is not null or pgrun.claim_optimistic(r))
     and not exists (select 1 from pgrun.fair_cursors c where c.queue = r.name) then
    insert into pgrun.fair_cursors (queue) values (r.name) on conflict (queue) do nothing;
  end if;
  if r.key_rate_limit is null then
    delete from pgrun.key_rate_windows w where w.queue = r.name;
  end if;
  return r;
end;
$$;

-- retryable_jobs lists, in id order, the failed jobs retry_jobs redrives: those of
-- queue and kind (NULL: any) that failed at or after since, at most max_jobs of them.
-- The one statement of that choice, so that a caller counting ahead (a progress bar)
-- counts what retry_jobs would redrive.
create or replace function pgrun.retryable_jobs(
  queue     text default null,
  kind      text default null,
  since     timestamptz default null,
  max_jobs  integer default 1000
)
returns setof bigint
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
begin
  if max_jobs is null or max_jobs < 1 then
    raise exception 'max_jobs % is not valid', coalesce(max_jobs::text, 'NULL')
      using errcode = '22023', hint = 'Redrive 1 or more jobs per call.';
  end if;
  return query
    select j.id from pgrun.jobs j
    where j.status = 'failed'
      and (retryable_jobs.queue is null or j.queue = retryable_jobs.queue)
      and (retryable_jobs.kind is null or j.kind = retryable_jobs.kind)
      and (since is null or j.finished_at >= since)
    order by j.id
    limit max_jobs;
end;
$$;

-- retry_jobs redrives failed jobs in bulk (dead letters): those retryable_jobs lists
-- for the same arguments. Returns how many were queued again.
create or replace function pgrun.retry_jobs(
  queue     text default null,
  kind      text default null,
  since     timestamptz default null,
  max_jobs  integer default 1000
)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  n integer;
begin
  select count(pgrun.retry_job(r.id)) into n
  from pgrun.retryable_jobs(queue, kind, since, max_jobs) r(id);
  return n;
end;
$$;
