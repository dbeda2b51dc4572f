package sqlapi

// The statements of `runner status` and `runner top` (package internal/top). They
// read the views and pgrun.finished_counts (70_stats.sql), so that the rules (what
// counts as live, how counts are estimated) stay in SQL.

// StatusQueues is each queue's line: pgrun.queue_stats (counts, oldest due job, the
// last minute's endings, unhandled), the endings of the last 10 seconds
// (finished_counts) and how many live workers serve the queue (worker_status.liveness).
const StatusQueues = `select s.queue, s.paused, s.queued, s.scheduled, s.running, s.pending, s.waiting,
       s.oldest_queued_age, s.succeeded_1m, s.failed_1m, s.cancelled_1m, s.unhandled, s.estimated,
       coalesce(t.succeeded, 0) as succeeded_10s, coalesce(t.failed, 0) as failed_10s,
       coalesce(t.cancelled, 0) as cancelled_10s, coalesce(t.estimated, false) as estimated_10s,
       coalesce(w.live, 0) as live_workers
from pgrun.queue_stats s
left join pgrun.finished_counts(interval '10 seconds') t on t.queue = s.queue
left join (select q.q, count(*) as live
           from pgrun.worker_status x, unnest(x.queues) q(q)
           where x.liveness = 'live'
           group by q.q) w on w.q = s.queue
order by s.queue`

// StatusWorkers lists the registered workers, live ones first, then the dead, then
// the stopped, each by id.
const StatusWorkers = `select id, host, pid, state, liveness, queues, models, last_seen, since_seen, cadence,
       flagged_dead_at, running
from pgrun.worker_status
order by case liveness when 'live' then 0 when 'dead' then 1 else 2 end, id`

// StatusHosts is the latest hardware sample of each host (pgrun.host_status).
const StatusHosts = `select host, at, coalesce(cpu_pct, 0) as cpu_pct, coalesce(mem_used, 0) as mem_used,
       coalesce(mem_total, 0) as mem_total, gpus
from pgrun.host_status
order by host`

// TopRunningJobs lists at most $1 running jobs, longest running first, with their
// progress; runtime is by the engine's clock.
const TopRunningJobs = `select j.id, j.queue, j.kind, j.attempt, j.claimed_by as worker, c.at - j.started_at as runtime,
       j.progress_current, j.progress_total
from pgrun.jobs j, (select pgrun.clock() as at) c
where j.status = 'running'
order by j.started_at, j.id
limit $1`
