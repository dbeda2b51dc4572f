-- 38_claim_keys.sql: the pieces of the claim of a queue with flow control per key
-- (claim_jobs in 30_claim.sql sends it to claim_keyed, 39_claim_keyed.sql, which puts
-- them together): fairness across keys (fair_by), per-key limits (concurrency_limit,
-- key_rate_limit) and priority aging (priority_aging). Queues with none of them never
-- come here. docs/operations.md ("Fairness", "Per-key rate limits", "Priority aging")
-- documents the rules; these files say how the claim keeps them without reading the
-- backlog.
--
-- A claim of a queue with a limit (per key or for the whole queue) or aging holds the
-- queue's row lock (claim_jobs takes it, claim_exclusive says when), so those claims
-- run one at a time: the per-key windows, the queue's window and the counts of running
-- jobs per key are exact across runners. A claim of a queue with fairness alone does
-- not: its walk locks each job it finds (FOR UPDATE SKIP LOCKED), so two claims in
-- flight at once never take one job and the second takes each key's next job; they
-- share the fairness cursor as a hint, written by whichever claim holds its row (see
-- claim_keyed). The jobs chosen are then locked FOR UPDATE SKIP LOCKED (a job locked
-- by something else, a cancel, is left for a later claim) and claimed by claim_locked.

-- claim_exclusive says whether the claims of queue q run one at a time under its row
-- lock: when it has a limit, which each claim must see every other's use of (per key:
-- concurrency_limit, key_rate_limit; for the queue: max_running, rate_limit), or aging
-- (whose claims read the queue's front in one order: two at once would pick the same
-- jobs). A queue with fairness alone, or with none of these, claims concurrently. Under
-- the lock, a fair queue's claims ran one at a time and the work of each claim's
-- UPDATE waited behind the one before: on two cores, 0.58 of the plain queue's rate.
create or replace function pgrun.claim_exclusive(q pgrun.queues)
returns boolean
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  return q.max_running is not null or q.rate_limit is not null or q.concurrency_limit is not null
      or q.key_rate_limit is not null or q.priority_aging is not null;
end;
$$;

-- effective_priority is a queued job's priority as the claim of a queue with
-- priority_aging orders it (lower is more urgent): its priority less one level for
-- every full aging it has been due (run_at before at). NULL aging: the priority. A
-- plain expression, inlined into the statements that order by it.
create or replace function pgrun.effective_priority(priority smallint, run_at timestamptz, at timestamptz, aging interval)
returns bigint
language sql
immutable
parallel safe
return priority - case when aging is null or run_at >= at then 0
                       else floor(extract(epoch from at - run_at) / extract(epoch from aging))::bigint end;

-- claim_levels lists the priorities of queue's queued jobs, most urgent first: a skip
-- scan of the claim index, one probe per level, so it costs the number of levels
-- (few: priorities are small integers) however long the backlog.
create or replace function pgrun.claim_levels(queue text)
returns smallint[]
language plpgsql
stable
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
begin
  return array(
    with recursive levels(p) as (
      select (select j.priority from pgrun.jobs j where j.queue = claim_levels.queue and j.status = 'queued'
              order by j.priority limit 1)
      union all
      select (select j.priority from pgrun.jobs j
              where j.queue = claim_levels.queue and j.status = 'queued' and j.priority > l.p
              order by j.priority limit 1)
      from levels l where l.p is not null
    )
    select l.p from levels l where l.p is not null);
end;
$$;

