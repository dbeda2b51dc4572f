-- 37_key_rates.sql: the per-key rate windows (key_rate_limit per key_rate_period) the
-- claim counts its jobs in, pgrun.key_rate_windows: one row a key, its window's start
-- and how many of its jobs were claimed since. claim_keyed (39_claim_keyed.sql) reads
-- them (key_limits) to choose, and counts what it chose (key_windows_count).
--
-- A queue with a per-key rate and nothing else that makes its claims run one at a
-- time (claim_optimistic) chooses and claims its jobs at once, as a plain queue does,
-- and takes the queue's row lock only to count them (key_rate_take): the claim of the
-- jobs (claim_locked, half the claim's time) no longer waits behind another claim's.
-- A claim whose jobs no longer fit their windows by then (a claim that committed in
-- between took the room it saw) is undone and made again under the lock, as every
-- claim of such a queue was before (claim_jobs).

-- claim_optimistic says whether queue q's claims choose and claim their jobs before
-- they take its row lock, and count them under it (key_rate_take): a per-key rate, and
-- no other setting that needs the lock for the whole claim (claim_exclusive: the
-- running jobs a concurrency_limit or max_running counts, the queue's rate window, the
-- order aging reads) or fairness (whose turns are the claim's order).
create or replace function pgrun.claim_optimistic(q pgrun.queues)
returns boolean
language plpgsql
immutable
set search_path = pgrun, pg_catalog
as $$
begin
  return q.key_rate_limit is not null and q.concurrency_limit is null and q.max_running is null
     and q.rate_limit is null and q.priority_aging is null and q.fair_by is null;
end;
$$;

-- key_windows_prune_due says whether a claim at at prunes its queue's quiet windows
-- (key_windows_count's prune), the queue's last prune having been at pruned_at (NULL:
-- never): once a second, or when the clock went back. A plain expression, inlined.
create or replace function pgrun.key_windows_prune_due(pruned_at timestamptz, at timestamptz)
returns boolean
language sql
immutable
parallel safe
return pruned_at is null or at >= pruned_at + interval '1 second' or at < pruned_at;

-- key_windows_count counts a claim's jobs in their keys' rate windows in queue q at
-- at: keys are the claim's keys, counts a map of those that took more than one job
-- (the others took one), tids the rows of their windows as the claim read them (a
-- key without a row there gets one). With prune, it first deletes the windows of keys
-- gone quiet. Called under the queue's row lock (the claims of a queue count one at a
-- time).
create or replace function pgrun.key_windows_count(
  q      pgrun.queues,
  at     timestamptz,
  keys   text[],
  counts jsonb,
  tids   tid[],
  prune  boolean
)
returns void
language plpgsql
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_variable
begin
  -- Windows of keys gone quiet (ended a minute ago or more), oldest first, 1,000 at
  -- most, by one claim a second (prune). A window that ended more recently stays: its
  -- key's next claim resets it in place (a HOT update of a half-full page). Deleting
  -- every ended window at every claim made each claim of a busy queue delete and
  -- insert again the windows of the keys it took, and step over their dead index
  -- entries: 1.9 ms a claim of 100 over 1,000 keys.
  if prune then
    delete from pgrun.key_rate_windows w
    where (w.queue, w.key) in (select x.queue, x.key from pgrun.key_rate_windows x
                               where x.queue = q.name
                                 and x.window_start <= at - pgrun.rate_period(q.key_rate_period) - interval '1 minute'
                                 and x.window_start > '-infinity' -- key_rate_windows_start_idx's predicate (0029)
                               order by x.window_start limit 1000);
  end if;
  -- The windows that exist are counted by an UPDATE, the rest inserted: an upsert
  -- locks each conflicting row before it updates it, a second write a key. Only the
  -- claims of this queue, under its row lock, write its windows, so no window appears
  -- or moves between the look and the write; the ON CONFLICT stays as the guard that
  -- keeps the count exact if one did (a row the claim read before it took the lock,
  -- since updated, is not seen by the UPDATE: its key goes to the upsert). The rows
  -- are updated by address: every set-wise form was planned badly by some database's
  -- generic plan: joined to the keys it read every window of the queue, or matched the
  -- keys pairwise (360,000 comparisons, 69 ms a claim of 600); with the keys as an
  -- array it filtered every window of the queue by them (11 ms a claim). (A check of
  -- the queue in the UPDATE made its generic plan read the queue's every window by
  -- primary key instead of the rows by address.)
  with up as (
    update pgrun.key_rate_windows w
    set window_start = case when w.window_start + pgrun.rate_period(q.key_rate_period) > at then w.window_start
                            else at end,
        count = case when w.window_start + pgrun.rate_period(q.key_rate_period) > at
                     then w.count + coalesce((counts ->> w.key)::integer, 1)
                     else coalesce((counts ->> w.key)::integer, 1) end
    where w.ctid = any (tids)
    returning w.key
  )
  insert into pgrun.key_rate_windows as w (queue, key, window_start, count)
  select q.name, k.k, at, coalesce((counts ->> k.k)::integer, 1)
  from unnest(keys) k(k) where not exists (select 1 from up where up.key = k.k)
  on conflict (queue, key) do update
  set window_start = case when w.window_start + pgrun.rate_period(q.key_rate_period) > at then w.window_start
                          else excluded.window_start end,
      count = case when w.window_start + pgrun.rate_period(q.key_rate_period) > at then w.count + excluded.count
                   else excluded.count end;
end;
$$;

-- key_rate_take is the count of a claim of queue q (claim_optimistic) that chose and
-- claimed its jobs before it took the queue's row lock: called under that lock, with
-- the jobs' concurrency keys cks, it reads each key's window again (every claim that
-- counted before committed: the lock is held to the commit) and, if the jobs fit,
-- counts them and returns true; if one key's do not, it counts nothing and returns
-- false (claim_jobs then undoes the claim and makes it again under the lock). It
-- prunes the windows of keys gone quiet once a second, as claim_keyed does.
create or replace function pgrun.key_rate_take(q pgrun.queues, cks text[], at timestamptz)
returns boolean
language plpgsql
set search_path = pgrun, pg_catalog
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_variable
declare
  v_fit       boolean;
  v_keys      text[];
  v_counts    jsonb;
  v_tids      tid[];
  v_pruned_at timestamptz;
  v_prune     boolean := false;
begin
  select coalesce(bool_and(c.n <= r.room), true), coalesce(array_agg(r.key), '{}'),
         coalesce(jsonb_object_agg(r.key, c.n) filter (where c.n > 1), '{}'),
         coalesce(array_agg(r.window_tid) filter (where r.window_tid is not null), '{}')
  into v_fit, v_keys, v_counts, v_tids
  from (select u.k, count(*)::integer as n from unnest(cks) u(k) where u.k is not null group by u.k) c
  join pgrun.key_limits(q, cks, at) r on r.key = c.k;
  if not v_fit then
    return false;
  end if;
  select c.pruned_at into v_pruned_at from pgrun.fair_cursors c where c.queue = q.name;
  if pgrun.key_windows_prune_due(v_pruned_at, at) then
    v_prune := true;
    -- The cursor's row is a hint the claims share (claim_keyed): not waited for.
    update pgrun.fair_cursors c set pruned_at = at
    where c.queue = q.name
      and c.queue in (select x.queue from pgrun.fair_cursors x where x.queue = q.name for update skip locked);
  end if;
  perform pgrun.key_windows_count(q, at, v_keys, v_counts, v_tids, v_prune);
  return true;
end;
$$;
