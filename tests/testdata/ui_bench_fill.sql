-- ui_bench_fill.sql fills a dedicated, freshly migrated database with 5,000,000 jobs
-- for BenchmarkUIPages (tests/ui_bench_test.go): a week of history, newest last, in
-- the shape a busy installation has. It writes pgrun.jobs directly with
-- generate_series, with the insert triggers off (session_replication_role = replica,
-- superuser only), in five transactions of a million rows, then adds what the pages
-- show besides jobs (runs, workers, host samples, schedules, poisoned outbox rows)
-- through the engine's own functions. Run it once: it takes a few minutes.
--
--   * ids 1 .. 4,898,000: finished over the last 7 days. Every 50th failed (with an
--     error and a stack), every 97th cancelled, the rest succeeded; one in 10,007 is
--     in the rare queue "audit".
--   * ids 4,898,001 .. 4,900,000: running (workers bench-1 .. bench-4), with progress.
--   * ids 4,900,001 .. 5,000,000: queued, one in ten scheduled an hour ahead.
--   * in the last 90 minutes, a burst of "smtp 421" and "550" failures in queue emails;
--     job 4,898,001 has been running for five hours; the week is rolled up.
-- Queues default, images, emails, reports, gpu (and audit); args carry user_id and url,
-- and one job in a thousand a "tenant_key" (a rare key for the args filter).
set session_replication_role = replica;
set synchronous_commit = off;

insert into pgrun.queues (name) values ('default'), ('images'), ('emails'), ('reports'), ('gpu'), ('audit')
on conflict do nothing;

create temporary table fill_chunk (lo bigint, hi bigint);
insert into fill_chunk select c * 1000000 + 1, (c + 1) * 1000000 from generate_series(0, 4) c;

create or replace procedure pg_temp.fill(lo bigint, hi bigint)
language sql
as $$
insert into pgrun.jobs (kind, queue, args, status, priority, run_at, attempt, failures, max_attempts,
                        claimed_by, lease_expires_at, heartbeat_at, created_at, started_at, finished_at,
                        result, error, progress_current, progress_total, claim_id, lease_length)
select (array['resize', 'send_email', 'report', 'embed', 'sync', 'noop', 'webhook'])[1 + g % 7],
       case when g % 10007 = 0 then 'audit'
            else (array['default', 'images', 'emails', 'reports', 'gpu'])[1 + g % 5] end,
       case when g % 1000 = 0 then jsonb_build_object('user_id', g % 100000, 'url', 'https://example.com/' || g, 'tenant_key', 't' || g % 17)
            else jsonb_build_object('user_id', g % 100000, 'url', 'https://example.com/' || g) end,
       (case when g > 4900000 then 'queued'
             when g > 4898000 then 'running'
             when g % 50 = 0 then 'failed'
             when g % 97 = 0 then 'cancelled'
             else 'succeeded' end)::pgrun.job_status,
       0,
       t.created + case when g > 4900000 and g % 10 = 0 then interval '1 hour' else interval '0' end,
       case when g > 4900000 then 0 when g % 50 = 0 then 3 else 1 end,
       case when g % 50 = 0 and g <= 4898000 then 3 else 0 end,
       case when g % 50 = 0 and g <= 4898000 then 3 else 25 end,
       case when g > 4898000 and g <= 4900000 then 'bench-' || (1 + g % 4) end,
       case when g > 4898000 and g <= 4900000 then now() + interval '1 minute' end,
       case when g > 4898000 and g <= 4900000 then now() end,
       t.created,
       case when g <= 4900000 then t.created + (g % 900) * interval '1 millisecond' end,
       case when g <= 4898000 then t.created + (g % 900) * interval '1 millisecond' + (50 + g % 2000) * interval '1 millisecond' end,
       case when g <= 4898000 and g % 50 <> 0 and g % 97 <> 0 then jsonb_build_object('ok', true, 'bytes', g % 65536) end,
       case when g <= 4898000 and g % 50 = 0 then
              jsonb_build_object('class', 'transient', 'message', 'timeout talking to upstream ' || g % 13,
                                 'stack', E'goroutine 7 [running]:\nmain.handler()\n\t/src/handler.go:42 +0x1d\nmain.run()\n\t/src/main.go:17 +0x5')
            when g <= 4898000 and g % 97 = 0 then jsonb_build_object('class', 'cancelled', 'message', 'cancelled by an operator')
       end,
       case when g > 4898000 and g <= 4900000 then g % 100 else 0 end,
       case when g > 4898000 and g <= 4900000 then 100 end,
       case when g <= 4900000 then gen_random_uuid() end,
       case when g <= 4900000 then interval '1 minute' end
from generate_series(lo, hi) g,
     lateral (select now() - interval '7 days' + g * (interval '7 days' / 5000000) as created) t;