-- key_limits says, for each concurrency key of keys, how many more of its jobs may start
-- now in queue q: under its concurrency_limit (running jobs with the key count, in any
-- queue, as they always have) and its key_rate_limit (claims in the key's current
-- window, pgrun.key_rate_windows); room is NULL when neither limit is set, never below
-- 0. window_tid is the row of the key's rate window, current or ended (NULL: it has
-- none, or the queue no key_rate_limit), which the claim counts its jobs in (by row
-- address, as claim_keyed says) without a look of its own. The running jobs are
-- counted for all the keys at once, through jobs_running_key_idx; each key's window is
-- read by its primary key (a lateral probe): joined as a set, the planner's generic
-- plan read the queue's every window through key_rate_windows_start_idx for each claim
-- and matched them key by key, 3.7 ms a claim of 100 over 1,000 keys, a claim's cost
-- growing with the queue's keys.
create or replace function pgrun.key_limits(q pgrun.queues, keys text[], at timestamptz)
returns table (key text, room integer, window_tid tid)
language plpgsql
stable
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
#variable_conflict use_variable
begin
  if q.concurrency_limit is null then
    -- A per-key rate alone: no count of running jobs, whose join (empty, but joined
    -- all the same) cost a third of this function (0.8 ms for 616 keys).
    return query
    select k.k, case when q.key_rate_limit is not null then greatest(q.key_rate_limit - coalesce(w.count, 0), 0) end,
           w.ctid
    from (select distinct u.k from unnest(keys) u(k) where u.k is not null) k
    left join lateral (
      select w.ctid, case when w.window_start + pgrun.rate_period(q.key_rate_period) > at then w.count end as count
      from pgrun.key_rate_windows w
      where q.key_rate_limit is not null and w.queue = q.name and w.key = k.k
      limit 1) w on true;
    return;
  end if;
  return query
  select k.k, greatest(least(q.concurrency_limit - coalesce(r.n, 0)::integer,
                             q.key_rate_limit - coalesce(w.count, 0)), 0),
         w.ctid
  from (select distinct u.k from unnest(keys) u(k) where u.k is not null) k
  left join (select j.concurrency_key, count(*) as n from pgrun.jobs j
             where j.status = 'running' and j.concurrency_key = any (keys)
             group by j.concurrency_key) r on r.concurrency_key = k.k
  left join lateral (
    select w.ctid, case when w.window_start + pgrun.rate_period(q.key_rate_period) > at then w.count end as count
    from pgrun.key_rate_windows w
    where q.key_rate_limit is not null and w.queue = q.name and w.key = k.k
    limit 1) w on true;
end;
$$;

-- claim_front returns the first look due jobs of queue a worker may take, in the order
-- the queue claims them: priority, run_at, id, or with aging (NULL: none) by
-- effective priority, where levels are the queue's priorities (claim_levels) and each
-- level gives its look oldest due jobs, so the merge is exact without reading a level
-- further than that. rk numbers them in that order. kinds, tenant, models, servable,
-- elsewhere and warm_wait filter as claim_jobs does (may_take_cold); exclude lists
-- jobs this claim already chose. Without aging, from_priority, from_run_at and from_id
-- (the queue's front, claim_keyed says which; NULL: the queue's start) make it start
-- after that position of the queue's order, one index range either way (priorities
-- are never below 0, so the start is the position (-1, -infinity, 0)). With lock (and
-- without aging), the jobs returned are locked as they are read (FOR UPDATE SKIP
-- LOCKED: a job another transaction holds is passed over, one that left the queue
-- since the snapshot is checked on its newest version).
create or replace function pgrun.claim_front(
  queue         text,
  at            timestamptz,
  look          integer,
  levels        smallint[],
  aging         interval,
  kinds         text[],
  tenant        text,
  models        text[],
  servable      text[],
  elsewhere     text[],
  warm_wait     interval,
  exclude       bigint[],
  from_priority smallint default null,
  from_run_at   timestamptz default null,
  from_id       bigint default null,
  lock          boolean default false
)
returns table (rk bigint, id bigint, concurrency_key text, tenant_key text, priority smallint, run_at timestamptz)
language plpgsql
volatile
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
#variable_conflict use_variable
begin
  if levels is null and lock then
    -- The look that locks what it returns (the same statement as the next, FOR
    -- UPDATE SKIP LOCKED): the claim takes its jobs from it without a second look up.
    return query
    select row_number() over (order by c.priority, c.run_at, c.id), c.id, c.concurrency_key, c.tenant,
           c.priority, c.run_at
    from (select c.id, c.concurrency_key, c.tenant, c.priority, c.run_at from pgrun.jobs c
          where c.queue = claim_front.queue and c.status = 'queued' and c.run_at <= at
            and (c.priority, c.run_at, c.id) > (coalesce(from_priority, -1), coalesce(from_run_at, '-infinity'),
                                                coalesce(from_id, 0))
            and (kinds is null or c.kind = any (kinds))
            and (claim_front.tenant is null or c.tenant = claim_front.tenant)
            and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                        elsewhere, at, warm_wait))
            and c.id <> all (exclude)
          order by c.priority, c.run_at, c.id
          limit look
          for update skip locked) c;
  elsif levels is null then
    return query
    select row_number() over (order by c.priority, c.run_at, c.id), c.id, c.concurrency_key, c.tenant,
           c.priority, c.run_at
    from (select c.id, c.concurrency_key, c.tenant, c.priority, c.run_at from pgrun.jobs c
          where c.queue = claim_front.queue and c.status = 'queued' and c.run_at <= at
            and (c.priority, c.run_at, c.id) > (coalesce(from_priority, -1), coalesce(from_run_at, '-infinity'),
                                                coalesce(from_id, 0))
            and (kinds is null or c.kind = any (kinds))
            and (claim_front.tenant is null or c.tenant = claim_front.tenant)
            and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                        elsewhere, at, warm_wait))
            and c.id <> all (exclude)
          order by c.priority, c.run_at, c.id
          limit look) c;
  else
    return query
    select x.rk, x.id, x.concurrency_key, x.tenant, x.priority, x.run_at
    from (select row_number() over (order by pgrun.effective_priority(c.priority, c.run_at, at, aging),
                                             c.priority, c.run_at, c.id) as rk,
                 c.id, c.concurrency_key, c.tenant, c.priority, c.run_at
          from unnest(levels) lv(p)
          cross join lateral (
            select c.id, c.concurrency_key, c.tenant, c.priority, c.run_at from pgrun.jobs c
            where c.queue = claim_front.queue and c.status = 'queued' and c.priority = lv.p and c.run_at <= at
              and (kinds is null or c.kind = any (kinds))
              and (claim_front.tenant is null or c.tenant = claim_front.tenant)
              and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                          elsewhere, at, warm_wait))
              and c.id <> all (exclude)
            order by c.run_at, c.id
            limit look) c) x
    where x.rk <= look;
  end if;
