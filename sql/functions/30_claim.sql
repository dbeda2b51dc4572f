-- 30_claim.sql: handing queued jobs to a worker under a lease, within the queue's
-- policy (paused, max_running, rate_limit, concurrency_limit) and the operator's
-- worker control.

-- rate_period is the window of a queue's rate_limit given its rate_period column:
-- that, else a second. announces_room says whether jobs of a queue with these
-- max_running and concurrency_limit columns make room a claim waits for when they
-- leave running, so that its claimers are woken when they do (jobs_room_made). Plain
-- expressions with their bodies bound when they are created (no SET clause, which
-- would stop it, as may_take_cold), so the statements that use them inline them; they
-- take the columns, not the row, since a body bound to a row's columns would keep a
-- down migration from dropping them. The runner reads the window with its peers
-- (runner/peers.go).
create or replace function pgrun.rate_period(rate_period interval)
returns interval
language sql
immutable
parallel safe
return coalesce(rate_period, interval '1 second');

create or replace function pgrun.announces_room(max_running integer, concurrency_limit integer)
returns boolean
language sql
immutable
parallel safe
return max_running is not null or concurrency_limit is not null;

-- claim_locked turns the jobs that ids names, which the calling transaction has locked
-- FOR UPDATE as still queued (claim_jobs), into worker's running claims at now with a
-- lease of length lease, and returns them. The guard is the row lock the caller took;
-- the UPDATE deliberately repeats no status filter: with one, the planner may fetch
-- the ids through the partial claim index (id is its last column) and scan the whole
-- backlog per claim. A caller that has not locked them passes from_status, the status
-- they must still have (a sequence's handoff, 36_sequences.sql: 'pending'), compared
-- as text (no partial index matches it) on the newest row version. No role may call it (90_privileges.sql grants it to none); only
-- claim_jobs, running as the engine, does.
--
-- Planned once. The batch writes of the hot path (claim_locked, and complete_jobs'
-- succeed_running and delete_succeeded, 32_transitions.sql) each live in a function of their own whose
-- plan is made once per session and kept: planned for each call (by EXECUTE, as they
-- were), they cost every claim and completion a parse and a plan, and a plan of
-- "id = any ($1)" with the ids as constants estimates each element: a fifth of the
-- server's processor time for a claim and a completion of 20 jobs, a tenth at 500
-- (docs/benchmarks.md, eighth pass). A plan made once must not depend on the size of
-- the table when it was made: PostgreSQL's own choice, made while pgrun.jobs was small
-- (a fresh database, a quiet queue after a purge), read the table with a sequential
-- scan for every later claim, 130 ms a claim at 100,000 jobs. So the planner is
-- pinned for these functions: a generic plan from the first call
-- (plan_cache_mode), never a sequential scan (enable_seqscan off; the batch's ids
-- restrict pgrun.jobs by primary key) nor a nested loop (enable_nestloop off: a loop
-- that compares every pair of a batch and its rows), and no JIT (a disabled plan
-- node's cost would look worth compiling). The settings hold for everything the
-- statement runs, triggers included, so every trigger function an UPDATE of
-- pgrun.jobs fires that runs statements of its own sets the first three back to
-- PostgreSQL's defaults (jobs_room_made below, jobs_dispatch in 34_dispatch.sql);
-- tests/plan_check_test.go checks both.
create or replace function pgrun.claim_locked(
  ids          bigint[],
  worker       text,
  at           timestamptz,
  lease        interval,
  from_status  text default null
)
returns setof pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_nestloop = off
set jit = off
as $$
declare
  -- The claim token: 64 random bits drawn once for this claim and, below them, the
  -- job's id, so that tokens are unique to a claim (two claims of one job differ in
  -- their random half) without a random draw per job: gen_random_uuid() per row cost
  -- 2.4 us a job (OpenSSL's generator makes a system call each time), this 0.3 us.
  v_seed text := left(replace(gen_random_uuid()::text, '-', ''), 16);
begin
  return query
  update pgrun.jobs j
  set status = 'running', attempt = j.attempt + 1, claimed_by = claim_locked.worker,
      claim_id = (v_seed || lpad(to_hex(j.id), 16, '0'))::uuid,
      lease_expires_at = claim_locked.at + claim_locked.lease,
      lease_length = claim_locked.lease, started_at = claim_locked.at, heartbeat_at = null,
      -- Bounded again here (the API refuses a longer timeout at the door): a row
      -- from before the bound must not fail every claim of its queue.
      deadline_at = claim_locked.at + least(j.timeout, pgrun.max_wait())
  where j.id = any (claim_locked.ids)
    and (claim_locked.from_status is null or j.status::text = claim_locked.from_status)
  returning j.*;
end;
$$;

-- jobs_by_ids returns the rows of the jobs ids, in no order: those of a claim that
-- claimed them before it counted them (claim_jobs, a per-key rate alone), returned
-- once the count stands. Planned once, by primary key (claim_locked says why).
create or replace function pgrun.jobs_by_ids(ids bigint[])
returns setof pgrun.jobs
language plpgsql
stable
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set jit = off
as $$
begin
  return query select j.* from pgrun.jobs j where j.id = any (ids);
end;
$$;

-- claim_jobs claims up to n due jobs of one queue for worker, in priority, run_at, id
-- order, of the given kinds only (NULL: any kind; a worker passes the kinds it has
-- handlers for, so a job nobody handles stays queued and is counted in
-- queue_stats.unhandled instead of failing on a worker that cannot run it), and returns
-- them running with attempt incremented (the count of claims), a new claim_id (the
-- claim's token, unique to it: reports that present it match only this claim, and a
-- handler may key its side effects on it) and a lease of the given length
-- (NULL: the queue's default_lease, else default_lease(), 30 seconds).
-- after_priority, after_run_at and after_id (the key of the last job this worker
-- claimed) let the scan resume there instead of at the queue's start; see below.
-- worker must be an id registered by the session's login (check_worker_login), and
-- lease at most max_lease() (a day). In the tenant mode, a worker login mapped to a
-- tenant (grant_tenant) claims only that tenant's jobs.
-- Rows locked by another claimer are skipped (FOR UPDATE SKIP LOCKED), so concurrent
-- claimers never block each other and never receive the same job. Returns no rows
-- for a paused queue, for a worker whose host an operator set to drain or off for the
-- queue, or when nothing is due.
--
-- Model affinity: models lists what is warm on this worker (it is recorded in
-- pgrun.workers). Affinity is a tiebreak within priority, never above it: among the
-- jobs of the most urgent due priority, those whose model is warm here are taken
-- first; a job whose model is
-- warm on another live worker is left to that worker for the queue's warm_wait
-- (default 5 seconds) after it became due, then anyone may take it, so nothing
-- starves; a job with model_required goes only to a worker that has the model warm or
-- lists it as servable.
--
-- A queue with max_running, rate_limit or per-key settings (concurrency_limit, fair_by,
-- key_rate_limit, priority_aging) takes its row lock first, so that the limits hold
-- exactly across concurrent claimers and a fair queue's claims take turns in order;
-- queues without them never take it. The per-key settings send the claim to
-- claim_keyed (39_claim_keyed.sql), which ignores after_* (its order is not the key's)
-- and the warm-model tiebreak (a job is taken in its turn, warm here or not, among
-- those this worker may take: may_take_cold still decides that).
--
-- The id list is built in an ARRAY() sub-select so the planner keeps the partial claim
-- index and the primary key even under a generic plan (a LIMIT parameter otherwise
-- made it estimate 10% of the table and hash-join all of jobs). The guard is the row
-- lock: FOR UPDATE re-checks status = 'queued' on the newest row version and holds
-- the row until commit. The outer UPDATE deliberately repeats no status filter: with
-- one, the planner may fetch the ids through the partial claim index (id is its last
-- column) and scan the whole backlog per claim.
--
-- The UPDATE that claims the locked ids is claim_locked's (above): planned once.
create or replace function pgrun.claim_jobs(
  queue           text,
  worker          text,
  n               integer default 1,
  lease           interval default null,
  models          text[] default null,
  kinds           text[] default null,
  after_priority  smallint default null,
  after_run_at    timestamptz default null,
  after_id        bigint default null
)
returns setof pgrun.jobs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now     timestamptz := pgrun.clock();
  v_left    integer := n;
  v_got     integer;
  v_total   integer := 0;
  v_pass    text;
  v_running integer;
  q         pgrun.queues;
  v_ids     bigint[];
  v_servable text[];
  v_wait    interval;
  v_blocked boolean;
  v_top     smallint;
  v_tenant  text;
  v_keyed   boolean;
  v_q       pgrun.queues;
  v_cks     text[];
begin
  perform pgrun.check_queue_name(queue);
  perform pgrun.check_worker_id(worker); -- the format, required of every session
  perform pgrun.check_worker_login(worker);
  if n is null or n < 1 or n > 10000 then
    raise exception 'claim size % is not valid', coalesce(n::text, 'NULL')
      using errcode = '22023', hint = 'Claim 1 to 10000 jobs per call.';
  end if;
  perform pgrun.check_interval('lease', lease, pgrun.max_lease());
  if (after_id is null) <> (after_priority is null) or (after_id is null) <> (after_run_at is null) then
    raise exception 'after_priority, after_run_at and after_id go together'
      using errcode = '22023', hint = 'Pass all three (the key of the last job claimed) or none.';
  end if;

  -- The tenant mode: a worker login mapped to a tenant claims that tenant's jobs only.
  if pgrun.tenant_mode() and not pgrun.sees_all() then
    v_tenant := pgrun.caller_tenant();
  end if;

  -- The queue's policy; then, in one look-up, the operator's control of this
  -- worker's host and what the worker can serve.
  select * into q from pgrun.queues x where x.name = claim_jobs.queue;
  select w.servable,
         exists (select 1 from pgrun.worker_control c
                 where c.host = w.host and c.queue in (claim_jobs.queue, '*') and c.mode <> 'on')
  into v_servable, v_blocked
  from pgrun.workers w where w.id = worker;
  if q.paused or v_blocked then
    return;
  end if;
  lease := coalesce(lease, q.default_lease, pgrun.default_lease());
  v_wait := coalesce(q.warm_wait, interval '5 seconds');
  -- Model affinity: advertise what is warm here (written only when it changed).
  if models is not null then
    update pgrun.workers w set models = claim_jobs.models
    where w.id = worker and w.models is distinct from claim_jobs.models;
  end if;

  v_keyed := q.concurrency_limit is not null or q.fair_by is not null or q.key_rate_limit is not null
             or q.priority_aging is not null;
  -- A per-key rate alone: the claim chooses and claims its jobs at once with other
  -- claims, and takes the queue's row lock only to count them (37_key_rates.sql). Its
  -- claims share the fairness cursor's row, which set_queue makes (a queue without it,
  -- from before, claims under the lock once, which makes it).
  if v_keyed and pgrun.claim_optimistic(q)
     and exists (select 1 from pgrun.fair_cursors c where c.queue = claim_jobs.queue) then
    begin
      v_ids := pgrun.claim_keyed(q, worker, v_left, lease, v_now, kinds, v_tenant, models, v_servable, v_wait,
                                 optimistic => true);
      if cardinality(v_ids) > 0 then
        -- Only the ids and keys are kept: the rows are read again once the claim
        -- stands (a claim of 10,000 jobs with large arguments held as an array of
        -- rows could pass the 1 GB a value may take).
        select coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.concurrency_key), '{}')
        into v_ids, v_cks
        from pgrun.claim_locked(v_ids, worker, v_now, lease) c;
        -- Counted under the queue's lock, with the queue as it is now: a setting
        -- changed since this claim read it, or jobs that no longer fit their windows,
        -- undo the claim (this block's subtransaction) and make it again below.
        select * into v_q from pgrun.queues x where x.name = claim_jobs.queue for update;
        if v_q is distinct from q or not pgrun.key_rate_take(q, v_cks, v_now) then
          raise exception 'the claim no longer fits its keys'' rate windows' using errcode = 'PR001';
        end if;
        return query select * from pgrun.jobs_by_ids(v_ids);
      end if;
      return;
    exception when sqlstate 'PR001' then
      v_ids := null;
    end;
  end if;
  -- A queue with a limit or aging: its claims run one at a time (claim_exclusive).
  if pgrun.claim_exclusive(q) then
    select * into q from pgrun.queues x where x.name = claim_jobs.queue for update;
    if q.paused then
      return; -- paused while this claim waited for the lock
    end if;
    if q.max_running is not null then
      select count(*) into v_running from pgrun.jobs r
      where r.status = 'running' and r.queue = claim_jobs.queue;
      v_left := least(v_left, q.max_running - v_running);
    end if;
    if q.rate_limit is not null then
      if q.rate_window_start is null or v_now >= q.rate_window_start + pgrun.rate_period(q.rate_period) then
        q.rate_window_start := v_now;
        q.rate_window_count := 0;
      end if;
      v_left := least(v_left, q.rate_limit - q.rate_window_count);
    end if;
    if v_left <= 0 then
      return;
    end if;
  end if;

  if v_keyed then
    -- Per-key flow control (39_claim_keyed.sql), under the queue's row lock unless the
    -- queue has fairness alone: it chooses and locks the jobs. A fair claim's come back
    -- in their round-robin order (a runner starts the jobs of a claim larger than its
    -- free slots in the order they come); the others' in the UPDATE's, as the passes
    -- below return theirs.
    v_ids := pgrun.claim_keyed(q, worker, v_left, lease, v_now, kinds, v_tenant, models, v_servable, v_wait);
    if cardinality(v_ids) > 0 and q.fair_by is null then
      return query select * from pgrun.claim_locked(v_ids, worker, v_now, lease);
      get diagnostics v_total = row_count;
    elsif cardinality(v_ids) > 0 then
      return query
      select c.* from pgrun.claim_locked(v_ids, worker, v_now, lease) c
      join unnest(v_ids) with ordinality u(id, o) on u.id = c.id
      order by u.o;
      get diagnostics v_total = row_count;
    end if;
  else
    -- With models, a first pass ("warm") takes jobs whose model is warm here among
    -- those of the most urgent priority this worker may take; the second pass
    -- ("any") takes any due job in order.
    --
    -- With after_* (the key of the last job this worker claimed, and no models), the
    -- scan resumes after that key instead of starting at the queue's first entry:
    -- the entries before it belong to jobs already claimed, which stay in the index
    -- as dead entries until vacuum removes them, and with a snapshot held somewhere
    -- (a long report, a replica's feedback) vacuum cannot, so a scan from the start
    -- steps over every job claimed since. A first pass ("urgent") still looks at the
    -- more urgent priorities from their start; a job that became due below the key
    -- within its priority is found by a claim without after_*: the runner drops the
    -- key when a notification names a lower one, and every ten seconds or so sends a
    -- one-job claim without it (a sweep) that finds any job left below.
    if coalesce(cardinality(models), 0) > 0 then
      select c.priority into v_top from pgrun.jobs c
      where c.status = 'queued' and c.queue = claim_jobs.queue and c.run_at <= v_now
        and (kinds is null or c.kind = any (kinds))
        and (v_tenant is null or c.tenant = v_tenant)
        and (c.model = any (models) or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, v_servable,
                 (select pgrun.models_warm_elsewhere(worker, v_now)), v_now, v_wait))
      order by c.priority, c.run_at, c.id
      limit 1;
    end if;
    -- Resuming needs claims in key order: with a model warm here, the warm pass takes
    -- jobs out of it, so the key is not used. A worker with a model cache and nothing
    -- warm passes an empty list, and resumes like one without (the Go runner does).
    foreach v_pass in array case when v_top is not null then array['warm', 'any']
                                 when after_id is not null and coalesce(cardinality(models), 0) = 0
                                   then array['urgent', 'after']
                                 else array['any'] end loop
      -- One statement per pass, so that each keeps its own index range.
      if v_pass = 'warm' then
        v_ids := array(
          select c.id from pgrun.jobs c
          where c.status = 'queued' and c.queue = claim_jobs.queue and c.run_at <= v_now
            and (kinds is null or c.kind = any (kinds))
            and (v_tenant is null or c.tenant = v_tenant)
            and c.priority = v_top and c.model = any (models)
          order by c.priority, c.run_at, c.id
          limit v_left
          for update skip locked);
      elsif v_pass = 'urgent' then
        continue when after_priority <= 0;
        v_ids := array(
          select c.id from pgrun.jobs c
          where c.status = 'queued' and c.queue = claim_jobs.queue and c.run_at <= v_now
            and (kinds is null or c.kind = any (kinds))
            and (v_tenant is null or c.tenant = v_tenant)
            and c.priority < after_priority
            and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, v_servable,
                 (select pgrun.models_warm_elsewhere(worker, v_now)), v_now, v_wait))
          order by c.priority, c.run_at, c.id
          limit v_left
          for update skip locked);
      elsif v_pass = 'after' then
        v_ids := array(
          select c.id from pgrun.jobs c
          where c.status = 'queued' and c.queue = claim_jobs.queue and c.run_at <= v_now
            and (kinds is null or c.kind = any (kinds))
            and (v_tenant is null or c.tenant = v_tenant)
            and (c.priority, c.run_at, c.id) > (after_priority, after_run_at, after_id)
            and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, v_servable,
                 (select pgrun.models_warm_elsewhere(worker, v_now)), v_now, v_wait))
          order by c.priority, c.run_at, c.id
          limit v_left
          for update skip locked);
      else
        v_ids := array(
          select c.id from pgrun.jobs c
          where c.status = 'queued' and c.queue = claim_jobs.queue and c.run_at <= v_now
            and (kinds is null or c.kind = any (kinds))
            and (v_tenant is null or c.tenant = v_tenant)
            and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, v_servable,
                 (select pgrun.models_warm_elsewhere(worker, v_now)), v_now, v_wait))
          order by c.priority, c.run_at, c.id
          limit v_left
          for update skip locked);
      end if;
      -- Nothing to claim in this pass: no UPDATE, whose statement trigger
      -- (jobs_dispatch) would run even for no rows.
      continue when cardinality(v_ids) = 0;
      return query select * from pgrun.claim_locked(v_ids, worker, v_now, lease);
      get diagnostics v_got = row_count;
      v_left := v_left - v_got;
      v_total := v_total + v_got;
      exit when v_left = 0;
    end loop;
  end if;

  -- A claim that took nothing leaves the window as it was: an idle worker's claim does
  -- not open one (it would end, for no start, while the first jobs wait for it).
  if q.rate_limit is not null and v_total > 0 then
    update pgrun.queues x set rate_window_start = q.rate_window_start,
      rate_window_count = q.rate_window_count + v_total
    where x.name = claim_jobs.queue;
  end if;