$$;

do $$
declare
  c record;
begin
  if (select count(*) from (select 1 from pgrun.jobs limit 1) x) > 0 then
    raise exception 'pgrun.jobs is not empty: fill a freshly migrated database'
      using errcode = '22023', hint = 'Create a dedicated database, run `runner migrate up` on it, then this file.';
  end if;
end;
$$;

call pg_temp.fill(1, 1000000);
call pg_temp.fill(1000001, 2000000);
call pg_temp.fill(2000001, 3000000);
call pg_temp.fill(3000001, 4000000);
call pg_temp.fill(4000001, 5000000);

-- Audit events for the failed jobs of the last day (the job page's timeline).
insert into pgrun.job_events (job_id, at, event, level, message, fields)
select j.id, j.finished_at, 'job.failed', 'error', j.error ->> 'message', jsonb_build_object('attempt', j.attempt)
from pgrun.jobs j
where j.id > 4200000 and j.status = 'failed';

-- The incident of issue 34: over the last 90 minutes, a burst of "smtp 421" failures
-- in queue emails (1,800) mixed with permanent "550 mailbox unavailable" ones (180),
-- each message with its own ids, as a mail server writes them: 45,000 jobs of the
-- history's end, moved to end in the last 90 minutes.
update pgrun.jobs j
set status = 'failed', result = null, attempt = 3, failures = 3, max_attempts = 3,
    finished_at = now() - interval '90 minutes' + (j.id - 4853000) * (interval '90 minutes' / 45000),
    started_at = now() - interval '90 minutes' + (j.id - 4853000) * (interval '90 minutes' / 45000) - interval '800 milliseconds',
    error = jsonb_build_object('class', 'transient', 'message',
      case when j.id % 250 = 7 then format('550 5.1.1 <user%s@example.com>: mailbox unavailable', j.id % 997)
           else format('smtp 421 4.7.0 [10.0.%s.%s] try again later (session %s)', j.id % 7, j.id % 251, md5(j.id::text)) end)
where j.id between 4853001 and 4898000 and (j.id % 25 = 2 or j.id % 250 = 7);

-- A job running for five hours, which the running list must show first.
update pgrun.jobs set started_at = now() - interval '5 hours', created_at = now() - interval '5 hours'
where id = 4898001;

-- A poisoned outbox row or two (dead letters).
insert into pgrun.outbox (job_id, event, attempts, next_attempt_at, last_error, poisoned_at)
values (4897950, 'dispatch', 10, now(), 'fan-in failed: deadlock detected', now() - interval '1 hour'),
       (4897900, 'dispatch', 10, now(), 'fan-in failed: could not serialize access', now() - interval '2 hours');
set session_replication_role = origin;

-- Runs, workers, host samples and schedules, through the engine.
select pgrun.define_workflow('etl', '{"nodes": [
  {"name": "extract", "kind": "noop"},
  {"name": "clean", "kind": "noop", "deps": ["extract"]},
  {"name": "enrich", "kind": "noop", "deps": ["extract"]},
  {"name": "load", "kind": "noop", "deps": ["clean", "enrich"]},
  {"name": "report", "kind": "noop", "deps": ["load"]}]}');
select pgrun.start_run('etl', jsonb_build_object('day', d)) from generate_series(1, 200) d;
select pgrun.worker_heartbeat('bench-' || w, 'host-' || (1 + w % 2), 1000 + w,
                              array['default', 'images', 'emails', 'reports', 'gpu'], array['bge-small'])
from generate_series(1, 4) w;
-- An hour of host samples every 10 s (record_hw stamps one sample with the clock).
insert into pgrun.hw_metrics (host, at, cpu_pct, mem_used, mem_total, gpus)
select 'host-' || h, now() - s * interval '10 seconds', (20 + (s * h) % 60)::real, (8 + s % 4)::bigint << 30,
       32::bigint << 30,
       jsonb_build_array(jsonb_build_object('index', 0, 'name', 'L4', 'memory_total', 24::bigint << 30,
                                            'memory_used', (s % 20)::bigint << 30, 'utilization', (s * 7) % 100))
from generate_series(1, 2) h, generate_series(0, 359) s;
select pgrun.set_schedule('nightly-report', '0 2 * * *', 'report', '{"kind": "daily"}', queue => 'reports');
select pgrun.set_schedule('heartbeat', '@every 30s', 'noop');
-- The per-minute rollups of the week, as maintenance keeps them (a few minutes a
-- call: rollup_minutes catches up in steps).
do $$
begin
  for i in 1..10000 loop
    exit when pgrun.rollup_minutes(clock_timestamp()) = 0;
  end loop;
end;
$$;
vacuum analyze pgrun.jobs;
vacuum analyze pgrun.job_events;
