-- 39_claim_keyed.sql: the claim of a queue with flow control per key, from the pieces
-- of 38_claim_keys.sql (that file says what the claim keeps and how).

-- claim_keyed chooses up to n jobs of queue q (its row locked FOR UPDATE by claim_jobs
-- where claim_exclusive says so, not for fairness alone) for worker at at, under the
-- queue's per-key settings, locks them, counts them in their keys' rate windows, and
-- returns their ids in claim order; claim_jobs claims them (claim_locked) in the same
-- transaction. The filters (kinds, tenant,
-- models, servable, warm_wait) are claim_jobs'. Three ways, by the queue's settings:
--
-- Fair (fair_by): round-robin across the keys of the queue's due jobs, one job per key
-- per round, each key's job its most urgent (priority, run_at, id; with aging,
-- effective priority). The walk starts after the key served last (fair_cursors) and
-- finds the next keys with a skip scan that also finds each key's job (fair_walk_jobs:
-- one probe a key), so it never reads a key's backlog beyond the jobs it takes. A key
-- with nothing to give (at its concurrency or rate limit, nothing due, only kinds this
-- worker does not handle) is passed over, not waited for. Jobs without a key share one
-- turn, between the last key and the first, found by looking through the first
-- keyless_look due jobs of the queue's order: a job without a key that sits behind more
-- keyed jobs than that waits until the front moves (docs/operations.md says so). A
-- claim walks at most walk_budget keys; when more keys than n have something, the first
-- round fills the claim, and later rounds (only once every key was seen) take more of
-- each key that has more. The cursor moves to the key served last, or, if a claim
-- walked its whole budget and served nothing, to the last key it walked.
--
-- Per-key limits without fairness: the queue's order, passing over jobs whose key has
-- no room (key_limits): a little more than the claim's size of the front is looked at
-- first, four times more while that comes back short, up to front_look due jobs. When
-- those are all held by keys at their limit and the claim is still short, it walks the
-- keys with room (from fair_cursors, up to walk_budget keys, back to the first key after
-- the last) and takes their most urgent jobs in the queue's order.
--
-- Aging alone: the queue's order by effective priority, the oldest due jobs of each
-- priority level merged (claim_front), never a scan of a level's backlog.
--
-- Per-key rate windows are counted for the jobs claimed (key_rate_windows), and the
-- windows of keys gone quiet (ended a minute ago or more) pruned by one claim a second,
-- 1,000 at most, oldest first.
--
-- The front. A look at the queue's front in its order (per-key limits without
-- fairness; the keyless turn of a fair claim) starts where the last one left off
-- rather than at the queue's first entry, which after a burst sits behind every job
-- claimed since the last vacuum, dead in the claim index: read from the start, 50,000
-- of them cost every claim 1.6 ms. The queue keeps the position in fair_cursors
-- (front_*; the queue's row lock makes it one for all claimers): per-key limits move
-- it past the jobs the look took from its start on, stopping at the first it passed
-- over (a key without room: the next look sees it again), and starts at the queue's
-- start again at least every front_sweep, so a job that became claimable behind it (a
-- more urgent priority enqueued later, a sequence's job released with its old run_at,
-- a run_at in the past) waits at most that long. The keyless turn of a fair claim
-- moves it past the job it took, or past everything it looked at when it found none,
-- back to the start after the last due job: its turns go round the queue's due jobs.
-- A turn that found none is skipped for keyless_rest (in a queue whose jobs all have
-- a key, every claim that walked past the last key would read keyless_look jobs for
-- nothing). Aging orders by effective priority, not by position, and always looks
-- from the start.
create or replace function pgrun.claim_keyed(
  q         pgrun.queues,
  worker    text,
  n         integer,
  lease     interval,
  at        timestamptz,
  kinds     text[],
  tenant    text,
  models    text[],
  servable  text[],
  warm_wait interval,
  optimistic boolean default false
)
returns bigint[]
language plpgsql
set search_path = pgrun, pg_catalog
-- Planned once (claim_locked says why): its statements read pgrun.jobs by primary key
-- only.
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_variable
declare
  -- How far a claim looks through the queue's front, and how many keys it walks: the
  -- same bound as the per-key look-ahead always had, so a claim's cost is bounded
  -- whatever the backlog (docs/operations.md states both).
  front_look   constant integer := greatest(10 * n, 1000);
  walk_budget  constant integer := greatest(10 * n, 1000);
  -- How far the turn of the jobs without a key looks through the queue's front: it
  -- runs at every pass of the walk over the last key (every claim, when the keys are
  -- few), so it is kept short.
  keyless_look constant integer := 256;
  front_sweep  constant interval := interval '250 milliseconds';
  keyless_rest constant interval := interval '50 milliseconds';
  v_limited    constant boolean := q.concurrency_limit is not null or q.key_rate_limit is not null;
  v_by         constant text := q.fair_by;
  -- A tenant's turn looks this many jobs further for one whose concurrency key has room.
  v_extra      constant integer := case when v_by = 'tenant' and v_limited then 10 else 0 end;
  -- One probe a key finds its job (fair_walk_jobs) unless aging orders a key's jobs or
  -- a tenant's job may wait on its concurrency key.
  v_one_probe  constant boolean := q.priority_aging is null and not (v_by = 'tenant' and v_limited);
  -- A step of the walk asks for as many keys as the claim still needs, times v_mult,
  -- which doubles at each step that did not fill it (keys at their limit give nothing).
  v_mult       integer := 1;
  v_levels     smallint[];
  v_else       text[];
  v_ids        bigint[] := '{}';  -- chosen, in claim order
  v_cks        text[] := '{}';    -- their concurrency keys
  v_fks        text[] := '{}';    -- their fair keys (NULL: the turn of jobs without one)
  c_ids        bigint[];
  c_cks        text[];
  c_rks        bigint[];
  c_grps       numeric[];
  c_pri        smallint[];
  c_run        timestamptz[];
  p_ids        bigint[];
  p_cks        text[];
  p_grps       numeric[];
  p_fks        text[];
  v_chunk      text[];
  v_caps       integer[];
  v_keys       text[] := '{}';    -- fair: the keys served in the first round, in walk order
  v_upos       numeric;           -- fair: the place of the keyless turn among them (NULL: none)
  v_start      text;
  v_after      text;
  v_last       text;
  v_walked     integer := 0;
  v_seen       integer;
  v_look       integer;
  v_want       integer;
  v_got        integer;
  v_phase      integer := 1;
  v_full       boolean := false;
  v_cursor     text;
  v_left       integer;
  v_q          integer;
  v_round      integer := 0;
  v_full_grps  numeric[];
  v_uid        bigint;
  v_uck        text;
  -- The front (see above): where this claim's looks start, and where the next's will.
  v_fp         smallint;
  v_fr         timestamptz;
  v_fi         bigint;
  v_swept_at   timestamptz;
  v_np         smallint;
  v_nr         timestamptz;
  v_ni         bigint;
  v_moved      boolean := false;
  v_keyless_at timestamptz;
  v_next_kl    timestamptz;
  v_pruned_at  timestamptz;
  v_prune      boolean := false;
  v_wkeys      text[];            -- per-key rate: the claim's keys, and each one's count
  v_wcounts    jsonb;
  v_wtids      tid[];
  v_lkeys      text[] := '{}';    -- per-key rate: keys whose window's row key_limits read,
  v_ltids      tid[] := '{}';     -- and the row (NULL: the key has no window)
  v_wready     boolean := false;  -- per-key rate: v_wkeys, v_wcounts and v_wtids are the claim's
  v_locked     boolean := false;  -- the jobs chosen were locked by the look that found them
  v_tight      jsonb;             -- per-key limits without fairness: keys with less room than the look's jobs
  a_ids        bigint[];          -- per-key limits without fairness: the look at the front, in order
  a_cks        text[];
  a_pri        smallint[];
  a_run        timestamptz[];
  v_exclusive  constant boolean := pgrun.claim_exclusive(q);
  v_shared     constant boolean := pgrun.claim_optimistic(q); -- the cursor is shared (see its write)
  v_cursor_row boolean := false;  -- the queue has a row in fair_cursors
begin
  if q.priority_aging is not null then
    v_levels := pgrun.claim_levels(q.name);
  end if;
  v_else := pgrun.models_warm_elsewhere(worker, at);
  if v_by is not null or v_limited then
    select c.key, c.front_priority, c.front_run_at, c.front_id, c.front_swept_at, c.keyless_at, c.pruned_at
    into v_start, v_fp, v_fr, v_fi, v_swept_at, v_keyless_at, v_pruned_at
    from pgrun.fair_cursors c where c.queue = q.name;
    v_cursor_row := found;
    if q.key_rate_limit is not null and not optimistic and pgrun.key_windows_prune_due(v_pruned_at, at) then
      v_prune := true;
      v_pruned_at := at;
    end if;
    v_next_kl := v_keyless_at;
    v_cursor := v_start;
    if v_by is null and (v_swept_at is null or at >= v_swept_at + front_sweep or at < v_swept_at) then
      -- This claim's looks start at the queue's start.
      v_fp := null; v_fr := null; v_fi := null;
      v_swept_at := at;
      v_moved := true;
    end if;
    v_np := v_fp; v_nr := v_fr; v_ni := v_fi;
  end if;

  if v_by is null and not v_limited then
    -- Aging alone: the queue's order by effective priority.
    v_ids := array(select f.id from pgrun.claim_front(q.name, at, n, v_levels, q.priority_aging, kinds, tenant, models,
                                                      servable, v_else, warm_wait, '{}') f order by f.rk);
  elsif v_by is null then
    -- The queue's order, passing over keys without room: a look a little past the
    -- claim's size (keys with room take it all), four times further while it comes
    -- back short, up to front_look.
    v_look := least(n + 16, front_look);
    -- The first look locks what it reads (a claim of it needs no lock pass); a
    -- further look does not (most of what it reads is passed over), nor one with
    -- aging (which reads each priority level that far).
    v_locked := v_levels is null;
    loop
      -- The look, as arrays in the queue's order.
      select coalesce(array_agg(f.id), '{}'), coalesce(array_agg(f.concurrency_key), '{}'),
             coalesce(array_agg(f.priority), '{}'), coalesce(array_agg(f.run_at), '{}')
      into a_ids, a_cks, a_pri, a_run
      from (select f.* from pgrun.claim_front(q.name, at, v_look, v_levels, q.priority_aging, kinds, tenant, models,
                                               servable, v_else, warm_wait, '{}', v_fp, v_fr, v_fi,
                                               lock => v_locked) f order by f.rk) f;
      v_seen := cardinality(a_ids);
      -- Each key's room (key_limits), and the keys with less room than jobs in the look
      -- (v_tight, key to room). With none, which is the rule while no key is near its
      -- limit, the chosen are the look's first n, and this statement also gives their
      -- keys' counts and window rows for the count below (v_wkeys, v_wcounts, v_wtids:
      -- m is a key's jobs among the first n). Done as arrays: the same choice as one
      -- statement of window functions and joins over the look cost twice as much (3 ms
      -- a claim of 600, a tenth of the claim).
      select coalesce(array_agg(r.key), '{}'), coalesce(array_agg(r.window_tid), '{}'),
             coalesce(jsonb_object_agg(r.key, r.room) filter (where r.room < c.cnt), '{}'),
             coalesce(array_agg(r.key) filter (where c.m > 0), '{}'),
             coalesce(jsonb_object_agg(r.key, c.m) filter (where c.m > 1), '{}'),
             coalesce(array_agg(r.window_tid) filter (where c.m > 0 and r.window_tid is not null), '{}')
      into v_lkeys, v_ltids, v_tight, v_wkeys, v_wcounts, v_wtids
      from (select u.k, count(*) as cnt, (count(*) filter (where u.o <= n))::integer as m
            from unnest(a_cks) with ordinality u(k, o) where u.k is not null group by u.k) c
      join pgrun.key_limits(q, a_cks, at) r on r.key = c.k;
      if v_tight = '{}' then
        v_got := least(n, v_seen);
        v_ids := a_ids[1:v_got];
        v_cks := a_cks[1:v_got];
        v_wready := true;
      else
        -- ok: the job's key has room for it (a tight key: its krn-th job of the look,
        -- within its room). The chosen are the first n that are ok; the front moves
        -- past those before the first that is not (v_got: every job up to it was
        -- chosen).
        with k as materialized (
          select k.id, k.ck, k.o, (k.ck is null or not (v_tight ? k.ck) or k.krn <= (v_tight ->> k.ck)::integer) as ok
          from (select u.id, u.ck, u.o, row_number() over (partition by u.ck order by u.o) as krn
                from unnest(a_ids, a_cks) with ordinality u(id, ck, o)) k
        )
        select coalesce(array_agg(x.id order by x.o), '{}'), coalesce(array_agg(x.ck order by x.o), '{}'),
               (select least(coalesce(min(k.o) filter (where not k.ok), v_look + 1) - 1, n, count(*)) from k)
        into v_ids, v_cks, v_got
        from (select k.id, k.ck, k.o from k where k.ok order by k.o limit n) x;
        v_wready := false;
      end if;
      if v_got > 0 then
        v_np := a_pri[v_got]; v_nr := a_run[v_got]; v_ni := a_ids[v_got];
      else
        v_np := null; v_nr := null; v_ni := null;
      end if;
      exit when cardinality(v_ids) >= n or v_seen < v_look or v_look >= front_look;
      v_look := least(4 * v_look, front_look);
      v_locked := false;
    end loop;
    if v_ni is null then
      -- Nothing taken from the front's start: it stays (at the start, after a sweep).
      v_np := v_fp; v_nr := v_fr; v_ni := v_fi;
    end if;
    if cardinality(v_ids) < n and v_seen >= v_look then
      -- The front is held by keys at their limit: walk the keys with room, and take
      -- the most urgent of what they have in the queue's order.
      v_wready := false;
      v_locked := false;
      v_after := coalesce(v_start, '');
      c_ids := '{}'; c_cks := '{}'; c_rks := '{}'; c_pri := '{}'; c_run := '{}';
      v_left := n - cardinality(v_ids);
      loop
        v_want := least(walk_budget - v_walked, (v_left - cardinality(c_ids)) * v_mult);
        v_chunk := pgrun.fair_walk(q.name, 'concurrency_key', v_after, null, v_want);
        if cardinality(v_chunk) > 0 then
          v_walked := v_walked + cardinality(v_chunk);
          v_after := v_chunk[cardinality(v_chunk)];
          v_caps := array(select least(v_left, r.room - coalesce(t.n, 0)::integer)
                          from unnest(v_chunk) with ordinality u(k, o)
                          join pgrun.key_limits(q, v_chunk, at) r on r.key = u.k
                          left join (select t.k, count(*) as n from unnest(v_cks) t(k) group by t.k) t on t.k = u.k
                          order by u.o);
          select c_ids || coalesce(array_agg(k.id), '{}'), c_cks || coalesce(array_agg(k.concurrency_key), '{}'),
                 c_rks || coalesce(array_agg(pgrun.effective_priority(k.priority, k.run_at, at, q.priority_aging)), '{}'),
                 c_pri || coalesce(array_agg(k.priority), '{}'), c_run || coalesce(array_agg(k.run_at), '{}')
          into c_ids, c_cks, c_rks, c_pri, c_run
          from pgrun.claim_key_jobs(q.name, 'concurrency_key', v_chunk, v_caps, at, v_levels, q.priority_aging,
                                    kinds, tenant, models, servable, v_else, warm_wait, v_ids) k;
        end if;
        if cardinality(v_chunk) < v_want then
          v_after := null; -- past the last key: the next walk starts at the first
          exit;
        end if;
        exit when cardinality(c_ids) >= v_left or v_walked >= walk_budget;
        v_mult := least(2 * v_mult, 1024);
      end loop;
      v_cursor := v_after;
      select v_ids || coalesce(array_agg(x.id order by x.e, x.p, x.r, x.id), '{}'),
             v_cks || coalesce(array_agg(x.ck order by x.e, x.p, x.r, x.id), '{}')
      into v_ids, v_cks
      from (select c.* from unnest(c_ids, c_cks, c_rks, c_pri, c_run) c(id, ck, e, p, r)
            order by c.e, c.p, c.r, c.id limit v_left) x;
    end if;
  else
    -- Fair. The first round: one job per key, walking from the cursor.
    v_after := coalesce(v_start, '');
    loop
      v_want := least(walk_budget - v_walked, (n - cardinality(v_ids)) * v_mult);
      if v_one_probe then
        -- Each key with its most urgent job, in one probe a key.
        select w.keys, w.ids, w.cks into v_chunk, c_ids, c_cks
        from pgrun.fair_walk_jobs(q.name, v_by, v_after, case when v_phase = 2 then v_start end, v_want, at,
                                  kinds, tenant, models, servable, v_else, warm_wait) w;
        if v_limited then
          -- Keyed by concurrency key (v_one_probe): a key at its limit gives nothing.
          select coalesce(array_agg(u.id order by u.o), '{}'), coalesce(array_agg(u.ck order by u.o), '{}'),
                 coalesce(array_agg(u.k order by u.o), '{}')
          into p_ids, p_cks, p_fks
          from unnest(v_chunk, c_ids, c_cks) with ordinality u(k, id, ck, o)
          join pgrun.key_limits(q, v_chunk, at) r on r.key = u.k
          where r.room > 0;
        else
          p_ids := c_ids; p_cks := c_cks; p_fks := v_chunk;
        end if;
      else
        v_chunk := pgrun.fair_walk(q.name, v_by, v_after, case when v_phase = 2 then v_start end, v_want);
        if v_by = 'concurrency_key' and v_limited then
          v_caps := array(select least(1, r.room) from unnest(v_chunk) with ordinality u(k, o)
                          join pgrun.key_limits(q, v_chunk, at) r on r.key = u.k order by u.o);
        else
          v_caps := array_fill(1 + v_extra, array[cardinality(v_chunk)]);
        end if;
        select coalesce(array_agg(k.id), '{}'), coalesce(array_agg(k.concurrency_key), '{}'), coalesce(array_agg(k.rn), '{}'),
               coalesce(array_agg(k.pos::numeric), '{}')
        into c_ids, c_cks, c_rks, c_grps
        from pgrun.claim_key_jobs(q.name, v_by, v_chunk, v_caps, at, v_levels, q.priority_aging,
                                  kinds, tenant, models, servable, v_else, warm_wait, '{}') k;
        select coalesce(array_agg(p.id), '{}'), coalesce(array_agg(p.ck), '{}'), coalesce(array_agg(v_chunk[p.grp::integer]), '{}')
        into p_ids, p_cks, p_fks
        from pgrun.claim_pick(q, at, v_limited and v_by = 'tenant', v_cks, c_ids, c_cks, c_rks, c_grps, 1, n) p;
      end if;
      if cardinality(v_chunk) > 0 then
        v_walked := v_walked + cardinality(v_chunk);
        v_after := v_chunk[cardinality(v_chunk)];
        v_last := v_after;
        v_ids := v_ids || p_ids;
        v_cks := v_cks || p_cks;
        v_fks := v_fks || p_fks;
        v_keys := v_keys || p_fks;
      end if;
      if cardinality(v_chunk) < v_want then
        if v_phase = 1 then
          -- Past the last key: the turn of the jobs without one, looked for from the
          -- front. The front then moves past the job taken, or, when the turn found
          -- none, past everything it looked at (keyed jobs, which the walk serves) or
          -- back to the start after the last due job: the turns go round the queue's
          -- due jobs. After a turn that found none, the next waits keyless_rest.
          v_uid := null;
          if v_keyless_at is null or at >= v_keyless_at or at < v_keyless_at - keyless_rest then
            select coalesce(array_agg(f.id order by f.rk) filter (where f.keyless), '{}'),
                   coalesce(array_agg(f.concurrency_key order by f.rk) filter (where f.keyless), '{}'),
                   coalesce(array_agg(f.rk order by f.rk) filter (where f.keyless), '{}'),
                   count(*), (array_agg(f.priority order by f.rk desc))[1], (array_agg(f.run_at order by f.rk desc))[1],
                   (array_agg(f.id order by f.rk desc))[1]
            into c_ids, c_cks, c_rks, v_seen, v_np, v_nr, v_ni
            from (select f.*, (case when v_by = 'tenant' then f.tenant_key else f.concurrency_key end) is null as keyless
                  from pgrun.claim_front(q.name, at, keyless_look, v_levels, q.priority_aging, kinds, tenant, models,
                                         servable, v_else, warm_wait, '{}', v_fp, v_fr, v_fi) f) f;
            select p.id, p.ck into v_uid, v_uck
            from pgrun.claim_pick(q, at, v_limited, v_cks, c_ids, c_cks, c_rks,
                                  array_fill(0::numeric, array[cardinality(c_ids)]), null, 1) p;
            if v_uid is not null then
              select j.priority, j.run_at, j.id into v_np, v_nr, v_ni from pgrun.jobs j where j.id = v_uid;
              v_next_kl := null;
            else
              if v_seen < keyless_look then
                v_np := null; v_nr := null; v_ni := null; -- past the last due job: the next turn starts over
              end if;
              v_next_kl := at + keyless_rest;
            end if;
          end if;
          if v_uid is not null then
            v_upos := cardinality(v_keys) + 0.5;
            v_ids := v_ids || v_uid;
            v_cks := v_cks || v_uck;
            v_fks := v_fks || null::text;
          end if;
          v_phase := 2;
          v_after := '';
          if v_start is null then
            v_full := true;
            exit;
          end if;
        else
          v_full := true;
          exit;
        end if;
      end if;
      exit when cardinality(v_ids) >= n or v_walked >= walk_budget;
      -- Ask further only where a key the walk returns may give nothing (at a limit, or
      -- found by its key alone): in one probe without limits every key returned gives
      -- its job, and asking for more than the claim needs would lock jobs it then
      -- leaves (a claim beside it passes over them, SKIP LOCKED, until it commits).
      if v_limited or not v_one_probe then
        v_mult := least(2 * v_mult, 1024);
      end if;
    end loop;
    if cardinality(v_ids) > n then
      v_ids := v_ids[1:n];
      v_cks := v_cks[1:n];
      v_fks := v_fks[1:n];
    end if;

    -- Later rounds, once every key was seen: more of each key that had one, a
    -- round's share each (the claim's room left over the keys left), in walk order.
    while v_full and cardinality(v_ids) < n and (cardinality(v_keys) > 0 or v_upos is not null) and v_round < 32 loop
      v_round := v_round + 1;
      v_left := n - cardinality(v_ids);
      v_q := ceil(v_left::numeric / (cardinality(v_keys) + case when v_upos is null then 0 else 1 end));
      if cardinality(v_keys) > 0 then
        if v_by = 'concurrency_key' and v_limited then
          v_caps := array(select least(v_q, r.room - coalesce(t.n, 0)::integer)
                          from unnest(v_keys) with ordinality u(k, o)
                          join pgrun.key_limits(q, v_keys, at) r on r.key = u.k
                          left join (select t.k, count(*) as n from unnest(v_cks) t(k) group by t.k) t on t.k = u.k
                          order by u.o);
        else
          v_caps := array_fill(v_q + v_extra, array[cardinality(v_keys)]);
        end if;
      end if;
      -- The round's jobs: each key's next, at most its cap (the key's own query caps
      -- it), and the keyless turn's, numbered from 1 as a key's are; in round order.
      -- A tenant's jobs may wait on their concurrency keys: then claim_pick passes over
      -- those and caps each tenant at its share.
      select coalesce(array_agg(c.id order by c.rk, c.grp), '{}'), coalesce(array_agg(c.ck order by c.rk, c.grp), '{}'),
             coalesce(array_agg(c.rk order by c.rk, c.grp), '{}'), coalesce(array_agg(c.grp order by c.rk, c.grp), '{}')
      into c_ids, c_cks, c_rks, c_grps
      from (select k.rn as rk, k.pos::numeric as grp, k.id, k.concurrency_key as ck
            from pgrun.claim_key_jobs(q.name, v_by, v_keys, v_caps, at, v_levels, q.priority_aging,
                                      kinds, tenant, models, servable, v_else, warm_wait, v_ids) k
            where cardinality(v_keys) > 0
            union all
            select f.rn, v_upos, f.id, f.concurrency_key
            from (select f.*, row_number() over (order by f.rk) as rn
                  from pgrun.claim_front(q.name, at, keyless_look, v_levels, q.priority_aging, kinds, tenant, models,
                                         servable, v_else, warm_wait, v_ids, v_fp, v_fr, v_fi) f
                  where v_upos is not null
                    and (case when v_by = 'tenant' then f.tenant_key else f.concurrency_key end) is null
                  order by f.rk limit v_q + v_extra) f) c;
      if v_limited and v_by = 'tenant' then
        select coalesce(array_agg(p.id), '{}'), coalesce(array_agg(p.ck), '{}'), coalesce(array_agg(p.grp), '{}')
        into p_ids, p_cks, p_grps
        from pgrun.claim_pick(q, at, true, v_cks, c_ids, c_cks, c_rks, c_grps, v_q, v_left) p;
      else
        p_ids := c_ids[1:v_left]; p_cks := c_cks[1:v_left]; p_grps := c_grps[1:v_left];
      end if;
      exit when cardinality(p_ids) = 0;
      v_ids := v_ids || p_ids;
      v_cks := v_cks || p_cks;
      v_fks := v_fks || array(select case when g = v_upos then null else v_keys[g::integer] end
                              from unnest(p_grps) with ordinality u(g, o) order by o);
      -- The keys (and keyless turn) that gave a full share may have more.
      v_full_grps := array(select g from unnest(p_grps) g group by g having count(*) >= v_q);
      if v_upos is not null and not (v_upos = any (v_full_grps)) then
        v_upos := null;
      end if;
      v_keys := array(select v_keys[g::integer] from unnest(v_full_grps) g where g <> coalesce(v_upos, -1) order by g);
      if v_upos is not null then
        v_upos := (select count(*) from unnest(v_full_grps) g where g < v_upos) + 0.5;
      end if;
    end loop;

    -- The cursor: the key served last; when nothing was served and the walk ran out
    -- of budget, the last key walked, so the next claim walks on from there.
    if cardinality(v_ids) > 0 then
      v_cursor := v_fks[cardinality(v_fks)];
    elsif v_walked >= walk_budget then
      v_cursor := v_last;
    end if;
  end if;

  if v_cursor is distinct from v_start or v_moved or v_prune or v_ni is distinct from v_fi
     or v_next_kl is distinct from v_keyless_at then
    if v_cursor_row and (not v_exclusive or v_shared) then
      -- Fairness alone (claim_exclusive): claims run at once, and the cursor is a hint
      -- they share (the sweep and prune times are not theirs). A claim writes it only
      -- if no other claim in flight holds its row (which it holds to its commit, its
      -- UPDATE of the jobs included): waiting for that would make the claims run one
      -- at a time again. A claim that began with the same cursor as one in flight
      -- served the same keys, each one's next job, so the keys still go round in turn,
      -- two jobs a turn while two claims overlap. A per-key rate alone
      -- (claim_optimistic) shares it too, sweep and prune times included: its claims
      -- choose at once and take the queue's lock only to count, and a claim holding
      -- that lock must never wait for the cursor's row held by one waiting for it.
      update pgrun.fair_cursors c
      set key = v_cursor, front_priority = v_np, front_run_at = v_nr, front_id = v_ni, keyless_at = v_next_kl,
          front_swept_at = case when v_shared then v_swept_at else c.front_swept_at end,
          pruned_at = case when v_shared then v_pruned_at else c.pruned_at end
      where c.queue = q.name
        and c.queue in (select x.queue from pgrun.fair_cursors x where x.queue = q.name for update skip locked);
    elsif not v_exclusive then
      insert into pgrun.fair_cursors (queue, key, front_priority, front_run_at, front_id, keyless_at)
      values (q.name, v_cursor, v_np, v_nr, v_ni, v_next_kl)
      on conflict (queue) do nothing;
    else
      insert into pgrun.fair_cursors as c (queue, key, front_priority, front_run_at, front_id, front_swept_at,
                                           keyless_at, pruned_at)
      values (q.name, v_cursor, v_np, v_nr, v_ni, v_swept_at, v_next_kl, v_pruned_at)
      on conflict (queue) do update
      set key = excluded.key, front_priority = excluded.front_priority, front_run_at = excluded.front_run_at,
          front_id = excluded.front_id, front_swept_at = excluded.front_swept_at, keyless_at = excluded.keyless_at,
          pruned_at = excluded.pruned_at;
    end if;
  end if;
  if cardinality(v_ids) = 0 then
    return v_ids;
  end if;
  -- Lock what was chosen (a job locked by something else is left for later): these
  -- are the claim's. No status filter under the lock: with one, the planner reads the
  -- ids through the claim index (claim_locked says why). The locked row is the newest
  -- version, whose status is checked after; OFFSET 0 keeps that check from being
  -- pushed under the lock. A fair claim without aging found every job it chose by a
  -- locking read (fair_walk_jobs, claim_key_jobs: FOR UPDATE SKIP LOCKED, the status
  -- checked on the row's newest version), but for the jobs of the keyless turn
  -- (claim_front, which does not lock; their fair key is NULL): without those, the lock
  -- would read again rows this claim holds already (0.3 ms a claim of 250), and it is
  -- skipped; so it is when per-key limits took the jobs from their first look at the
  -- front, which locked them (v_locked). The claim order rides along with each id
  -- into the lock: locked by "id = any" and joined back to the order after, the
  -- generic plan compared every pair (360,000 for a claim of 600).
  if not v_locked and (v_by is null or q.priority_aging is not null or array_position(v_fks, null) is not null) then
    c_cks := v_cks;
    select coalesce(array_agg(c.id order by c.o), '{}'), coalesce(array_agg(c.concurrency_key order by c.o), '{}')
    into v_ids, v_cks
    from (select c.id, c.concurrency_key, c.status, u.o from unnest(v_ids) with ordinality u(id, o)
          join pgrun.jobs c on c.id = u.id offset 0 for update of c skip locked) c
    where c.status = 'queued';
    -- The keys counted with the look are the claim's only if every job chosen was
    -- locked, each with the key it was chosen with.
    v_wready := v_wready and v_cks = c_cks;
  end if;
  if q.key_rate_limit is not null and not optimistic then
    -- The claim's keys, each one's count (a map of the keys that took more than one
    -- job: most claims take one a key, and then it is empty) and their windows' rows
    -- (key_windows_count, 37_key_rates.sql, counts them there). The look at the front
    -- counted its keys already when the claim's jobs are its first n (v_wready).
    if not v_wready then
      select coalesce(array_agg(c.ck), '{}'), coalesce(jsonb_object_agg(c.ck, c.n) filter (where c.n > 1), '{}')
      into v_wkeys, v_wcounts
      from (select c.ck, count(*)::integer as n from unnest(v_cks) c(ck) where c.ck is not null group by c.ck) c;
      -- The look at the front (key_limits) read the rows of its keys' windows: those
      -- are not looked up again (a probe a key, 0.9 ms of a claim of 600 over 1,000
      -- keys); keys from elsewhere (the walk of the keys with room) are. A row read
      -- earlier in this claim is still the key's: only this queue's claims, under its
      -- row lock, write or delete its windows (set_queue's reset waits for that lock
      -- too), and a window this claim's prune deleted is no longer seen by the UPDATE,
      -- so its key is inserted again.
      v_wtids := array(select coalesce(l.tid, p.ctid) from unnest(v_wkeys) k(k)
                       left join unnest(v_lkeys, v_ltids) l(k, tid) on l.k = k.k
                       left join lateral (select w.ctid from pgrun.key_rate_windows w
                                          where l.k is null and w.queue = q.name and w.key = k.k limit 1) p on true
                       where coalesce(l.tid, p.ctid) is not null);
    end if;
    perform pgrun.key_windows_count(q, at, v_wkeys, v_wcounts, v_wtids, v_prune);
  end if;
  return v_ids;
end;
$$;
