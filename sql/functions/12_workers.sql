-- 12_workers.sql: the registry runners heartbeat into, and the maintain() steps that
-- keep it true: handing back the jobs of workers whose database session ended,
-- flagging workers that went silent holding jobs, forgetting old ones.

-- worker_heartbeat records that worker id is alive (inserting it on first call) with
-- what it serves, which models it holds warm and how often it heartbeats (cadence: a
-- worker silent for three cadences while holding jobs is flagged dead by maintain()).
-- kinds lists the job kinds it has handlers for (NULL: any), for queue_stats.unhandled.
-- A heartbeat clears the dead flag. Returns the time recorded.
--
-- A heartbeat from another process under the same id (a new pid or host), or after
-- the worker stopped, forgets the session the id was bound to (bind_worker_session).
--
-- The first heartbeat registers the id and binds it to the session's login role
-- (login_role, session_user): from then on only that role may act under the id
-- (check_worker_login), heartbeats included, until the row is forgotten
-- (forget_workers). cadence is above 0 and at most max_cadence() (an hour).
create or replace function pgrun.worker_heartbeat(
  id       text,
  host     text,
  pid      integer,
  queues   text[] default '{}',
  models   text[] default '{}',
  version  text default null,
  state    text default 'running',
  cadence  interval default interval '10 seconds',
  servable text[] default '{}',
  kinds    text[] default null
)
returns timestamptz
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now timestamptz := pgrun.clock();
begin
  perform pgrun.check_worker_id(id); -- the format, required of every session
  perform pgrun.check_worker_login(id, registering => true);
  if host is null or host = '' or length(host) > 255 then
    raise exception 'host % is not valid', coalesce(quote_literal(left(host, 40)), 'NULL')
      using errcode = '22023', hint = 'Pass the host name, 1 to 255 characters.';
  end if;
  if cardinality(queues) > 1000 or cardinality(models) > 1000 or cardinality(servable) > 1000 or cardinality(kinds) > 10000 then
    raise exception 'worker % lists too many queues, models or kinds', id
      using errcode = '22023', hint = 'At most 1000 queues, 1000 models, 1000 servable models and 10000 kinds per worker.';
  end if;
  if state is null or state not in ('running', 'draining', 'stopped') then
    raise exception 'worker state % is not valid', coalesce(quote_literal(state), 'NULL')
      using errcode = '22023', hint = 'Use running, draining or stopped.';
  end if;
  perform pgrun.check_interval('cadence', cadence, pgrun.max_cadence());
  -- check_worker_login let an existing row through only for its own login (or the
  -- engine's session); the row keeps the login that registered it.
  insert into pgrun.workers as w (id, host, pid, queues, models, version, state, started_at, last_seen, cadence,
                                  servable, kinds, login_role)
  values (worker_heartbeat.id, worker_heartbeat.host, worker_heartbeat.pid,
          coalesce(worker_heartbeat.queues, '{}'), coalesce(worker_heartbeat.models, '{}'),
          worker_heartbeat.version, worker_heartbeat.state, v_now, v_now,
          coalesce(worker_heartbeat.cadence, interval '10 seconds'), coalesce(worker_heartbeat.servable, '{}'),
          worker_heartbeat.kinds, session_user)
  on conflict (id) do update
    set host = excluded.host, pid = excluded.pid, queues = excluded.queues,
        models = excluded.models, version = excluded.version, state = excluded.state,
        last_seen = excluded.last_seen, cadence = excluded.cadence, flagged_dead_at = null,
        servable = excluded.servable, kinds = excluded.kinds,
        login_role = coalesce(w.login_role, excluded.login_role),
        -- A new life under the same id (another process, or one that had stopped)
        -- binds a session of its own (bind_worker_session); the old one's is forgotten
        -- rather than judged.
        session_pid = case when w.pid = excluded.pid and w.host = excluded.host and w.state <> 'stopped'
                           then w.session_pid end,
        session_lost_at = case when w.pid = excluded.pid and w.host = excluded.host and w.state <> 'stopped'
                               then w.session_lost_at end
    -- Two logins registering one new id at once: the first insert wins it.
    where w.login_role is null or w.login_role = session_user or pgrun.session_is_engine();
  if not found then
    perform pgrun.check_worker_login(id);
  end if;
  return v_now;
end;
$$;

-- Runner liveness by session. A runner holds a session-level advisory lock keyed on
-- its worker id, (worker_session_class(), worker_session_key(id)), on a connection it
-- keeps open for its life (its LISTEN connection), and bind_worker_session records
-- that session's backend pid in pgrun.workers.session_pid. The server releases the
-- lock the moment the session ends (the process was killed, its host went away, its
-- socket closed), so maintenance (reap_lost_sessions) can hand the worker's jobs
-- back within a round or two instead of a lease. Where the session cannot be seen to
-- end (a network partition leaves the server's end of the socket open; a frozen
-- process keeps it) the lock stays, and the lease is the bound, as for a worker that
-- never binds: one behind a transaction-mode pooler (PgBouncer lends the server
-- connection to others after each transaction, so a session lock is not possible
-- there), or one in another language.

-- worker_session_class is the first key of every worker session lock: 0x70677277,
-- "pgrw". An application's own advisory locks on the two-key form with this first
-- key would be taken for worker sessions: do not use it.
create or replace function pgrun.worker_session_class()
returns integer
language sql
immutable
parallel safe
return 1885827703;

-- worker_session_key is the second key of worker id's session lock: hashtext(id). Two
-- ids can hash alike (about one pair in 2^32); the second then cannot take the lock
-- (bind_worker_session returns 'held') and is judged by its leases alone, and since
-- maintenance matches the lock's holder against the pid each worker bound, one
-- worker's lock never keeps another alive.
create or replace function pgrun.worker_session_key(worker text)
returns integer
language sql
immutable
parallel safe
return hashtext(worker);

-- session_confirm is how long a worker's session must be seen gone before its worker
-- is judged dead: a live runner whose LISTEN connection broke (a server-side
-- idle_session_timeout, a pg_terminate_backend) reconnects and binds again at once,
-- within milliseconds, and a round that falls in that gap must not take it for dead.
create or replace function pgrun.session_confirm()
returns interval
language sql
immutable
parallel safe
return interval '500 milliseconds';

-- bind_worker_session ties worker's liveness to the calling session: it takes the
-- session-level advisory lock of worker's id and records this session's backend pid
-- in pgrun.workers (clearing a dead flag and a lost session). Call it on a
-- connection held open for the worker's life, with backend_pid the server process id
-- the connection was given at its start (libpq's PQbackendPID, pgx's PgConn().PID()):
-- through a pooler the two differ, and nothing is bound, since the server session the
-- lock would live on is not the worker's (a transaction pooler lends it to others
-- after each statement; session pooling cannot be told apart from the client side).
-- NULL skips that check. Returns
--   'bound'         the session is bound
--   'revived'       bound, after maintenance had judged the worker dead by its
--                   session (the jobs it ran were handed back: its reports of them
--                   match nothing)
--   'held'          another session holds the lock: the worker's previous session
--                   that the server has not yet seen end, or a worker whose id hashes
--                   alike. The worker is then judged by its leases alone (its recorded
--                   session is forgotten) until it binds again.
--   'unregistered'  no worker row yet: heartbeat first (worker_heartbeat), then bind.
--   'pooled'        backend_pid is not this session's: the call went through a pooler.
-- Raises 22023 for a bad worker id and 42501 for an id bound to another login, as
-- every call under a worker id.
create or replace function pgrun.bind_worker_session(worker text, backend_pid integer default null)
returns text
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  w pgrun.workers;
begin
  perform pgrun.check_worker_id(worker); -- the format, required of every session
  perform pgrun.check_worker_login(worker);
  if backend_pid is not null and backend_pid <> pg_backend_pid() then
    return 'pooled';
  end if;
  select * into w from pgrun.workers x where x.id = bind_worker_session.worker for update;
  if not found then
    return 'unregistered';
  end if;
  if not pg_try_advisory_lock(pgrun.worker_session_class(), pgrun.worker_session_key(worker)) then
    update pgrun.workers x set session_pid = null, session_lost_at = null
    where x.id = bind_worker_session.worker;
    return 'held';
  end if;
  update pgrun.workers x
  set session_pid = pg_backend_pid(), session_lost_at = null, flagged_dead_at = null
  where x.id = bind_worker_session.worker;
  return case when w.flagged_dead_at is not null and w.session_lost_at is not null then 'revived' else 'bound' end;
