-- 73_health.sql: the health of the database under the queue, as warnings a person
-- can act on. The overview page and `runner status` show them; psql reads them with
-- select * from pgrun.health().

-- dead_rows_floor is how many dead row versions a table must hold before health's
-- dead_rows check reports it: below that, a small table (the maintenance leader's
-- one row, renewed every second) has more dead than live rows between two vacuums
-- without harm.
create or replace function pgrun.dead_rows_floor()
returns bigint
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 10000::bigint $$;

-- unseen_xid_age is how many transactions back the xmin of a session health cannot
-- time must be before it is reported: far more than a statement in flight sees on a
-- busy server, and reached within minutes at a few dozen jobs a second.
create or replace function pgrun.unseen_xid_age()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 10000 $$;

-- health returns one row per thing that needs a person, and no row when all is well.
-- Each row names its check, a severity ('warning' for every check today; a caller
-- shows another value as it is), a message saying what is wrong, a hint saying what
-- to do, and the numbers behind it as fields. The checks, in the order of the rows:
--   autovacuum_off     autovacuum is off for the server (autovacuum or track_counts),
--                      or a table of schema pgrun has autovacuum_enabled off: the dead
--                      row versions every job leaves are never reclaimed
--   dead_rows          a table of schema pgrun holds more dead row versions than live
--                      ones, and at least dead_rows_floor() of them (its statistics,
--                      which lag by up to a few seconds)
--   xmin_held          a session of this database has held the xmin horizon (a
--                      snapshot) for xmin_after or longer, one row per session, oldest
--                      first, at most five; or a prepared transaction has for as long
--   maintenance_stale  no maintenance round has run for maintenance_after: neither a
--                      leader's lease (take_maintenance) nor a step with a cadence
--                      (maintain() called without a leader, from pg_cron) is that recent
--   queue_unserved     a queue that is not paused has due jobs and no live worker
--                      (worker_alive) serves it; the due jobs are counted exactly up
--                      to stats_exact_limit(), past which the row says "more than"
--                      the limit (fields: queued is the limit, more is true)
-- How long a session has held its snapshot needs its transaction's start, which
-- PostgreSQL shows only to the session's own role and to members of
-- pg_read_all_stats. health runs as the engine (the owner of schema pgrun's
-- functions); when that role may not read another role's session, the session's
-- xmin is judged by its age in transactions instead (unseen_xid_age()), and its row
-- says so and how to give the owner the privilege. A snapshot held on a standby
-- through hot_standby_feedback (a walsender) is judged the same way.
-- Times of the maintenance and worker checks are the engine's clock (pgrun.clock());
-- a snapshot's age is the server's real time. An interval that is NULL or negative
-- raises 22023; zero reports every snapshot held right now.
create or replace function pgrun.health(
  xmin_after         interval default interval '5 minutes',
  maintenance_after  interval default interval '5 minutes'
)
returns table (check_name text, severity text, message text, hint text, fields jsonb)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  v_now       timestamptz := pgrun.clock();
  v_real      timestamptz := clock_timestamp();
  v_last      timestamptz;
  v_holder    text;
  v_unserved  text[];
  v_queue     text;
  v_due       bigint;
  v_cap       constant integer := pgrun.stats_exact_limit();
  r           record;
