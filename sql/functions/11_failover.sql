-- 11_failover.sql: coming through a failover or an outage without losing work or running
-- it again when it need not run (docs/reliability.md). Two rules live here: the
-- server epoch, from which the reaper judges leases again after a server start, a
-- promotion or a gap in the maintenance rounds (maintain() records it;
-- reap_expired_leases, flag_dead_workers and reap_lost_sessions honour it), and the
-- hand-back of claims a runner does not hold (release_unheld).

-- server_timeline returns the WAL timeline this server writes on, or NULL on a
-- standby (in recovery there is no current WAL position to name). It needs no
-- privilege beyond EXECUTE on pg_walfile_name and pg_current_wal_lsn, which PUBLIC
-- has by default. Where the server will not name its WAL position (a managed service
-- may refuse), it returns 0: restarts are still seen, promotions only as restarts.
create or replace function pgrun.server_timeline()
returns bigint
language plpgsql
volatile
set search_path = pgrun, pg_catalog
as $$
begin
  if pg_is_in_recovery() then
    return null;
  end if;
  return ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
exception when others then
  return 0;
end;
$$;

-- round_gap is how long after the previous maintain() round a round must come for
-- the time between them to count as an outage: three times the spacing of the rounds
-- before (round_every), and at least 5 seconds. A runner-led cluster runs a round a
-- second, so a runner-side outage of more than 5 seconds (every runner, the leader
-- among them, cut off from the database) is one; pg_cron running maintain() once a
-- minute is not, as the spacing of its own rounds sets the bar at three minutes. A
-- leader that dies hands over within its three-round lease, under the bar. A gap
-- taken for an outage when it was not one costs only time: leases that ran out are
-- judged one lease length later.
create or replace function pgrun.round_gap(round_every interval)
returns interval
language sql
immutable
parallel safe
return greatest(interval '5 seconds', 3 * coalesce(round_every, interval '0'));