end;
$$;

-- renew_leases extends the leases of worker's running jobs to now + lease (NULL: each
-- job's queue default_lease, else default_lease(), 30 seconds) and returns the ids it
-- extended. With ids NULL every running job of the worker is renewed; with ids, only
-- those; with claim_ids (the runner passes the claims it holds), only jobs running under one of
-- those claims, so a claim the worker no longer holds (undone by a failover and made
-- again, elsewhere or here) is not kept alive. An id the worker asked for but did not
-- get back is no longer its to run (cancelled, reclaimed after its lease ran out,
-- finished elsewhere): the runner cancels that job's context. worker must be the
-- session login's (check_worker_login); lease is at most max_lease().
create or replace function pgrun.renew_leases(
  worker     text,
  ids        bigint[] default null,
  lease      interval default null,
  claim_ids  uuid[] default null
)
returns setof bigint
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now timestamptz := pgrun.clock();
begin
  perform pgrun.check_worker_id(worker); -- the format, required of every session
  perform pgrun.check_worker_login(worker);
  perform pgrun.check_interval('lease', lease, pgrun.max_lease());
  -- By EXECUTE, so that it is planned for each call with its arguments: "$4 is null or
  -- j.id = any ($4)" has no generic plan that reads by key, which a plan made once
  -- needs (claim_locked says why). It runs once per lease third, not per job.
  return query execute
  'update pgrun.jobs j
   set lease_expires_at = $1 + coalesce($2,
         (select q.default_lease from pgrun.queues q where q.name = j.queue), pgrun.default_lease()),
       lease_length = coalesce($2,
         (select q.default_lease from pgrun.queues q where q.name = j.queue), pgrun.default_lease())
   where j.status = ''running'' and j.claimed_by = $3
     and ($4::bigint[] is null or j.id = any ($4))
     and ($5::uuid[] is null or j.claim_id = any ($5))
   returning j.id'
  using v_now, lease, worker, ids, claim_ids;