end;
$$;

-- The key walk. A fair claim goes round the keys of a queue's queued jobs in the order
-- of their slots, a key's slot being its 64-bit hash (hashtextextended(key, 0)): the
-- key's index (jobs_fair_key_idx, jobs_fair_tenant_idx) holds the queue's hash, the
-- key's slot and then the claim order (priority, run_at, id), every column of fixed
-- width, so that a probe checks the entries of the page it lands on cheaply (0030 says
-- why that matters). The statements below write those expressions as the index does
-- (the planner matches an index by its expressions) and check the queue and the key
-- again on the row: two queues or two keys whose hashes are equal share a range of the
-- index, and two keys of one slot share a turn of the walk (their jobs in their joint
-- claim order; the chance of any such pair among a million keys is 3 in 100 million).

-- fair_slot_from is the first slot a walk after the key after reads: the slot after
-- after's, the first of all for '' (a walk from the first key), NULL when after's slot
-- is the last (nothing follows it). Inlined.
create or replace function pgrun.fair_slot_from(after text)
returns bigint
language sql
immutable
parallel safe
return case when after = '' then '-9223372036854775808'::bigint
            when hashtextextended(after, 0) = '9223372036854775807'::bigint then null
            else hashtextextended(after, 0) + 1 end;

-- fair_walk returns the next keys of queue's queued jobs after after ('' for the
-- first key), in walk order, at most lim, up to and including upto (NULL: to the last
-- key): by is the key (fair_by: 'concurrency_key' or 'tenant'). A skip scan of the
-- key's index: one probe per key, whatever each key holds. Keys are never empty
-- (enqueue refuses them), so '' names none.
create or replace function pgrun.fair_walk(queue text, by text, after text, upto text, lim integer)
returns text[]
language plpgsql
stable
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
#variable_conflict use_variable
declare
  v_qs   constant bigint := hashtextextended(queue, 0);
  v_from constant bigint := pgrun.fair_slot_from(after);
  v_upto constant bigint := hashtextextended(upto, 0); -- NULL: to the last key