-- after_gap reports whether a round at at (the server's time, now()) comes a round_gap
-- after the latest round that found epoch e current. False when no round has been
-- noted on e yet.
create or replace function pgrun.after_gap(e pgrun.server_epochs, at timestamptz)
returns boolean
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select coalesce(at - e.checked_at > pgrun.round_gap(e.round_every), false)
$$;

-- note_server_epoch records a new server epoch when this server's start time or its
-- timeline differs from the newest row of pgrun.server_epochs, or when this round
-- comes after a gap in the rounds (after_gap), and returns the new row (NULL when
-- nothing changed, and on a standby). From the epoch's since, leases, dead-worker
-- flags and lost sessions get a grace (in_epoch_grace): before it the runners could
-- not renew or report.
--   * start: the server restarted (a new pg_postmaster_start_time(), same timeline):
--     since is the server's start, or, when the rounds also stopped for a gap before
--     it, the moment this round first saw it.
--   * promotion: a new timeline, whatever the start time. A promoted standby has a
--     start time of its own, usually long before the promotion (it ran as a standby):
--     counted from there, the grace would be over before the primary even died, and
--     the first rounds would reap the leases of the claims made in its last moments,
--     whose jobs finished in the gap with their reports on the way. So a promotion
--     takes effect from the moment it is first seen here, which is no later than the
--     first maintain() after it, the first moment a lease could be judged on the new
--     primary.
--   * gap: the same server and timeline, but no maintain() round for a round_gap:
--     nobody reached the database (a network cut between it and every runner), or
--     no runner ran. Takes effect from this round.
-- Each round notes itself on the newest row (checked_at, round_every) unless another
-- round holds that row right now. Keeps the last hundred rows. maintain() calls it
-- first in every round; the lock on the table keeps two concurrent callers from
-- recording the same epoch twice.
create or replace function pgrun.note_server_epoch()
returns pgrun.server_epochs
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_start     timestamptz := pg_postmaster_start_time();
  v_timeline  bigint := pgrun.server_timeline();
  -- The server's own time, not pgrun.clock(): a gap is real time without rounds,
  -- which a test's pinned clock does not move.
  v_real      timestamptz := now();
  e           pgrun.server_epochs;
  v_had       boolean;
  v_gap       boolean;
  v_reason    text;
begin
  if v_timeline is null then
    return null;
  end if;
  select * into e from pgrun.server_epochs x order by x.id desc limit 1;
  if found and e.postmaster_at = v_start and e.timeline = v_timeline and not pgrun.after_gap(e, v_real) then
    perform 1 from pgrun.server_epochs x where x.id = e.id for update skip locked;
    if found then
      update pgrun.server_epochs x
      set checked_at = v_real,
          round_every = case when x.checked_at < v_real then v_real - x.checked_at else x.round_every end
      where x.id = e.id and (x.checked_at is null or x.checked_at < v_real);
    end if;
    return null;
  end if;
  -- Serialise the writers: a second caller waits here and then sees the new row.
  lock table pgrun.server_epochs in share row exclusive mode;
  select * into e from pgrun.server_epochs x order by x.id desc limit 1;
  v_had := found;
  v_gap := v_had and pgrun.after_gap(e, v_real);
  if v_had and e.postmaster_at = v_start and e.timeline = v_timeline and not v_gap then
    return null;
  end if;
  v_reason := case when not v_had then 'start'
                   when e.timeline <> v_timeline then 'promotion'
                   when e.postmaster_at <> v_start then 'start'
                   else 'gap' end;
  insert into pgrun.server_epochs (postmaster_at, timeline, since, reason, checked_at)
  values (v_start, v_timeline,
          case when v_reason = 'start' and not v_gap then v_start else pgrun.clock() end,
          v_reason, v_real)
  returning * into e;
  delete from pgrun.server_epochs x where x.id <= e.id - 100;
  return e;
end;
$$;

-- epoch_since is the moment the newest server epoch took effect (NULL if none has
-- been recorded yet).
create or replace function pgrun.epoch_since()
returns timestamptz
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select x.since from pgrun.server_epochs x order by x.id desc limit 1
$$;

-- epoch_alive is the start of the newest server epoch that began by at (NULL if
-- none): the moment the timeout rule counts as a sign of life of every job
-- (overdue_jobs).
create or replace function pgrun.epoch_alive(at timestamptz)
returns timestamptz
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select x.since from pgrun.server_epochs x where x.since <= at order by x.id desc limit 1
$$;

-- in_epoch_grace reports whether, at instant at, a lease of length lease_length (NULL:
-- default_lease()) is still within the grace that follows the epoch that began at since:
-- from since to since + lease_length. During it no lease is judged expired, however
-- long ago it ran out: the gap before since was an outage or a failover, in which no
-- runner could renew or report, and a live runner needs one lease length to reconnect,
-- record what it finished and renew what it still runs. An instant before since (a
-- test clock set in the past) is not in the grace.
create or replace function pgrun.in_epoch_grace(since timestamptz, lease_length interval, at timestamptz)
returns boolean
language sql
immutable
set search_path = pgrun, pg_catalog
as $$
  select coalesce(at >= since and at < since + coalesce(lease_length, pgrun.default_lease()), false)
$$;

-- release_unheld hands back, in one call, every job running under worker whose claim
-- is not in held_claims: a runner calls it after an outage, before it claims again,
-- with the claims it holds (running, or claimed and about to start, or finished and
-- not yet reported). Such a job's claim committed on the server but never reached the
-- runner (the connection died with the answer in flight), or was made before a
-- failover by a claim the runner has since given up: without this it would sit
-- running until its lease ran out. Each is put back in its queue, due now, without
-- spending an attempt (its failures and lease expiries are unchanged), with a
-- job.released event. Returns the ids handed back. Reads the running jobs (there is
-- no index by worker: this runs once per outage, not per claim).
create or replace function pgrun.release_unheld(
  worker       text,
  held_claims  uuid[] default '{}'
)
returns setof bigint
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now     timestamptz := pgrun.clock();
  v_ids     bigint[];
  v_queues  text[];
  q         text;
begin
  perform pgrun.check_worker_id(worker); -- the format, required of every session
  perform pgrun.check_worker_login(worker);
  if cardinality(held_claims) > 1000000 then
    raise exception 'release_unheld got % held claims, over the limit of 1000000', cardinality(held_claims)
      using errcode = '22023', hint = 'A runner holds at most one claim per slot; pass the claim_id of each.';
  end if;
  with released as (
    update pgrun.jobs j
    set status = 'queued', run_at = v_now, lease_expires_at = null
    where j.status = 'running' and j.claimed_by = release_unheld.worker
      -- A NULL in the held list holds nothing; a job without a token (claimed
      -- before migration 0013) cannot be held, and is handed back.
      and coalesce(j.claim_id <> all (array_remove(coalesce(release_unheld.held_claims, '{}'), null)), true)
    returning j.id, j.queue, j.attempt, j.claim_id
  ),
  logged as (
    insert into pgrun.job_events (job_id, at, event, level, message, fields)
    select r.id, v_now, 'job.released', 'warn',
           format('worker %s does not hold claim %s (its answer was lost in flight, or a failover undid it): handed back',
                  release_unheld.worker, coalesce(r.claim_id::text, 'NULL')),
           jsonb_build_object('attempt', r.attempt, 'worker', release_unheld.worker, 'claim_id', r.claim_id)
    from released r
  )
  select array_agg(r.id order by r.id), array_agg(distinct r.queue) into v_ids, v_queues from released r;
  foreach q in array coalesce(v_queues, '{}') loop
    perform pg_notify('pgrun_jobs', q);
  end loop;
  return query select unnest(coalesce(v_ids, '{}'));
end;
$$;