end;
$$;

-- worker_session_gone reports whether worker is bound to a session (bind_worker_session)
-- that no longer holds its lock, outside the grace after a server epoch (then every
-- session was cut by the restart or the failover, and runners are still coming back).
-- False for a worker that is not bound, stopped, or unknown. One read of pg_locks.
create or replace function pgrun.worker_session_gone(worker text)
returns boolean
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select exists (
    select 1 from pgrun.workers w
    where w.id = worker and w.session_pid is not null and w.state <> 'stopped'
      and not pgrun.in_epoch_grace(pgrun.epoch_since(), pgrun.worker_silence(w.cadence), pgrun.clock())
      and not exists (
        select 1 from pg_locks l
        where l.locktype = 'advisory' and l.granted and l.objsubid = 2
          and l.database = (select d.oid from pg_database d where d.datname = current_database())
          and l.classid = pgrun.worker_session_class()::oid
          and l.objid = pgrun.worker_session_key(w.id)::oid
          and l.pid = w.session_pid))
$$;

-- reap_lost_sessions hands back the jobs of workers whose session ended: a worker
-- bound to a session (bind_worker_session) whose lock is no longer held by that
-- session is noted (session_lost_at) in the first round that sees it, and once it has
-- been gone for session_confirm it is flagged dead (flagged_dead_at; worker_status
-- shows it dead) and its running jobs are handed back at once, without waiting for
-- their leases, by the lost-lease rule (lose_leases: requeued without spending an
-- attempt, job.lease_expired_requeue, or failed past lease_budget lost leases, as the
-- lease reaper does: a job that kills its runner each time must not loop forever),
-- each with a worker.dead event after the lease's. Its session is then forgotten
-- (session_pid NULL): a job it held that another transaction had locked right then is
-- left to its lease. Nothing is judged within worker_silence after a server epoch (a
-- restart or a failover ended every session). Cheap when nothing ended: one look at
-- the workers, one read of pg_locks when any is bound. Returns {"workers": n,
-- "requeued": n, "failed": n}.
create or replace function pgrun.reap_lost_sessions(lease_budget integer default 3)
returns jsonb
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now     timestamptz := pgrun.clock();
  v_since   timestamptz := pgrun.epoch_since();
  v_bound   text[];
  v_keys    oid[];
  v_pids    integer[];
  v_gone    text[];
  v_gpids   integer[];
  v_dead    text[];
  v_jobs    bigint[];
  v_out     jsonb;