begin
  if by = 'tenant' then
    return array(
      with recursive walk(s, k) as (
        select * from (select hashtextextended(j.tenant, 0), j.tenant from pgrun.jobs j
                       where hashtextextended(j.queue, 0) = v_qs and hashtextextended(j.tenant, 0) >= v_from
                         and j.status = 'queued' and j.tenant is not null and j.queue = fair_walk.queue
                       order by hashtextextended(j.queue, 0), hashtextextended(j.tenant, 0) limit 1) s
        union all
        select x.* from walk w cross join lateral (
          select hashtextextended(j.tenant, 0), j.tenant from pgrun.jobs j
          where hashtextextended(j.queue, 0) = v_qs and hashtextextended(j.tenant, 0) > w.s
            and j.status = 'queued' and j.tenant is not null and j.queue = fair_walk.queue
          order by hashtextextended(j.queue, 0), hashtextextended(j.tenant, 0) limit 1) x
        where v_upto is null or w.s < v_upto
      )
      select w.k from walk w where v_upto is null or w.s <= v_upto limit lim);
  end if;
  return array(
    with recursive walk(s, k) as (
      select * from (select hashtextextended(j.concurrency_key, 0), j.concurrency_key from pgrun.jobs j
                     where hashtextextended(j.queue, 0) = v_qs and hashtextextended(j.concurrency_key, 0) >= v_from
                       and j.status = 'queued' and j.concurrency_key is not null and j.queue = fair_walk.queue
                     order by hashtextextended(j.queue, 0), hashtextextended(j.concurrency_key, 0) limit 1) s
      union all
      select x.* from walk w cross join lateral (
        select hashtextextended(j.concurrency_key, 0), j.concurrency_key from pgrun.jobs j
        where hashtextextended(j.queue, 0) = v_qs and hashtextextended(j.concurrency_key, 0) > w.s
          and j.status = 'queued' and j.concurrency_key is not null and j.queue = fair_walk.queue
        order by hashtextextended(j.queue, 0), hashtextextended(j.concurrency_key, 0) limit 1) x
      where v_upto is null or w.s < v_upto
    )
    select w.k from walk w where v_upto is null or w.s <= v_upto limit lim);
end;
$$;