begin
  if xmin_after is null or xmin_after < interval '0' then
    raise exception 'xmin_after % is not valid', coalesce(xmin_after::text, 'NULL')
      using errcode = '22023', hint = 'Pass how long a snapshot may be held before it is reported, such as ''5 minutes''.';
  end if;
  if maintenance_after is null or maintenance_after < interval '0' then
    raise exception 'maintenance_after % is not valid', coalesce(maintenance_after::text, 'NULL')
      using errcode = '22023', hint = 'Pass how long maintenance may be silent before it is reported, such as ''5 minutes''.';
  end if;

  -- autovacuum_off: the server's switches, then each table's own.
  for r in select s.name from pg_settings s
           where s.name in ('autovacuum', 'track_counts') and s.setting = 'off'
           order by s.name loop
    check_name := 'autovacuum_off';
    severity := 'warning';
    message := format('%s is off on this server: autovacuum never runs, and the dead row versions each job '
                      'leaves in pgrun.jobs are never reclaimed', r.name);
    hint := format('As a superuser: ALTER SYSTEM SET %s = on; SELECT pg_reload_conf(); until then, run '
                   'VACUUM pgrun.jobs regularly (from pg_cron, for instance).', r.name);
    fields := jsonb_build_object('setting', r.name);
    return next;
  end loop;
  for r in select c.relname from pg_class c
           where c.relnamespace = 'pgrun'::regnamespace and c.relkind in ('r', 'p')
             and exists (select 1 from pg_options_to_table(c.reloptions) o
                         where o.option_name = 'autovacuum_enabled' and not o.option_value::boolean)
           order by c.relname loop
    check_name := 'autovacuum_off';
    severity := 'warning';
    message := format('autovacuum is off for table pgrun.%I: its dead row versions are never reclaimed', r.relname);
    hint := format('ALTER TABLE pgrun.%I SET (autovacuum_enabled = on); then VACUUM pgrun.%I once to catch up.',
                   r.relname, r.relname);
    fields := jsonb_build_object('table', format('pgrun.%I', r.relname));
    return next;
  end loop;

  -- dead_rows: the tables' statistics (pg_stat_user_tables, readable by anyone).
  for r in select t.relname, t.n_live_tup, t.n_dead_tup, greatest(t.last_vacuum, t.last_autovacuum) as vacuumed
           from pg_stat_user_tables t
           where t.schemaname = 'pgrun' and t.n_dead_tup > t.n_live_tup and t.n_dead_tup >= pgrun.dead_rows_floor()
           order by t.n_dead_tup desc, t.relname loop
    check_name := 'dead_rows';
    severity := 'warning';
    message := format('table pgrun.%I holds %s dead row versions beside %s live rows (last vacuumed: %s)',
                      r.relname, r.n_dead_tup, r.n_live_tup, coalesce(r.vacuumed::text, 'never'));
    hint := format('VACUUM (VERBOSE) pgrun.%I; if it keeps coming back, check that autovacuum is on and that no '
                   'session holds the xmin horizon (both are checked here).', r.relname);
    fields := jsonb_build_object('table', format('pgrun.%I', r.relname), 'dead', r.n_dead_tup, 'live', r.n_live_tup,
                                 'last_vacuum', r.vacuumed);
    return next;
  end loop;

  -- xmin_held: sessions of this database (and walsenders, whose standby's feedback
  -- holds every database back) with a snapshot; this session's own is not counted.
  for r in select a.pid, a.usename, a.application_name, a.state, a.backend_type,
                  v_real - coalesce(a.xact_start, a.query_start) as held,
                  age(a.backend_xmin) as xid_age,
                  a.query = '<insufficient privilege>' as unseen
           from pg_stat_activity a
           where a.backend_xmin is not null and a.pid <> pg_backend_pid()
             and (a.datname = current_database() or a.backend_type = 'walsender')
             -- (A vacuum's own snapshot holds nothing back: PostgreSQL leaves it out.)
             and a.backend_type is distinct from 'autovacuum worker'
             and (case when coalesce(a.xact_start, a.query_start) is not null
                       then v_real - coalesce(a.xact_start, a.query_start) >= xmin_after
                       else age(a.backend_xmin) >= pgrun.unseen_xid_age() end)
           order by coalesce(a.xact_start, a.query_start) nulls first, age(a.backend_xmin) desc
           limit 5 loop
    check_name := 'xmin_held';
    severity := 'warning';
    if r.held is not null then
      message := format('pid %s (%s, %s, %s) has held the xmin horizon for %s: vacuum cannot reclaim any row '
                        'version that died since',
                        r.pid, coalesce(r.usename, '?'), coalesce(nullif(r.application_name, ''), r.backend_type),
                        coalesce(r.state, '?'), justify_interval(date_trunc('second', r.held)));
      hint := format('Look at it: SELECT pid, usename, application_name, state, xact_start, query FROM pg_stat_activity '
                     'WHERE pid = %s; end it with SELECT pg_terminate_backend(%s) if it is stuck, and set '
                     'idle_in_transaction_session_timeout so that idle ones end by themselves.', r.pid, r.pid);
    elsif r.unseen then
      message := format('pid %s (%s) holds the xmin horizon at least %s transactions back; for how long cannot be '
                        'read, since health() runs as %I, which may not read another role''s session',
                        r.pid, coalesce(r.usename, '?'), pgrun.unseen_xid_age(), current_user);
      hint := format('Look at it as a superuser: SELECT pid, xact_start, state, query FROM pg_stat_activity WHERE pid = %s. '
                     'GRANT pg_read_all_stats TO %I lets health() time it.', r.pid, current_user);
    else
      message := format('pid %s (%s, %s) holds the xmin horizon at least %s transactions back',
                        r.pid, coalesce(r.usename, '?'), coalesce(nullif(r.application_name, ''), r.backend_type),
                        pgrun.unseen_xid_age());
      hint := 'A standby with hot_standby_feedback holds this back for its own long queries: look at them there '
              '(pg_stat_activity on the standby), or lower max_standby_streaming_delay instead of the feedback.';
    end if;
    fields := jsonb_build_object('pid', r.pid, 'role', r.usename, 'application_name', r.application_name,
                                 'state', r.state, 'backend_type', r.backend_type,
                                 'held_seconds', round(extract(epoch from r.held)::numeric, 3),
                                 'xid_age', r.xid_age, 'timed', r.held is not null);
    return next;
  end loop;
  for r in select p.gid, p.owner, v_real - p.prepared as held
           from pg_prepared_xacts p
           where p.database = current_database() and v_real - p.prepared >= xmin_after
           order by p.prepared limit 5 loop
    check_name := 'xmin_held';
    severity := 'warning';
    message := format('prepared transaction %L (%s) has held the xmin horizon for %s', r.gid, r.owner,
                      justify_interval(date_trunc('second', r.held)));
    hint := format('Finish it from the transaction manager that prepared it, or by hand: COMMIT PREPARED %L or '
                   'ROLLBACK PREPARED %L.', r.gid, r.gid);
    fields := jsonb_build_object('gid', r.gid, 'role', r.owner, 'held_seconds', round(extract(epoch from r.held)::numeric, 3),
                                 'timed', true);
    return next;
  end loop;

  -- maintenance_stale: the leader's lease runs ahead of its last round; a round
  -- without a leader leaves its trace on the steps with a cadence it ran.
  select m.expires_at, m.holder into v_last, v_holder from pgrun.maintenance_leader m where m.name = 'maintain';
  select greatest(v_last, max(s.last_run_at)) into v_last from pgrun.maintenance_steps s;
  if v_last is null or v_last < v_now - maintenance_after then
    check_name := 'maintenance_stale';
    severity := 'warning';
    message := case when v_last is null then 'no maintenance round has ever run'
                    else format('no maintenance round has run for %s', justify_interval(date_trunc('second', v_now - v_last)))
               end || ': expired leases are not reaped, overdue jobs not failed, schedules not fired';
    hint := 'Run at least one runner connected as a member of pgrun_admin (runner work leads maintenance when '
            'it may), or call SELECT pgrun.maintain() every minute from pg_cron.';
    fields := jsonb_build_object('last', v_last, 'leader', v_holder,
                                 'seconds', round(extract(epoch from v_now - v_last)::numeric, 3));
    return next;
  end if;

  -- queue_unserved: the due jobs of each queue no live worker serves, counted only
  -- when there is one (a healthy round reads the small workers table and nothing
  -- else). Counted here rather than by queue_counts, whose estimate past the limit
  -- samples the table (some 20 ms; the overview reads queue_stats beside this): each
  -- priority level's due jobs are a range of the claim index, read up to the limit,
  -- so neither jobs not yet due nor a backlog past the limit cost anything.
  select array_agg(q.name order by q.name) into v_unserved
  from pgrun.queues q
  where not q.paused
    and not exists (select 1 from pgrun.workers w where pgrun.worker_alive(w, v_now) and q.name = any (w.queues));
  foreach v_queue in array coalesce(v_unserved, '{}') loop
    with recursive levels(p) as (
      select min(j.priority) from pgrun.jobs j where j.queue = v_queue and j.status = 'queued'
      union all
      select (select min(j.priority) from pgrun.jobs j
              where j.queue = v_queue and j.status = 'queued' and j.priority > l.p)
      from levels l where l.p is not null
    )
    select count(*) into v_due
    from (select 1 from levels l,
                 lateral (select 1 from pgrun.jobs j
                          where j.queue = v_queue and j.status = 'queued' and j.priority = l.p and j.run_at <= v_now
                          limit v_cap + 1) d
          where l.p is not null
          limit v_cap + 1) x;
    continue when v_due = 0;
    check_name := 'queue_unserved';
    severity := 'warning';
    -- The words of `runner status`' own line (internal/top Warnings), so that it
    -- prints the one line once (past the limit, status has an estimate instead).
    message := format('%s: %s and no live worker serves this queue', v_queue,
                      case when v_due = 1 then '1 queued job'
                           when v_due > v_cap then format('more than %s queued jobs', v_cap)
                           else v_due || ' queued jobs' end);
    hint := format('Start a runner for it: runner work --queues %s=8; if one should be running, runner status '
                   'lists the dead and stopped workers.', v_queue);
    fields := jsonb_build_object('queue', v_queue, 'queued', least(v_due, v_cap), 'more', v_due > v_cap);
    return next;
  end loop;
end;
$$;
