-- 36_sequences.sql: sequences, strict FIFO per key (docs/operations.md, "Sequences").
-- The jobs of one queue (and tenant) with one sequence_key run one at a time, in id
-- order, across all runners, and nothing here is in the claim: only a sequence's head
-- is ever queued, running or waiting; the jobs behind it are pending (held), and
-- claim_jobs, which reads queued jobs only, never sees them.
--
--   enqueue   the insert trigger (20_enqueue.sql) asks sequence_admit: queued if the
--             sequence is free, else pending behind its head.
--   the head  a sleep (queued, due later), a retry with backoff, a retry_later, a lost
--             lease (requeued) or an await (waiting) leave it the head: nothing behind
--             it moves. It ends when it succeeds, is cancelled or skipped, fails for
--             good in a queue whose sequence_on_failure is 'continue', or is deleted
--             (retention, an ephemeral queue's completion); then the lowest id still
--             held is queued, keeping its run_at, or due now if that has passed
--             (sequences_move).
--   failure   a head that fails for good in a 'hold' queue (the default) holds its
--             sequence (sequence_holds) until it is retried (it is the head again),
--             cancelled (cancel_job) or deleted.
--   retry     a job of a sequence that is redriven (failed or cancelled to queued:
--             retry_job, retry_matching, ...) while another job is its sequence's
--             head or hold goes back in line, pending (jobs_sequence_rejoin).
--
-- Every step takes the sequence's transaction-scoped advisory lock (sequence_lock_id)
-- and reads what it decides on in a statement after taking it, so that in READ
-- COMMITTED an enqueue racing the head's end sees either the head or its successor,
-- never neither, and two writers never both make a head. The unique index
-- jobs_sequence_head_idx backs it at any isolation level. A REPEATABLE READ or
-- SERIALIZABLE transaction reads what was committed when it began, so it never makes
-- a head on its own say: it holds what it enqueues and records the sequence in
-- sequence_rechecks, which maintain() settles (recheck_sequences) within a round.
--
-- The handoff: a worker that completes a head (complete_jobs' hand_over) may take its
-- successor at once, held to running under its own claim in the statement that ends
-- the head (sequences_promote), rather than released to queued and claimed: one write
-- of the successor instead of two, and no claim. Only where a claim would have given
-- it to that worker all the same; otherwise it is released as above.
--
-- Children (defer_job, spawn_job) may have a sequence_key: a held child is released
-- only by its sequence, as any job. Workflow nodes cannot (the insert trigger refuses
-- one): the DAG dispatch releases pending nodes by their dependencies.

-- sequence_lock_id is the advisory lock of one sequence: its queue, key and tenant.
-- Two sequences whose hashes collide share a lock, so their moves only wait for each
-- other; they never merge (every decision reads the sequence's own jobs).
create or replace function pgrun.sequence_lock_id(queue text, sequence_key text, tenant text)
returns bigint
language sql
immutable
parallel safe
return hashtextextended('pgrun.sequence:' || coalesce(tenant, '') || ':' || queue || ':' || sequence_key, 0);

-- lock_sequences takes the lock of each sequence named by element i of queues, keys
-- and tenants, until the end of the transaction, in one order (the locks' ids), so
-- that two transactions that move the same sequences never wait on each other in a
-- cycle. A lock already held costs nothing.
-- (PL/pgSQL: PERFORM runs the query to its end; a SQL function returning one value
-- would stop at its first row, its first lock.)
create or replace function pgrun.lock_sequences(queues text[], keys text[], tenants text[])
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pg_advisory_xact_lock(l.id)
  from (select distinct pgrun.sequence_lock_id(s.q, s.k, s.t) as id
        from unnest(queues, keys, tenants) s(q, k, t)
        order by 1) l;
end;
$$;

-- sequence_blocker is what holds sequence (queue, sequence_key, tenant) now: its head
-- (the job that is queued, running or waiting), else the job that holds it failed
-- (sequence_holds, while that job is still failed); NULL if neither, or if it is
-- except_id (a job asking whether it may be the head).
create or replace function pgrun.sequence_blocker(queue text, sequence_key text, tenant text,
                                                  except_id bigint default null)
returns pgrun.jobs
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j pgrun.jobs;
begin
  -- By jobs_sequence_head_idx: its predicate, spelled as the index spells it.
  select * into j from pgrun.jobs h
  where h.queue = sequence_blocker.queue and h.sequence_key = sequence_blocker.sequence_key
    and h.status in ('queued', 'running', 'waiting')
    and h.tenant is not distinct from sequence_blocker.tenant and h.id is distinct from except_id
  limit 1;
  if found then
    return j;
  end if;
  select f.* into j from pgrun.sequence_holds d join pgrun.jobs f on f.id = d.job_id
  where d.queue = sequence_blocker.queue and d.sequence_key = sequence_blocker.sequence_key
    and d.tenant is not distinct from sequence_blocker.tenant and f.status = 'failed'
    and f.id is distinct from except_id;
  return j;
end;
$$;

-- handoff_request is the handoff complete_jobs asked for in the statement running now
-- (the setting pgrun.handoff, which complete_jobs sets before its write and clears
-- after it, whatever the caller set): the worker, the lease (NULL: each queue's
-- default) and the heads named, as an object whose keys are their ids (a lookup per
-- finished job, not a scan of a list); all NULL when none was asked for. The dispatch hands
-- over only for heads that this statement took from running to succeeded under that
-- very worker, so a setting forged in a session can at most hand a worker's own
-- successors to it.
create or replace function pgrun.handoff_request(out worker text, out lease interval, out heads jsonb)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  r jsonb := nullif(current_setting('pgrun.handoff', true), '')::jsonb;
begin
  if r is null then
    return;
  end if;
  worker := r ->> 'worker';
  lease := (r ->> 'lease')::interval;
  heads := r -> 'heads';
end;
$$;

-- handed_jobs returns the jobs the handoff of this transaction's complete_jobs calls
-- gave worker (the setting pgrun.handed), as claim_jobs returns its claims: claim
-- tokens included, which a worker login may not read from pgrun.jobs itself. Only
-- jobs still running under worker, which must be the session login's
-- (check_worker_login): a setting written by hand lists nothing else.
create or replace function pgrun.handed_jobs(worker text)
returns setof pgrun.jobs
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.check_worker_id(worker);
  perform pgrun.check_worker_login(worker);
  return query
  select j.* from pgrun.jobs j
  where j.id = any (string_to_array(trim(both ',' from current_setting('pgrun.handed', true)), ',')::bigint[])
    and j.claimed_by = handed_jobs.worker and j.status::text = 'running';
end;
$$;

-- sequences_promote queues the next job of each sequence named by element i of
-- queues, keys and tenants that has neither a head nor a hold: its lowest id still
-- held, due at its run_at or now, whichever is later. Holds whose job is no longer
-- failed (retried, cancelled, deleted) are cleared first. The claimers of each queue
-- are woken, as jobs_after_insert wakes them. Returns how many jobs it queued. The
-- caller holds the sequences' locks (lock_sequences); headless says it knows that
-- none of them has a head (each one's head just ended, under its lock), which spares
-- a look per sequence.
--
-- hand_kinds and hand_models (the handoff; NULL for none): element i, if its kind is
-- not NULL, is the kind and model of the head of sequence i that just succeeded under
-- hand_worker, the worker of the handoff (handoff_request). That sequence's next job
-- goes to running under that worker instead, a claim of its own (claim_locked, with
-- hand_lease or its queue's default), where claim_jobs would have given it to that
-- worker all the same,
-- with nothing to weigh: it is due; it is of the head's kind and model (the worker ran
-- that one, so it handles the kind and has the model, whose affinity is no other
-- worker's); its queue is not paused and has no max_running, rate_limit, per-key
-- limit, fairness or aging (each a decision claim_jobs makes across the queue's jobs);
-- and no operator's control keeps the worker's host from claiming there. Its id is
-- added to the setting pgrun.handed, and it is not counted among those queued.
create or replace function pgrun.sequences_promote(queues text[], keys text[], tenants text[],
                                                   headless boolean default false,
                                                   hand_kinds text[] default null, hand_models text[] default null,
                                                   hand_worker text default null, hand_lease interval default null)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now   timestamptz := pgrun.clock();
  holds   boolean := exists (select 1 from pgrun.sequence_holds);
  qs      text[];
  fronts  text[];
  n       integer;
  i       integer;
  v_next  bigint[];
  v_cand  bigint[];
  v_candq text[];
  v_stop  text[];
  v_got   bigint[];
  v_hand  bigint[];
  l       record;
begin
  -- (Most sequences never fail for good: then the holds are not looked at.)
  if holds then
    delete from pgrun.sequence_holds d
    using (select distinct s.q, s.k, s.t from unnest(queues, keys, tenants) s(q, k, t)) s
    where d.queue = s.q and d.sequence_key = s.k and d.tenant is not distinct from s.t
      and not exists (select 1 from pgrun.jobs f where f.id = d.job_id and f.status = 'failed');
  end if;
  -- The next job of each sequence, by jobs_sequence_held_idx (then, unless headless,
  -- the head by jobs_sequence_head_idx): their predicates, spelled as the indexes
  -- spell them. The sequence's key is bounded as a range (the same rows as an
  -- equality; the queue stays an equality, so that the range ends the index scan) and
  -- the order names the index's columns: with an equality, the generic plan of a queue
  -- whose statistics saw one long sequence read the whole table for a short one's next
  -- job (a sequential scan, 10 ms a sequence at 20,000 jobs; 26-46 ms for
  -- sequence_admit's look below at each enqueue). The ids go in an array, so that the
  -- UPDATE reads them by primary key (claim_jobs does the same), and it takes only
  -- jobs still pending: one cancelled meanwhile stays cancelled. A sequence named
  -- twice names its next job twice, which changes nothing. The same look tells which
  -- may be handed over (v_cand, with their queues).
  select array_agg(x.id), array_agg(x.id) filter (where x.hand), array_agg(s.q) filter (where x.hand)
  into v_next, v_cand, v_candq
  from unnest(queues, keys, tenants, coalesce(hand_kinds, array_fill(null::text, array[cardinality(queues)])),
              coalesce(hand_models, array_fill(null::text, array[cardinality(queues)]))) s(q, k, t, hk, hm)
  cross join lateral (select x.id, s.hk is not null and x.kind = s.hk and x.model is not distinct from s.hm
                               and x.run_at <= v_now as hand
                      from pgrun.jobs x
                      where x.queue = s.q and x.sequence_key >= s.k and x.sequence_key <= s.k
                        and x.status = 'pending' and x.tenant is not distinct from s.t
                      order by x.queue, x.sequence_key, x.id limit 1) x
  where (headless
         or not exists (select 1 from pgrun.jobs h
                        where h.queue = s.q and h.sequence_key = s.k
                          and h.status in ('queued', 'running', 'waiting') and h.tenant is not distinct from s.t))
    and (not holds
         or not exists (select 1 from pgrun.sequence_holds d
                        where d.queue = s.q and d.sequence_key = s.k and d.tenant is not distinct from s.t));
  -- The handoff: the queues' and the operator's rules once per queue (a queue whose
  -- claims weigh every job, claim_exclusive, or take turns, fair_by), then one claim
  -- per queue (claim_locked, as claim_jobs claims, of jobs still pending): one, unless
  -- the batch spans queues.
  if v_cand is not null and hand_worker is not null then
    v_stop := array(select c.queue from pgrun.workers w join pgrun.worker_control c on c.host = w.host
                    where w.id = hand_worker and c.mode <> 'on');
    for l in
      select coalesce(hand_lease, q.default_lease, pgrun.default_lease()) as lease,
             array(select u.id from unnest(v_cand, v_candq) u(id, queue) where u.queue = g.queue) as ids
      from (select distinct u.queue from unnest(v_candq) u(queue)) g
      left join pgrun.queues q on q.name = g.queue
      where not coalesce(q.paused or pgrun.claim_exclusive(q) or q.fair_by is not null, false)
        and not (g.queue = any (v_stop) or '*' = any (v_stop))
    loop
      select array_agg(c.id) into v_got from pgrun.claim_locked(l.ids, hand_worker, v_now, l.lease, 'pending') c;
      v_hand := v_hand || v_got;
    end loop;
    if v_hand is not null then
      perform set_config('pgrun.handed',
        coalesce(nullif(current_setting('pgrun.handed', true), ''), ',') || array_to_string(v_hand, ',') || ',', true);
    end if;
  end if;
  -- Nothing left to queue (no next job, or each handed over): no UPDATE, whose
  -- statement triggers would run even for no rows.
  if coalesce(cardinality(v_next), 0) <= coalesce(cardinality(v_hand), 0) then
    return 0;
  end if;
  with up as (
    update pgrun.jobs j set status = 'queued', run_at = greatest(j.run_at, v_now)
    where j.id = any (v_next) and not coalesce(j.id = any (v_hand), false)
      -- As text, so that no partial index of pending jobs looks like a way to read them
      -- (succeed_running, 32_transitions.sql, says why).
      and j.status::text = 'pending'
    returning j.queue, j.priority, j.run_at, j.id
  )
  -- The wake-up's payload as jobs_after_insert makes it: no job just queued sorts
  -- before "priority run_at_microseconds id" (runners resuming after a key use it).
  select array_agg(u.queue), array_agg(u.front), coalesce(sum(u.n), 0)
  into qs, fronts, n
  from (select u.queue, count(*) as n,
               format('%s %s %s', min(u.priority), (extract(epoch from min(u.run_at)) * 1000000)::bigint,
                      min(u.id)) as front
        from up u group by u.queue) u;
  for i in 1 .. coalesce(cardinality(qs), 0) loop
    perform pg_notify('pgrun_jobs', qs[i] || ' ' || fronts[i]);
    perform pgrun.queue_readied(qs[i]);
  end loop;
  return n;
end;
$$;

-- sequences_move locks the sequences named by element i of queues, keys and tenants
-- and queues the next job of each that has neither a head nor a hold
-- (sequences_promote). In a REPEATABLE READ or SERIALIZABLE transaction, which may not
-- see a job held after it began, it also records each sequence for maintain() to
-- settle (recheck_sequences), and a promotion that meets a head committed meanwhile
-- (jobs_sequence_head_idx) is left to that recheck. Returns how many jobs it queued.
create or replace function pgrun.sequences_move(queues text[], keys text[], tenants text[])
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.lock_sequences(queues, keys, tenants);
  if current_setting('transaction_isolation') = 'read committed' then
    return pgrun.sequences_promote(queues, keys, tenants);
  end if;
  insert into pgrun.sequence_rechecks (queue, sequence_key, tenant)
  select distinct s.q, s.k, s.t from unnest(queues, keys, tenants) s(q, k, t)
  on conflict (queue, sequence_key, tenant) do nothing;
  begin
    return pgrun.sequences_promote(queues, keys, tenants);
  exception when unique_violation then
    return 0;
  end;
end;
$$;

-- sequence_admit decides the status a new job of sequence (queue, sequence_key,
-- tenant) starts in, under the sequence's lock (held until the enqueue commits):
-- queued, the head, if the sequence has no head, no hold and no held job; pending
-- otherwise. A sequence found with held jobs but no head (left by a REPEATABLE READ
-- transaction, not yet rechecked) has its first held job queued first. In a
-- REPEATABLE READ or SERIALIZABLE transaction the job is always held, and the
-- sequence rechecked by maintain(). Runs as the engine (the insert trigger calls it
-- for the caller): 42501 for a tenant the caller may not touch.
create or replace function pgrun.sequence_admit(queue text, sequence_key text, tenant text)
returns pgrun.job_status
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  q  text := sequence_admit.queue;
  k  text := sequence_admit.sequence_key;
  t  text := sequence_admit.tenant;
begin
  if not pgrun.may_touch(t) then
    raise exception 'a job cannot join a sequence of tenant %', quote_literal(t)
      using errcode = '42501', hint = 'Enqueue your own tenant''s jobs: leave tenant out.';
  end if;
  perform pg_advisory_xact_lock(pgrun.sequence_lock_id(q, k, t));
  if current_setting('transaction_isolation') <> 'read committed' then
    insert into pgrun.sequence_rechecks (queue, sequence_key, tenant) values (q, k, t)
    on conflict (queue, sequence_key, tenant) do nothing;
    return 'pending';
  end if;
  if (pgrun.sequence_blocker(q, k, t)).id is not null then
    return 'pending';
  end if;
  -- By jobs_sequence_held_idx, as sequences_promote reads it (and spelled as it is,
  -- which sequences_promote says why).
  if exists (select 1 from pgrun.jobs x
             where x.queue = q and x.sequence_key >= k and x.sequence_key <= k
               and x.status = 'pending' and x.tenant is not distinct from t) then
    perform pgrun.sequences_promote(array[q], array[k], array[t]);
    return 'pending';
  end if;
  return 'queued';
end;
$$;

-- sequences_ended is jobs_dispatch's part (34_dispatch.sql) for sequences: element i
-- of queues, keys and tenants names the sequence of a job that one UPDATE statement
-- took from its head (queued, running or waiting) or its failed hold to a final state
-- (succeeded, failed, cancelled, skipped); failed are those of them that failed from
-- the head. Each failed one holds its sequence if its queue's sequence_on_failure is
-- 'hold'; then the other sequences move on: their next job is queued
-- (sequences_promote), or handed over: hand_kinds and hand_models, if not NULL, give
-- for element i the kind and model of a head that succeeded under hand_worker, the
-- worker of the handoff (a NULL kind for the others), whose successor may go to that
-- worker with a lease of hand_lease (sequences_promote). (A held job that was cancelled moves nothing: its head is
-- still there.)
create or replace function pgrun.sequences_ended(queues text[], keys text[], tenants text[], failed bigint[],
                                                 hand_kinds text[] default null, hand_models text[] default null,
                                                 hand_worker text default null, hand_lease interval default null)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
as $$
begin
  perform pgrun.lock_sequences(queues, keys, tenants);
  if failed is not null then
    insert into pgrun.sequence_holds as d (job_id, queue, sequence_key, tenant, held_at)
    select j.id, j.queue, j.sequence_key, j.tenant, pgrun.clock()
    from pgrun.jobs j
    where j.id = any (failed) and j.status = 'failed'
      and coalesce((select q.sequence_on_failure from pgrun.queues q where q.name = j.queue), 'hold') = 'hold'
    on conflict (queue, sequence_key, tenant) do update set job_id = excluded.job_id, held_at = excluded.held_at;
  end if;
  if current_setting('transaction_isolation') = 'read committed' then
    -- Each of these sequences' head (or failed hold) just ended: under the lock, with
    -- jobs_sequence_head_idx, none has another.
    perform pgrun.sequences_promote(queues, keys, tenants, true, hand_kinds, hand_models, hand_worker, hand_lease);
  else
    perform pgrun.sequences_move(queues, keys, tenants);
  end if;
end;
$$;

-- jobs_sequence_rejoin puts a job of a sequence that is being redriven (a final status
-- to queued: retry_job, retry_matching, ...) back in line, pending, when another job is
-- its sequence's head or hold: it runs after that one, before the jobs enqueued after
-- it. A failed head that holds its sequence is retried as the head.
create or replace function pgrun.jobs_sequence_rejoin()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
-- The planner's own choices, whatever the UPDATE that fired it pinned (claim_locked).
set plan_cache_mode = auto
set enable_seqscan = on
set enable_nestloop = on
as $$
begin
  perform pgrun.lock_sequences(array[new.queue], array[new.sequence_key], array[new.tenant]);
  if current_setting('transaction_isolation') <> 'read committed' then
    insert into pgrun.sequence_rechecks (queue, sequence_key, tenant)
    values (new.queue, new.sequence_key, new.tenant)
    on conflict (queue, sequence_key, tenant) do nothing;
    new.status := 'pending';
  elsif (pgrun.sequence_blocker(new.queue, new.sequence_key, new.tenant, new.id)).id is not null then
    new.status := 'pending';
  end if;
  return new;
end;
$$;

select pgrun.ensure_ddl('trigger', 'jobs_sequence_rejoin', 'pgrun.jobs', $ddl$
create or replace trigger jobs_sequence_rejoin
  before update of status on pgrun.jobs
  for each row
  when (new.sequence_key is not null and new.status = 'queued'
        and old.status in ('succeeded', 'failed', 'cancelled', 'skipped'))
  execute function pgrun.jobs_sequence_rejoin();
$ddl$);

-- jobs_sequence_gone moves the sequence of a deleted job that may have been its head
-- or hold (queued, running, waiting or failed): retention, an ephemeral queue's
-- completion, an operator's delete. Per row, with a WHEN that every other deleted row
-- fails at the cost of a comparison: a statement trigger would copy every deleted row
-- of every prune into a transition table.
create or replace function pgrun.jobs_sequence_gone()
returns trigger
language plpgsql
set search_path = pgrun, pg_catalog
set plan_cache_mode = auto
set enable_seqscan = on
set enable_nestloop = on
as $$
begin
  perform pgrun.sequences_move(array[old.queue], array[old.sequence_key], array[old.tenant]);
  return null;
end;
$$;

select pgrun.ensure_ddl('trigger', 'jobs_sequence_gone', 'pgrun.jobs', $ddl$
create or replace trigger jobs_sequence_gone
  after delete on pgrun.jobs
  for each row
  when (old.sequence_key is not null and old.status in ('queued', 'running', 'waiting', 'failed'))
  execute function pgrun.jobs_sequence_gone();
$ddl$);

-- recheck_sequences is maintain()'s step of that name: it settles up to batch
-- sequences that a REPEATABLE READ or SERIALIZABLE transaction moved
-- (sequence_rechecks), oldest first, and returns how many jobs it queued. Rows another
-- round holds are skipped. One look at an empty table when there are none.
create or replace function pgrun.recheck_sequences(batch integer default 1000)
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  qs  text[];
  ks  text[];
  ts  text[];
begin
  if batch is null or batch < 1 or batch > 100000 then
    raise exception 'batch % is not valid', coalesce(batch::text, 'NULL')
      using errcode = '22023', hint = 'Use 1 to 100000 sequences per call.';
  end if;
  with taken as (
    delete from pgrun.sequence_rechecks r
    where r.ctid in (select x.ctid from pgrun.sequence_rechecks x order by x.at limit batch for update skip locked)
    returning r.queue, r.sequence_key, r.tenant
  )
  select array_agg(t.queue), array_agg(t.sequence_key), array_agg(t.tenant) into qs, ks, ts from taken t;
  if qs is null then
    return 0;
  end if;
  return pgrun.sequences_move(qs, ks, ts);
end;
$$;

-- holds_sequence reports whether job id is a failed job holding its sequence: cancel_job
-- cancels such a job (32_transitions.sql, cancel_tree), which lets the sequence go on.
create or replace function pgrun.holds_sequence(id bigint)
returns boolean
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select exists (select 1 from pgrun.sequence_holds d join pgrun.jobs f on f.id = d.job_id
                 where d.job_id = holds_sequence.id and f.status = 'failed')
$$;

-- sequence_hold_reason says why job j is held by its sequence: NULL unless it is a
-- pending job of a sequence (and, in the tenant mode, the caller's), else e.g.
-- "behind job 123 of sequence account:42, which failed for good (retry or cancel it)".
-- What queue_stats counts as held and job_blocker explains.
create or replace function pgrun.sequence_hold_reason(j pgrun.jobs)
returns text
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
declare
  b pgrun.jobs;
begin
  if j.sequence_key is null or j.status is distinct from 'pending' or not pgrun.may_touch(j.tenant) then
    return null;
  end if;
  b := pgrun.sequence_blocker(j.queue, j.sequence_key, j.tenant, j.id);
  if b.id is null then
    return format('next in sequence %s, which has no head: maintain() settles it within a round', j.sequence_key);
  end if;
  return format('behind job %s of sequence %s, which %s', b.id, j.sequence_key,
    case b.status
      when 'failed' then 'failed for good (retry or cancel it)'
      when 'running' then 'is running'
      when 'waiting' then 'is waiting'
      else case when b.run_at > pgrun.clock() then format('is queued until %s', b.run_at) else 'is queued' end
    end);
end;
$$;

-- sequences lists the sequences that hold jobs, of only_queue (NULL: every queue), at most
-- max_rows (1 to 1000) of them: those stopped by a failure first, then the longest.
-- Each row: the sequence's queue and key, its head (or the failed job holding it) and
-- that job's status, how many jobs it holds, and why the first of them waits
-- (sequence_hold_reason). In the tenant mode, the caller's tenant's only. Reads the
-- held jobs through jobs_sequence_held_idx (partial: jobs of no sequence are not in
-- it), so it costs a scan of what is held, not of the queue.
create or replace function pgrun.sequences(only_queue text default null, max_rows integer default 100)
returns table (queue text, sequence_key text, head_id bigint, head_status text, held bigint, reason text)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_all     boolean := not pgrun.tenant_mode() or pgrun.sees_all();
  v_tenant  text := pgrun.caller_tenant();
begin
  if only_queue is not null then
    perform pgrun.check_queue_name(only_queue);
  end if;
  if max_rows is null or max_rows < 1 or max_rows > 1000 then
    raise exception 'max_rows % is not valid', coalesce(max_rows::text, 'NULL')
      using errcode = '22023', hint = 'List 1 to 1000 sequences per call.';
  end if;
  return query
  select g.queue, g.sequence_key, b.id, b.status::text, g.held, pgrun.sequence_hold_reason(f)
  from (select g.*
        from (select x.queue, x.sequence_key, x.tenant, count(*) as held, min(x.id) as first
              from pgrun.jobs x
              where x.sequence_key is not null and x.status = 'pending'
                and (only_queue is null or x.queue = only_queue)
                and (v_all or x.tenant = v_tenant)
              group by x.queue, x.sequence_key, x.tenant) g
        left join pgrun.sequence_holds d
          on d.queue = g.queue and d.sequence_key = g.sequence_key and d.tenant is not distinct from g.tenant
        order by (d.job_id is not null) desc, g.held desc, g.queue, g.sequence_key
        limit max_rows) g
  join pgrun.jobs f on f.id = g.first
  left join lateral pgrun.sequence_blocker(g.queue, g.sequence_key, g.tenant) b on true
  order by coalesce(b.status = 'failed', false) desc, g.held desc, g.queue, g.sequence_key;
end;
$$;