-- fair_walk_jobs is fair_walk that also finds each key's first due job a worker may
-- take, in the key's claim order (priority, run_at, id: the order of the key's index),
-- in the same probe: the next index entry after the last key's slot whose job is due
-- and passes the filters (claim_key_jobs' own) is the next key's most urgent job. Keys
-- with no such job are passed over within the probe (it reads their index entries, not
-- their rows, for the due check), so each row is a key that has something to give.
-- Without aging only: with it a key's most urgent job is not its first entry. Each job
-- found is locked (FOR UPDATE SKIP LOCKED): where claims run at once (claim_exclusive),
-- a job another claim holds is passed over and the probe finds the key's next. Returns
-- the keys, their jobs and the jobs' concurrency keys as arrays, in walk order.
create or replace function pgrun.fair_walk_jobs(
  queue     text,
  by        text,
  after     text,
  upto      text,
  lim       integer,
  at        timestamptz,
  kinds     text[],
  tenant    text,
  models    text[],
  servable  text[],
  elsewhere text[],
  warm_wait interval,
  out keys  text[],
  out ids   bigint[],
  out cks   text[]
)
language plpgsql
volatile
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
#variable_conflict use_variable
declare
  v_qs   constant bigint := hashtextextended(queue, 0);
  v_from constant bigint := pgrun.fair_slot_from(after);
  v_upto constant bigint := hashtextextended(upto, 0); -- NULL: to the last key
begin
  -- Arrays in walk order (step numbers the keys): one row back, not a row per key.
  if by = 'tenant' then
    with recursive walk(step, s, k, id, ck) as (
      select * from (select 1, hashtextextended(c.tenant, 0), c.tenant, c.id, c.concurrency_key from pgrun.jobs c
       where hashtextextended(c.queue, 0) = v_qs and hashtextextended(c.tenant, 0) >= v_from and c.run_at <= at
         and c.status = 'queued' and c.tenant is not null and c.queue = fair_walk_jobs.queue
         and (kinds is null or c.kind = any (kinds))
         and (fair_walk_jobs.tenant is null or c.tenant = fair_walk_jobs.tenant)
         and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                     elsewhere, at, warm_wait))
       order by hashtextextended(c.queue, 0), hashtextextended(c.tenant, 0), c.priority, c.run_at, c.id
       limit 1 for update skip locked) s
      union all
      select w.step + 1, x.* from walk w cross join lateral (
        select hashtextextended(c.tenant, 0), c.tenant, c.id, c.concurrency_key from pgrun.jobs c
        where hashtextextended(c.queue, 0) = v_qs and hashtextextended(c.tenant, 0) > w.s and c.run_at <= at
          and c.status = 'queued' and c.tenant is not null and c.queue = fair_walk_jobs.queue
          and (kinds is null or c.kind = any (kinds))
          and (fair_walk_jobs.tenant is null or c.tenant = fair_walk_jobs.tenant)
          and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                      elsewhere, at, warm_wait))
        order by hashtextextended(c.queue, 0), hashtextextended(c.tenant, 0), c.priority, c.run_at, c.id
        limit 1 for update skip locked) x
      where (v_upto is null or w.s < v_upto) and w.step < lim
    )
    select coalesce(array_agg(w.k order by w.step), '{}'), coalesce(array_agg(w.id order by w.step), '{}'),
           coalesce(array_agg(w.ck order by w.step), '{}')
    into keys, ids, cks
    from walk w where v_upto is null or w.s <= v_upto;
    return;
  end if;
  with recursive walk(step, s, k, id) as (
    select * from (select 1, hashtextextended(c.concurrency_key, 0), c.concurrency_key, c.id from pgrun.jobs c
     where hashtextextended(c.queue, 0) = v_qs and hashtextextended(c.concurrency_key, 0) >= v_from
       and c.run_at <= at and c.status = 'queued' and c.concurrency_key is not null
       and c.queue = fair_walk_jobs.queue
       and (kinds is null or c.kind = any (kinds))
       and (fair_walk_jobs.tenant is null or c.tenant = fair_walk_jobs.tenant)
       and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                   elsewhere, at, warm_wait))
     order by hashtextextended(c.queue, 0), hashtextextended(c.concurrency_key, 0), c.priority, c.run_at, c.id
     limit 1 for update skip locked) s
    union all
    select w.step + 1, x.* from walk w cross join lateral (
      select hashtextextended(c.concurrency_key, 0), c.concurrency_key, c.id from pgrun.jobs c
      where hashtextextended(c.queue, 0) = v_qs and hashtextextended(c.concurrency_key, 0) > w.s
        and c.run_at <= at and c.status = 'queued' and c.concurrency_key is not null
        and c.queue = fair_walk_jobs.queue
        and (kinds is null or c.kind = any (kinds))
        and (fair_walk_jobs.tenant is null or c.tenant = fair_walk_jobs.tenant)
        and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                    elsewhere, at, warm_wait))
      order by hashtextextended(c.queue, 0), hashtextextended(c.concurrency_key, 0), c.priority, c.run_at, c.id
      limit 1 for update skip locked) x
    where (v_upto is null or w.s < v_upto) and w.step < lim
  )
  select coalesce(array_agg(w.k order by w.step), '{}'), coalesce(array_agg(w.id order by w.step), '{}'),
         coalesce(array_agg(w.k order by w.step), '{}')
  into keys, ids, cks
  from walk w where v_upto is null or w.s <= v_upto;
end;
$$;

-- claim_key_jobs returns, for each key of keys (by: 'concurrency_key' or 'tenant'), its
-- first caps[pos] due jobs a worker may take, other than exclude, in the key's claim
-- order: priority, run_at, id, or with aging by effective priority (levels as for
-- claim_front, each level read no further than the cap). pos is the key's position in
-- keys, rn the job's within its key. One index range per key (and level), read from
-- its start: the key's most urgent jobs come first. Without aging the jobs are locked
-- as they are read (FOR UPDATE SKIP LOCKED), as fair_walk_jobs' are; with it, whose
-- claims hold the queue's lock, a level's look may read more than the cap keeps.
create or replace function pgrun.claim_key_jobs(
  queue     text,
  by        text,
  keys      text[],
  caps      integer[],
  at        timestamptz,
  levels    smallint[],
  aging     interval,
  kinds     text[],
  tenant    text,
  models    text[],
  servable  text[],
  elsewhere text[],
  warm_wait interval,
  exclude   bigint[]
)
returns table (pos bigint, rn bigint, id bigint, concurrency_key text, priority smallint, run_at timestamptz)
language plpgsql
volatile
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
#variable_conflict use_variable
declare
  v_qs constant bigint := hashtextextended(queue, 0);
