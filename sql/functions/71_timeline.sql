-- 71_timeline.sql: a job's whole story in one query. The audit log (job_events) holds
-- only what a person will want to read later; routine transitions (enqueued, started,
-- succeeded) live as timestamps on the job row. job_timeline puts the two together
-- at read time, so the hot path writes no extra rows.

-- job_timeline returns job id's timeline, oldest first:
--   * job.enqueued at created_at (attempt 0: no claim yet);
--   * every stored event of job_events, with its attempt taken from
--     fields->>'attempt' (NULL when the event does not name one);
--   * job.started at started_at, for the current attempt only (earlier starts are
--     overwritten on the row; their failures and expiries are stored events);
--   * for a finished job (succeeded, failed, cancelled, skipped), job.<status> at
--     finished_at, unless a stored event of that name already records this ending:
--     one written at or after finished_at and naming no attempt or one at or after
--     the current attempt (fail_job and cancel_job write job.failed and
--     job.cancelled in the transaction that finishes the job, so those are not
--     repeated; an ending that wrote no such event, a success, a skip or a failure
--     by lease expiry, gets one).
-- Entries from the row have level info, except job.failed (error) and job.cancelled
-- (warn); a synthetic terminal entry carries the error's message and class. Order:
-- at, then enqueued first and the terminal entry last, then attempt (an entry naming
-- none counts as the current attempt), job.started before the stored events of its
-- attempt, then event id. Reads only; raises P0002 (job_not_found) for an unknown id
-- (and, in the tenant mode, for another tenant's job).
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
  entries as (
    select j.created_at as at, 'job.enqueued'::text as event, 'info'::text as level, 0 as attempt,
           null::text as message, jsonb_build_object('kind', j.kind, 'queue', j.queue) as fields,
           0 as rank, 0 as sub, 0::bigint as seq
    union all
    select s.at, s.event, s.level, s.attempt, s.message, s.fields, 1, 1, s.id
    from stored s
    union all
    select j.started_at, 'job.started', 'info', j.attempt, null,
           jsonb_strip_nulls(jsonb_build_object('worker', j.claimed_by)), 1, 0, 0
    where j.started_at is not null
    union all
    select j.finished_at, terminal,
           case j.status when 'failed' then 'error' when 'cancelled' then 'warn' else 'info' end,
           j.attempt, j.error ->> 'message',
           jsonb_strip_nulls(jsonb_build_object('class', j.error ->> 'class')), 2, 0, 0
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