end;
$$;

-- claim_token is job id's claim token (claim_id) for a reader who may see it: the
-- login that registered the worker holding the claim, an administrator, or the
-- engine's session; NULL for anyone else, and for a job never claimed. The column
-- itself is readable by administrators only (90_privileges.sql): a token is what a
-- handler keys its side effects on and presents with every call on its job.
create or replace function pgrun.claim_token(id bigint)
returns uuid
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  j pgrun.jobs;
begin
  select * into j from pgrun.jobs x where x.id = claim_token.id;
  if j.claim_id is null then
    return null;
  end if;
  if exists (select 1 from pgrun.workers w where w.id = j.claimed_by and w.login_role = session_user)
     or pgrun.sees_all() then
    return j.claim_id;
  end if;
  return null;
end;
$$;

-- may_take_cold decides whether a worker may take a job (its model, model_required
-- and run_at) in the pass over jobs whose model is not warm here (see claim_jobs):
-- models are the worker's warm models, servable the ones it may load, warm_elsewhere
-- the models warm on other live workers (models_warm_elsewhere). A plain expression
-- with its body bound when it is created (no SET clause, which would stop it), so the
-- claim's scan inlines it and pays for the comparisons only. It used to look the other
-- workers up itself, once per queued job the scan passed: a worker with no model warm
-- spent 7.6 s on one claim of a queue holding 100,000 young jobs of a model warm on
-- another worker. The claim now reads the other workers once, only when it meets a
-- job with a model.
create or replace function pgrun.may_take_cold(
  model          text,
  model_required boolean,
  run_at         timestamptz,
  models         text[],
  servable       text[],
  warm_elsewhere text[],
  at             timestamptz,
  warm_wait      interval
)
returns boolean
language sql
immutable
parallel safe
return model is null
    or ((not model_required or model = any (coalesce(servable, '{}')) or model = any (coalesce(models, '{}')))
        and (run_at <= at - warm_wait or not (model = any (coalesce(warm_elsewhere, '{}')))));

