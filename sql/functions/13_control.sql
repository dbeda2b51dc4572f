-- 13_control.sql: the operator's switch for runners, per host and queue.

-- set_worker_control sets the mode of host's runners for queue ('*': every queue; the
-- most restrictive of a queue's own mode and the '*' mode applies):
--   on     claim as usual;
--   drain  claim nothing more and let in-flight jobs finish;
--   off    claim nothing, and requeue the host's in-flight jobs of the queue at once,
--          without spending an attempt (event job.requeued); each job's worker is
--          told on pgrun_cancel (payload id:attempt) to stop its handler, whose late
--          report then matches nothing. A worker that misses the notification finds
--          out at its next lease renewal.
-- claim_jobs obeys it at once, and pgrun_control carries the host name for whoever
-- shows it. All of it is done here, so a worker in any language gets it by honouring
-- the cancel notification. Returns the mode set.
create or replace function pgrun.set_worker_control(host text, queue text, mode text)
returns text
language plpgsql
set search_path = pgrun, pg_catalog
as $$
#variable_conflict use_column
begin
  if host is null or host = '' then
    raise exception 'host must not be empty'
      using errcode = '22023', hint = 'Pass a host name as in SELECT DISTINCT host FROM pgrun.workers;';
  end if;
  if queue is distinct from '*' then
    perform pgrun.check_queue_name(queue);
  end if;
  if mode is null or mode not in ('on', 'drain', 'off') then
    raise exception 'worker control mode % is not valid', coalesce(quote_literal(mode), 'NULL')
      using errcode = '22023', hint = 'Use on, drain or off.';
  end if;
  insert into pgrun.worker_control as c (host, queue, mode)
  values (set_worker_control.host, set_worker_control.queue, set_worker_control.mode)
  on conflict (host, queue) do update set mode = excluded.mode, updated_at = now();
  if mode = 'off' then
    perform pgrun.put_back(j.id, j.attempt, interval '0', 'job.requeued', 'an operator turned the worker off'),
            pg_notify('pgrun_cancel', j.id || ':' || j.attempt)
    from pgrun.jobs j
    where j.status = 'running'
      and (set_worker_control.queue = '*' or j.queue = set_worker_control.queue)
      and j.claimed_by in (select w.id from pgrun.workers w where w.host = set_worker_control.host);
  end if;
  perform pg_notify('pgrun_control', host);
  if mode = 'on' then
    perform pg_notify('pgrun_jobs', q.name) from pgrun.queues q where queue = '*' or q.name = queue;
  end if;
  return mode;
end;
$$;

-- worker_modes returns the effective mode per queue for host: the most restrictive
-- of the queue's own row and the host's '*' row (off over drain over on), else on.
-- claim_jobs applies the same rule.
create or replace function pgrun.worker_modes(host text, queues text[])
returns table (queue text, mode text)
language sql
stable
set search_path = pgrun, pg_catalog
as $$
  select q, coalesce(
    (select c.mode from pgrun.worker_control c
     where c.host = worker_modes.host and c.queue in (q, '*')
     order by array_position(array['off', 'drain', 'on'], c.mode)
     limit 1),
    'on')
  from unnest(queues) q
$$;