begin
  if lease_budget is null or lease_budget < 0 then
    raise exception 'lease_budget % is not valid', coalesce(lease_budget::text, 'NULL')
      using errcode = '22023', hint = 'Use 0 or more: how many lost leases a job survives.';
  end if;
  v_bound := array(select w.id from pgrun.workers w
                   where w.session_pid is not null and w.state <> 'stopped'
                     and not pgrun.in_epoch_grace(v_since, pgrun.worker_silence(w.cadence), v_now));
  if cardinality(v_bound) = 0 then
    return jsonb_build_object('workers', 0, 'requeued', 0, 'failed', 0);
  end if;
  -- The worker session locks held right now, in one read of the lock table.
  select coalesce(array_agg(l.objid), '{}'), coalesce(array_agg(l.pid), '{}') into v_keys, v_pids
  from pg_locks l
  where l.locktype = 'advisory' and l.granted and l.objsubid = 2
    and l.database = (select d.oid from pg_database d where d.datname = current_database())
    and l.classid = pgrun.worker_session_class()::oid;
  select coalesce(array_agg(w.id), '{}'), coalesce(array_agg(w.session_pid), '{}') into v_gone, v_gpids
  from pgrun.workers w
  where w.id = any (v_bound)
    and not exists (select 1 from unnest(v_keys, v_pids) h(k, p)
                    where h.k = pgrun.worker_session_key(w.id)::oid and h.p = w.session_pid);
  -- A session seen gone earlier that holds its lock again was only slow to show it.
  update pgrun.workers w set session_lost_at = null
  where w.id = any (v_bound) and w.session_lost_at is not null and not w.id = any (v_gone);
  if cardinality(v_gone) = 0 then
    return jsonb_build_object('workers', 0, 'requeued', 0, 'failed', 0);
  end if;
  -- First seen gone now: noted. (Matched on the pid judged, so that a worker that
  -- bound a new session meanwhile is left alone.)
  update pgrun.workers w set session_lost_at = v_now
  from unnest(v_gone, v_gpids) g(id, pid)
  where w.id = g.id and w.session_pid = g.pid
    and (w.session_lost_at is null or w.session_lost_at > v_now);
  -- Gone for session_confirm: dead.
  with dead as (
    update pgrun.workers w set flagged_dead_at = coalesce(w.flagged_dead_at, v_now), session_pid = null
    from unnest(v_gone, v_gpids) g(id, pid)
    where w.id = g.id and w.session_pid = g.pid
      and w.session_lost_at <= v_now - pgrun.session_confirm()
    returning w.id
  )
  select array_agg(d.id) into v_dead from dead d;
  if cardinality(v_dead) is null then
    return jsonb_build_object('workers', 0, 'requeued', 0, 'failed', 0);
  end if;
  v_jobs := array(select j.id from pgrun.jobs j
                  where j.status = 'running' and j.claimed_by = any (v_dead)
                  for update skip locked);
  v_out := pgrun.lose_leases(v_jobs, lease_budget,
             'ended with its database session (its process died or its connection closed)',
             jsonb_build_object('cause', 'session_ended'));
  insert into pgrun.job_events (job_id, at, event, level, message, fields)
  select j.id, v_now, 'worker.dead', 'error',
         format('worker %s on %s: its database session ended at %s (its process died or its connection closed): flagged dead',
                w.id, w.host, w.session_lost_at),
         jsonb_build_object('worker', w.id, 'host', w.host, 'session_lost_at', w.session_lost_at,
                            'cause', 'session_ended')
  from pgrun.jobs j join pgrun.workers w on w.id = j.claimed_by
  where j.id = any (v_jobs);
  return v_out || jsonb_build_object('workers', cardinality(v_dead));