-- models_warm_elsewhere lists the models warm on live running workers other than
-- worker: a warm_wait job of one of them is left to its worker (may_take_cold).
-- PL/pgSQL, not SQL, as claim_pick (38_claim_keys.sql) says: every claim of a queue
-- with flow control per key calls it, and a SQL function's statement was planned
-- again at each call (0.2 ms a claim, with no worker to read).
create or replace function pgrun.models_warm_elsewhere(worker text, at timestamptz)
returns text[]
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  return array(select distinct m from pgrun.workers w cross join unnest(w.models) m
               where w.id <> worker and w.state = 'running' and pgrun.worker_alive(w, at)
                 and m is not null);
end;
$$;

-- claim_job is the one-job form of claim_jobs, for simple workers in any language: it
-- claims the next due job of queue for worker (of the given kinds; NULL: any) and
-- returns it running, or no row. The claim's lease is the row's lease_length; renew
-- every third of it (renew_leases), and present id, attempt and claim_id to every
-- later call.
create or replace function pgrun.claim_job(
  queue   text,
  worker  text,
  kinds   text[] default null,
  lease   interval default null
)
returns setof pgrun.jobs
language sql
set search_path = pgrun, pg_catalog
as $$
  select * from pgrun.claim_jobs(queue, worker, 1, lease, null, kinds)