begin
  -- Four statements, one per key column and order, so that each keeps its index range.
  -- Each bounds its key's slot as a range (s >= slot and s <= slot, the same entries
  -- as s = slot; the key itself is checked on the row) and orders by the index's
  -- columns, so that only the key's index
  -- (jobs_fair_key_idx, jobs_fair_tenant_idx) gives the order: with an equality the
  -- planner drops the key from the order, and the generic plan of a queue whose
  -- statistics saw one big key read a small key's jobs through jobs_claim_idx, the
  -- whole queue's order, filtering out every job of the other keys (85,000 rows, 56
  -- ms a claim, behind a 200,000-job tenant).
  if by = 'tenant' and levels is null then
    return query
    select w.pos, row_number() over (partition by w.pos order by c.priority, c.run_at, c.id), c.id,
           c.concurrency_key, c.priority, c.run_at
    from (select w.*, hashtextextended(w.k, 0) as s from unnest(keys, caps) with ordinality w(k, cap, pos)) w
    cross join lateral (
      select c.id, c.concurrency_key, c.priority, c.run_at from pgrun.jobs c
      where hashtextextended(c.queue, 0) = v_qs and hashtextextended(c.tenant, 0) >= w.s
        and hashtextextended(c.tenant, 0) <= w.s and c.status = 'queued' and c.queue = claim_key_jobs.queue
        and c.tenant = w.k and c.run_at <= at
        and (kinds is null or c.kind = any (kinds))
        and (claim_key_jobs.tenant is null or c.tenant = claim_key_jobs.tenant)
        and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                    elsewhere, at, warm_wait))
        and c.id <> all (exclude)
      order by hashtextextended(c.queue, 0), hashtextextended(c.tenant, 0), c.priority, c.run_at, c.id
      limit w.cap
      for update skip locked) c
    where w.cap > 0;
  elsif by = 'tenant' then
    return query
    select x.pos, x.rn, x.id, x.concurrency_key, x.priority, x.run_at
    from (select w.pos, w.cap,
                 row_number() over (partition by w.pos
                                    order by pgrun.effective_priority(c.priority, c.run_at, at, aging),
                                             c.priority, c.run_at, c.id) as rn,
                 c.id, c.concurrency_key, c.priority, c.run_at
          from (select w.*, hashtextextended(w.k, 0) as s from unnest(keys, caps) with ordinality w(k, cap, pos)) w
          cross join unnest(levels) lv(p)
          cross join lateral (
            select c.id, c.concurrency_key, c.priority, c.run_at from pgrun.jobs c
            where hashtextextended(c.queue, 0) = v_qs and hashtextextended(c.tenant, 0) >= w.s
              and hashtextextended(c.tenant, 0) <= w.s and c.status = 'queued' and c.queue = claim_key_jobs.queue
              and c.tenant = w.k and c.priority = lv.p and c.run_at <= at
              and (kinds is null or c.kind = any (kinds))
              and (claim_key_jobs.tenant is null or c.tenant = claim_key_jobs.tenant)
              and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                          elsewhere, at, warm_wait))
              and c.id <> all (exclude)
            order by hashtextextended(c.queue, 0), hashtextextended(c.tenant, 0), c.priority, c.run_at, c.id
            limit w.cap) c
          where w.cap > 0) x
    where x.rn <= x.cap;
  elsif levels is null then
    return query
    select w.pos, row_number() over (partition by w.pos order by c.priority, c.run_at, c.id), c.id,
           c.concurrency_key, c.priority, c.run_at
    from (select w.*, hashtextextended(w.k, 0) as s from unnest(keys, caps) with ordinality w(k, cap, pos)) w
    cross join lateral (
      select c.id, c.concurrency_key, c.priority, c.run_at from pgrun.jobs c
      where hashtextextended(c.queue, 0) = v_qs and hashtextextended(c.concurrency_key, 0) >= w.s
        and hashtextextended(c.concurrency_key, 0) <= w.s and c.status = 'queued' and c.queue = claim_key_jobs.queue
        and c.concurrency_key = w.k and c.run_at <= at
        and (kinds is null or c.kind = any (kinds))
        and (claim_key_jobs.tenant is null or c.tenant = claim_key_jobs.tenant)
        and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                    elsewhere, at, warm_wait))
        and c.id <> all (exclude)
      order by hashtextextended(c.queue, 0), hashtextextended(c.concurrency_key, 0), c.priority, c.run_at, c.id
      limit w.cap
      for update skip locked) c
    where w.cap > 0;
  else
    return query
    select x.pos, x.rn, x.id, x.concurrency_key, x.priority, x.run_at
    from (select w.pos, w.cap,
                 row_number() over (partition by w.pos
                                    order by pgrun.effective_priority(c.priority, c.run_at, at, aging),
                                             c.priority, c.run_at, c.id) as rn,
                 c.id, c.concurrency_key, c.priority, c.run_at
          from (select w.*, hashtextextended(w.k, 0) as s from unnest(keys, caps) with ordinality w(k, cap, pos)) w
          cross join unnest(levels) lv(p)
          cross join lateral (
            select c.id, c.concurrency_key, c.priority, c.run_at from pgrun.jobs c
            where hashtextextended(c.queue, 0) = v_qs and hashtextextended(c.concurrency_key, 0) >= w.s
              and hashtextextended(c.concurrency_key, 0) <= w.s and c.status = 'queued' and c.queue = claim_key_jobs.queue
              and c.concurrency_key = w.k and c.priority = lv.p and c.run_at <= at
              and (kinds is null or c.kind = any (kinds))
              and (claim_key_jobs.tenant is null or c.tenant = claim_key_jobs.tenant)
              and (c.model is null or pgrun.may_take_cold(c.model, c.model_required, c.run_at, models, servable,
                                                          elsewhere, at, warm_wait))
              and c.id <> all (exclude)
            order by hashtextextended(c.queue, 0), hashtextextended(c.concurrency_key, 0), c.priority, c.run_at, c.id
            limit w.cap) c
          where w.cap > 0) x
    where x.rn <= x.cap;
  end if;
