-- 80_views.sql: what an operator reads in psql. Applied after every function (80): views are checked against
-- the functions and tables as they are created. Each goes through ensure_ddl, which
-- re-creates a view (dropping it first, so that a new version may change its columns)
-- only when its statement changed: re-creating it locks out its readers.

-- queue_stats answers "how is each queue doing": jobs by state (queued means due now,
-- scheduled means queued for later), the age of the oldest due job, what finished in
-- the last minute, and unhandled: due queued jobs of kinds that no live worker serving
-- the queue has a handler for (they wait for one; nothing fails them). Counts are
-- exact up to stats_exact_limit() (10,000) and estimated beyond, with estimated set:
-- 70_stats.sql says how, and how close. It counts every tenant's jobs (with the engine's
-- rights): numbers per queue, never a payload.
select pgrun.ensure_ddl('view', 'queue_stats', null, $ddl$
create view pgrun.queue_stats as
select * from pgrun.queue_counts();
$ddl$);

-- active_jobs lists what is running or parked right now, with progress. Like
-- run_status, it reads with the reader's rights (security_invoker), so the tenant
-- mode's row-level security applies to it; claim_id shows only to the claim's holder
-- and administrators (claim_token).
select pgrun.ensure_ddl('view', 'active_jobs', null, $ddl$
create view pgrun.active_jobs with (security_invoker = true) as
select j.id, j.queue, j.kind, j.status, j.attempt, j.failures, j.max_attempts,
       j.claimed_by as worker, j.started_at, now() - j.started_at as runtime,
       j.progress_current, j.progress_total,
       case when j.progress_total > 0
            then round(100.0 * j.progress_current / j.progress_total, 1) end as progress_pct,
       j.lease_expires_at, j.heartbeat_at, j.timeout, j.model, j.parent_id, j.run_id, j.node, j.tenant,
       pgrun.claim_token(j.id) as claim_id
from pgrun.jobs j
where j.status in ('running', 'waiting');
$ddl$);

-- worker_status lists registered runners, how long since each was seen, whether
-- maintain() flagged them dead, and how many jobs each holds. liveness is what an
-- operator sorts them by: 'live' (worker_alive: heard from within three heartbeat
-- cadences, not flagged, not stopped), 'stopped' (it said so when it shut down) or
-- 'dead' (silent for longer, or flagged), whether or not it held jobs. Time is the
-- engine's clock, so a test can pin it (pgrun.clock). The jobs held are counted for
-- all workers in one pass of the running index: counted worker by worker, each count
-- walked the running jobs of every worker (the index is not by worker), 280-470 ms
-- for 20 workers beside 40,000 running jobs.
select pgrun.ensure_ddl('view', 'worker_status', null, $ddl$
create view pgrun.worker_status as
select w.id, w.host, w.pid, w.state, w.queues, w.models, w.version, w.started_at,
       w.last_seen, c.at - w.last_seen as since_seen, w.cadence, w.flagged_dead_at,
       pgrun.worker_alive(w, c.at) as alive, w.kinds,
       coalesce(r.n, 0) as running,
       case when w.state = 'stopped' then 'stopped'
            when pgrun.worker_alive(w, c.at) then 'live'
            else 'dead' end as liveness
from pgrun.workers w
cross join (select pgrun.clock() as at) c
left join (select j.claimed_by, count(*) as n from pgrun.jobs j
           where j.status = 'running' group by j.claimed_by) r on r.claimed_by = w.id;
$ddl$);

-- run_status shows every node of every run: its job, state and progress.
select pgrun.ensure_ddl('view', 'run_status', null, $ddl$
create view pgrun.run_status with (security_invoker = true) as
select r.id as run_id, r.workflow, r.version, r.status as run_status, j.node, j.id as job_id,
       j.kind, j.status, j.deps_remaining, j.attempt, j.progress_current, j.progress_total,
       j.started_at, j.finished_at, j.error ->> 'class' as error_class,
       j.error ->> 'message' as error_message, r.tenant
from pgrun.runs r
join pgrun.jobs j on j.run_id = r.id and j.parent_id is null;
$ddl$);

-- host_status is the latest hardware sample of each host. self_* are the sampling
-- runner's own share (its cgroup v2, or its process: self_source), others_* the rest
-- of the host; NULL where the runner could not read its share.
select pgrun.ensure_ddl('view', 'host_status', null, $ddl$
create view pgrun.host_status as
select distinct on (m.host) m.host, m.at, now() - m.at as age, m.cpu_pct, m.mem_used, m.mem_total,
       jsonb_array_length(m.gpus) as gpu_count, m.gpus,
       m.self ->> 'worker' as self_worker, m.self ->> 'source' as self_source,
       (m.self ->> 'cpu_pct')::real as self_cpu_pct, (m.self ->> 'mem_used')::bigint as self_mem_used,
       greatest(m.cpu_pct - (m.self ->> 'cpu_pct')::real, 0) as others_cpu_pct,
       greatest(m.mem_used - (m.self ->> 'mem_used')::bigint, 0) as others_mem_used
from pgrun.hw_metrics m
order by m.host, m.at desc;
$ddl$);