$$;

-- jobs_room_made wakes the claimers of a queue with max_running or concurrency_limit
-- when an UPDATE statement takes some of its jobs out of running (completed, failed,
-- cancelled, put back, reclaimed): one notification per queue and statement, sent at
-- commit, when the room is there to claim. Without it a runner whose claim came back
-- short at the limit asked again only at its next poll (a second by default): it
-- cannot ask when its own job finishes, since the claim would run before the
-- completion commits and still count the job, and it hears nothing of its peers'
-- completions. A statement that moved nothing out of running, or a database with no
-- such queue, costs one look at the small queues table. (A rate limit makes room as
-- time passes, not as jobs finish: its claimers keep asking as their own jobs finish,
-- runner/fetcher.go.) The ephemeral queues' completions delete instead; complete_jobs
-- wakes their claimers itself.
create or replace function pgrun.jobs_room_made()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
-- The planner's own choices, whatever the UPDATE that fired it pinned (claim_locked).
set plan_cache_mode = auto
set enable_seqscan = on
set enable_nestloop = on
as $$
begin
  if not exists (select 1 from pgrun.queues x where pgrun.announces_room(x.max_running, x.concurrency_limit)) then
    return null;
  end if;
  -- Not running now, and claimed once (claimed_by is never cleared): mostly jobs this
  -- statement took out of running; a redrive of a failed job also passes, and costs a
  -- claim that finds the limit as it was.
  perform pg_notify('pgrun_jobs', r.queue)
  from (select distinct n.queue from left_new n
        where n.status <> 'running' and n.claimed_by is not null
          and exists (select 1 from pgrun.queues x
                      where x.name = n.queue and pgrun.announces_room(x.max_running, x.concurrency_limit))) r;
  return null;
end;
$$;

-- Per statement, as jobs_dispatch, whose transition table it shares (PostgreSQL keeps
-- one per table and event for all the statement's triggers).
select pgrun.ensure_ddl('trigger', 'jobs_room_made', 'pgrun.jobs', $ddl$
create or replace trigger jobs_room_made
  after update on pgrun.jobs
  referencing new table as left_new
  for each statement
  execute function pgrun.jobs_room_made();
$ddl$);
