-- 71_timeline.sql: a job's whole story in one query. The audit log (job_events) holds
-- only what a person will want to read later; routine transitions (enqueued, started,
-- succeeded) live as timestamps on the job row. job_timeline puts the two together
-- at read time, so the hot path writes no extra rows.

-- job_parked says what job id waits for while a durable call parked it
-- (35_durable.sql): one row, or none for a job that is not parked (running, due,
-- finished, or waiting for its children).
--   * An await (the job waiting, with its row of job_waits): waiting_for 'event' and
--     event the event's name, or 'job' and awaited_job the job's id; until when the
--     wait times out; since the wait was made. Once maintain() timed the wait out the
--     job is queued again and the row still says so (timed_out true) until the
--     resumed await takes the timeout.
--   * A durable sleep (the job queued, its latest recorded call a sleep that ends
--     after pgrun.clock()): waiting_for 'sleep', until its end, since it was recorded.
-- step is the handler's call that parked. Reads only; raises P0002 (job_not_found)
-- for an unknown id (and, in the tenant mode, for another tenant's job).
create or replace function pgrun.job_parked(id bigint)
returns table (waiting_for text, until timestamptz, step text, event text, awaited_job bigint,
               timed_out boolean, since timestamptz)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j pgrun.jobs;
begin
  select * into j from pgrun.jobs x where x.id = job_parked.id;
  if not found or not pgrun.may_touch(j.tenant) then
    perform pgrun.job_not_found(job_parked.id);
  end if;
  if j.status not in ('waiting', 'queued') then
    return;
  end if;
  -- A waiting job's wait that still runs comes before an older one that timed out.
  return query
  select case when w.event is not null then 'event' else 'job' end, w.until, w.step, w.event, w.awaited_job,
         w.timed_out, w.created_at
  from pgrun.job_waits w
  where w.job_id = j.id and (j.status = 'waiting' or w.timed_out)
  order by w.timed_out, w.id desc
  limit 1;
  if found or j.status <> 'queued' then
    return;
  end if;
  return query
  select 'sleep'::text, (c.result ->> 'until')::timestamptz, c.name, null::text, null::bigint, false, c.recorded_at
  from (select * from pgrun.job_steps s where s.job_id = j.id order by s.position desc limit 1) c
  where case when c.kind = 'sleep' then (c.result ->> 'until')::timestamptz end > pgrun.clock();
end;
$$;

-- job_timeline returns job id's timeline, oldest first:
--   * job.enqueued at created_at (attempt 0: no claim yet);
--   * every stored event of job_events, with its attempt taken from
--     fields->>'attempt' (NULL when the event does not name one);
--   * job.started at started_at, for the current attempt only (earlier starts are
--     overwritten on the row; their failures and expiries are stored events);
--   * every call its handler recorded (job_steps, 35_durable.sql), at recorded_at
--     under the attempt that recorded it: step.recorded (a step), sleep.recorded (a
--     durable sleep), event.received or event.timed_out (an await of an event),
--     job.spawned (a spawn), job.awaited or job.await_timed_out (an await of a job).
--     fields hold step (its name), kind, position and result_bytes (the size of the
--     recorded result's JSON text, NULL for none; never the result itself), and by
--     kind: until (a sleep's end), event (the awaited event's name, known when the
--     job parked for it), job (the spawned or awaited job's id), status (the awaited
--     job's) and timed_out. A timed-out await has level warn;
--   * while the job is parked (job_parked), job.parked at the time it parked: what it
--     waits for and until when, as message and as fields (step, waiting_for, event
--     or job, until, timed_out); level warn once the wait timed out;
--   * for a finished job (succeeded, failed, cancelled, skipped), job.<status> at
--     finished_at, unless a stored event of that name already records this ending:
--     one written at or after finished_at and naming no attempt or one at or after
--     the current attempt (fail_job and cancel_job write job.failed and
--     job.cancelled in the transaction that finishes the job, so those are not
--     repeated; an ending that wrote no such event, a success, a skip or a failure
--     by lease expiry, gets one).
-- Entries from the row have level info, except job.failed (error) and job.cancelled
-- (warn); a synthetic terminal entry carries the error's message and class. Order:
-- at, then enqueued first and the terminal (or parked) entry last, then attempt (an
-- entry naming none counts as the current attempt), job.started before the recorded
-- calls of its attempt and those before its stored events (a call and the event it
-- wrote share a time), then position or event id. Reads only; raises P0002
-- (job_not_found) for an unknown id (and, in the tenant mode, for another tenant's
-- job).
create or replace function pgrun.job_timeline(id bigint)
returns table (at timestamptz, event text, level text, attempt integer, message text, fields jsonb)
language plpgsql
stable
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
declare
  j         pgrun.jobs;
  terminal  text;
begin
  select * into j from pgrun.jobs x where x.id = job_timeline.id;
  if not found or not pgrun.may_touch(j.tenant) then
    perform pgrun.job_not_found(job_timeline.id);
  end if;
  if j.finished_at is not null and j.status in ('succeeded', 'failed', 'cancelled', 'skipped') then
    terminal := 'job.' || j.status::text;
  end if;
  return query
  with stored as (
    select e.id, e.at, e.event, e.level, e.message, e.fields,
           -- a handler may store anything under "attempt": only a whole number counts
           case when e.fields ->> 'attempt' ~ '^[0-9]{1,9}$' then (e.fields ->> 'attempt')::integer end as attempt
    from pgrun.job_events e
    where e.job_id = j.id
  ),
  -- The calls the handler recorded; an await's result holds "timeout" when its time
  -- ran out (only an await's: a step's result may hold anything).
  calls as (
    select c.name, c.position, c.kind, c.attempt, c.result, c.recorded_at,
           c.kind in ('event', 'job') and coalesce(c.result ? 'timeout', false) as timed_out
    from pgrun.job_steps c
    where c.job_id = j.id
  ),
  -- The event each await step parked for (job_steps keeps the payload, not the name):
  -- the newest job.awaiting event naming the step.
  awaited as (
    select distinct on (e.fields ->> 'step') e.fields ->> 'step' as step, e.fields ->> 'event' as event
    from stored e
    where e.event = 'job.awaiting' and e.fields ? 'event'
    order by e.fields ->> 'step', e.id desc
  ),
  entries as (
    select j.created_at as at, 'job.enqueued'::text as event, 'info'::text as level, 0 as attempt,
           null::text as message, jsonb_build_object('kind', j.kind, 'queue', j.queue) as fields,
           0 as rank, 0 as sub, 0::bigint as seq
    union all
    select s.at, s.event, s.level, s.attempt, s.message, s.fields, 1, 2, s.id
    from stored s
    union all
    select c.recorded_at,
           case c.kind
             when 'step' then 'step.recorded'
             when 'sleep' then 'sleep.recorded'
             when 'event' then case when c.timed_out then 'event.timed_out' else 'event.received' end
             when 'spawn' then 'job.spawned'
             else case when c.timed_out then 'job.await_timed_out' else 'job.awaited' end
           end,
           case when c.timed_out then 'warn' else 'info' end,
           c.attempt, null,
           jsonb_build_object('step', c.name, 'kind', c.kind, 'position', c.position,
                              'result_bytes', octet_length(c.result::text))
             || jsonb_strip_nulls(jsonb_build_object(
                  'until', case when c.kind = 'sleep' then c.result -> 'until' end,
                  'event', a.event,
                  'job', case when c.kind in ('spawn', 'job') then c.result -> 'id' end,
                  'status', case when c.kind = 'job' then c.result -> 'status' end,
                  'timed_out', case when c.timed_out then true end)),
           1, 1, c.position::bigint
    from calls c
    left join awaited a on c.kind = 'event' and a.step = c.name
    union all
    select p.since, 'job.parked', case when p.timed_out then 'warn' else 'info' end, j.attempt,
           case p.waiting_for
             when 'sleep' then format('sleeping until %s', p.until)
             when 'event' then format('waiting for event %s until %s', p.event, p.until)
             else format('waiting for job %s until %s', p.awaited_job, p.until)
           end || case when p.timed_out then ': timed out, queued to resume' else '' end,
           jsonb_strip_nulls(jsonb_build_object('step', p.step, 'waiting_for', p.waiting_for, 'event', p.event,
                                                'job', p.awaited_job, 'until', p.until, 'timed_out', p.timed_out)),
           2, 1, 0
    from pgrun.job_parked(j.id) p
    union all
    select j.started_at, 'job.started', 'info', j.attempt, null,
           jsonb_strip_nulls(jsonb_build_object('worker', j.claimed_by)), 1, 0, 0
    where j.started_at is not null
    union all
    select j.finished_at, terminal,
           case j.status when 'failed' then 'error' when 'cancelled' then 'warn' else 'info' end,
           -- The error of the job's ending only: a job that failed and then
           -- succeeded keeps the old error on its row, which is not this ending's.
           j.attempt, pgrun.outcome_error(j.status, j.error) ->> 'message',
           jsonb_strip_nulls(jsonb_build_object('class', pgrun.outcome_error(j.status, j.error) ->> 'class')), 2, 0, 0
    where terminal is not null
      and not exists (select 1 from stored s
                      where s.event = terminal and s.at >= j.finished_at
                        and coalesce(s.attempt >= j.attempt, true))
  )
  select x.at, x.event, x.level, x.attempt, x.message, x.fields
  from entries x
  order by x.at, x.rank, coalesce(x.attempt, j.attempt), x.sub, x.seq;
end;
$$;