end;
$$;

-- claim_pick chooses, from candidates given as parallel arrays (ids, their concurrency
-- keys cks, their ranks and groups), up to lim jobs in claim order (rank, then group),
-- at most cap per group (NULL: no cap). With check_room, a job whose concurrency key
-- has no room left (key_limits, less the jobs of the key this claim chose already,
-- taken) is passed over, so a key at its limit never holds up the rest. Returns the
-- chosen in claim order.
create or replace function pgrun.claim_pick(
  q           pgrun.queues,
  at          timestamptz,
  check_room  boolean,
  taken       text[],
  ids         bigint[],
  cks         text[],
  ranks       bigint[],
  groups      numeric[],
  cap         integer,
  lim         integer
)
returns table (id bigint, ck text, grp numeric)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_variable
begin
  -- PL/pgSQL, not SQL: a SQL function called from the claim is planned again at every
  -- call (PostgreSQL keeps its plan for one statement only), half a millisecond each.
  return query
  with cand as (
    select u.id, u.ck, u.rk, u.grp, u.o from unnest(ids, cks, ranks, groups) with ordinality u(id, ck, rk, grp, o)
  ),
  rooms as (
    select r.key as ck, r.room - coalesce(t.n, 0)::integer as room
    from pgrun.key_limits(q, (select array_agg(distinct c.ck) from cand c where check_room), at) r
    left join (select t.k, count(*) as n from unnest(taken) t(k) group by t.k) t on t.k = r.key
  ),
  kept as (
    select c.* from (select c.*, row_number() over (partition by c.ck order by c.rk, c.grp, c.o) as krn from cand c) c
    left join rooms r on r.ck = c.ck
    where c.ck is null or r.room is null or c.krn <= r.room
  )
  select k.id, k.ck, k.grp
  from (select k.*, row_number() over (partition by k.grp order by k.rk, k.o) as grn from kept k) k
  where cap is null or k.grn <= cap
  order by k.rk, k.grp, k.o
  limit lim;
end;
$$;