end;
$$;

-- queue_peers counts, for each of queues, the other live workers (state running,
-- worker_alive) that serve it. A runner that shares a queue keeps one claim of it in
-- flight instead of two (runner/fetcher.go): every claim and completion in flight is
-- a statement on the server's cores, and the peers' claims step over each other's
-- rows. It tells a worker counts only, nothing else of pgrun.workers. At most 1000
-- queues, as worker_heartbeat.
create or replace function pgrun.queue_peers(worker text, queues text[])
returns table (queue text, peers integer)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now timestamptz := pgrun.clock();
begin
  perform pgrun.check_worker_id(worker); -- the format, required of every session
  perform pgrun.check_worker_login(worker);
  if queues is null or cardinality(queues) > 1000 then
    raise exception 'queue_peers takes 0 to 1000 queues, got %', coalesce(cardinality(queues)::text, 'NULL')
      using errcode = '22023', hint = 'Pass the queues this worker serves, as worker_heartbeat does.';
  end if;
  return query
  select q, (select count(*)::integer from pgrun.workers w
             where w.id <> queue_peers.worker and q = any (w.queues) and w.state = 'running'
               and pgrun.worker_alive(w, v_now))
  from unnest(queues) q;
end;
$$;

-- flag_dead_workers flags workers that went silent for worker_silence (three heartbeat
-- cadences) while holding running jobs (flagged_dead_at, and a worker.dead event on
-- each of their jobs); the lease reaper brings the jobs back. A heartbeat clears the
-- flag. Within worker_silence after a server start, a promotion or a gap in the
-- maintenance rounds (server_epochs) it is not flagged: its silence was the outage's, and it has not had the time to come
-- back yet. Returns how many were flagged.
create or replace function pgrun.flag_dead_workers()
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  v_now     timestamptz := pgrun.clock();
  v_since   timestamptz := pgrun.epoch_since();
  v_silent  text[];
  n         integer;
begin
  -- The silent workers first, from the small workers table: usually there are none,
  -- and the running jobs are not read at all.
  v_silent := array(select w.id from pgrun.workers w
                    where w.flagged_dead_at is null and w.state <> 'stopped'
                      and not pgrun.worker_alive(w, v_now)
                      and not pgrun.in_epoch_grace(v_since, pgrun.worker_silence(w.cadence), v_now));
  if cardinality(v_silent) = 0 then
    return 0;
  end if;
  with dead as (
    update pgrun.workers w set flagged_dead_at = v_now
    where w.id = any (v_silent) and w.flagged_dead_at is null
      and exists (select 1 from pgrun.jobs j where j.status = 'running' and j.claimed_by = w.id)
    returning w.id, w.host, w.last_seen
  ),
  logged as (
    insert into pgrun.job_events (job_id, at, event, level, message, fields)
    select j.id, v_now, 'worker.dead', 'error',
           format('worker %s on %s last heartbeat at %s: flagged dead', d.id, d.host, d.last_seen),
           jsonb_build_object('worker', d.id, 'host', d.host, 'last_seen', d.last_seen)
    from dead d join pgrun.jobs j on j.claimed_by = d.id and j.status = 'running'
  )
  select count(*) into n from dead;
  return n;
end;
$$;

-- forget_workers deletes workers not seen for after (default a day) that hold no
-- running job (the id, and the login it is bound to, stay while a claim under it may
-- still report). Returns how many.
create or replace function pgrun.forget_workers(after interval default interval '1 day')
returns integer
language plpgsql
set search_path = pgrun, pg_catalog
as $$
declare
  n integer;
begin
  perform pgrun.check_interval('after', after, pgrun.max_retention());
  delete from pgrun.workers w where w.last_seen < pgrun.clock() - coalesce(after, interval '1 day')
    and not exists (select 1 from pgrun.jobs j where j.status = 'running' and j.claimed_by = w.id);
  get diagnostics n = row_count;
  return n;
end;
$$;
