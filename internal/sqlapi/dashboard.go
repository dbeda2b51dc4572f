package sqlapi

// The dashboard's statements (package ui, `runner ui`). Each list is read newest
// first by primary key with a keyset cursor ("id < $cursor ... order by id desc
// limit n"), never with OFFSET, and every statement is bounded so that a page stays
// fast with millions of jobs: lists without a selective index read at most a window
// of ids (the inner "limit"), and the page offers to go on further back. The lists
// in other orders (running, queued, a run's jobs) are in dashboard_lists.go.

// DashboardQueues is the overview's per-queue line: pgrun.queue_stats (exact up to
// 10,000 per number, estimated beyond; stats.sql), the oldest due job's age in
// seconds, and the live workers serving each queue. It reads pgrun.workers, which a
// read-only role must be granted (docs/ui.md).
const DashboardQueues = `select s.queue, s.paused, s.queued, s.scheduled, s.running, s.pending, s.waiting,
       extract(epoch from s.oldest_queued_age)::float8 as oldest_queued_secs,
       s.succeeded_1m, s.failed_1m, s.cancelled_1m, s.unhandled, s.estimated,
       coalesce(w.live, 0) as live_workers
from pgrun.queue_stats s
left join (select q.q, count(*) as live
           from pgrun.workers x, unnest(x.queues) q(q)
           where pgrun.worker_alive(x, now())
           group by q.q) w on w.q = s.queue
order by s.queue`

// dashboardJobColumns are a list row's columns: no args or result, the error's
// class and message only.
const dashboardJobColumns = `j.id, j.kind, j.queue, j.status::text as status, j.priority, j.attempt, j.max_attempts,
       j.created_at, j.run_at, j.started_at, j.finished_at, j.progress_current, j.progress_total,
       j.parent_id, j.run_id, j.node, j.claimed_by,
       j.error ->> 'class' as error_class, left(j.error ->> 'message', 300) as error_message`

// DashboardJobIDBounds returns the smallest and largest job ids (NULLs on an empty
// table), the ends of the time-range search.
const DashboardJobIDBounds = `select min(id), max(id) from pgrun.jobs`

// DashboardJobProbe returns the first job at or after id $1: its id and created_at.
// The jobs page turns a time range into ids with a binary search of these probes
// (ids grow with enqueue time), one primary key lookup each.
const DashboardJobProbe = `select id, created_at from pgrun.jobs where id >= $1 order by id limit 1`

// DashboardChildStates counts job $1's children by status.
const DashboardChildStates = `select status::text as status, count(*) as n
from pgrun.jobs where parent_id = $1 group by status order by status`

// DashboardTimeline is job $1's story (pgrun.job_timeline), oldest first, at most $2
// entries.
const DashboardTimeline = `select at, event, level, attempt, message, fields from pgrun.job_timeline($1) limit $2`

// DashboardSteps is job $1's timeline entries named $3 (TimelineParkedEvent: what
// it waits for while parked) and then those named in $2 (TimelineStepEvents: the
// calls its handler recorded) oldest first, at most $4 in all, so that the parked
// entry is there however many steps come before it. It reads them from
// pgrun.job_timeline, the one function of a job's story a read-only dashboard role
// may call (docs/ui.md).
const DashboardSteps = `select t.at, t.event, t.level, t.attempt, t.message, t.fields
from pgrun.job_timeline($1) with ordinality t(at, event, level, attempt, message, fields, n)
where t.event = any ($2::text[]) or t.event = $3
order by t.event = $3 desc, t.n
limit $4`

// DashboardRuns is a page of workflow runs below id $1 and at or above $4 (a window
// of ids, as for jobs), newest first, of workflow $2 and status $3 (NULL: any), at
// most $5; with each its count of node jobs, and of those done (succeeded or
// skipped), failed (or cancelled) and running (or waiting).
const DashboardRuns = `select r.id, r.workflow, r.version, r.status::text as status, r.created_at, r.finished_at,
       coalesce(r.error ->> 'message',
                nullif(concat_ws(': ', 'node ' || (r.error ->> 'node'), r.error #>> '{error,message}'), '')) as error_message,
       n.nodes, n.done, n.failed, n.running
from pgrun.runs r
cross join lateral (
  select count(*) as nodes,
         count(*) filter (where j.status in ('succeeded', 'skipped')) as done,
         count(*) filter (where j.status in ('failed', 'cancelled')) as failed,
         count(*) filter (where j.status in ('running', 'waiting')) as running
  from pgrun.jobs j where j.run_id = r.id and j.parent_id is null) n
where r.id < $1 and r.id >= $4
  and ($2::text is null or r.workflow = $2) and ($3::text is null or r.status::text = $3)
order by r.id desc
limit $5`

// DashboardRunIDMax is the newest run id (NULL without runs), where the runs list
// starts.
const DashboardRunIDMax = `select max(id) from pgrun.runs`

// DashboardRunNodes lists run $1's node jobs (not map children) with what the DAG
// page shows of each. A map node's progress_current, progress_total and
// children_failed are its children done (succeeded or skipped), all of them and
// failed, as the engine counts them while it waits (children_finished, 33_children.sql).
const DashboardRunNodes = `select j.node, j.id as job_id, j.kind, j.status::text as status, j.attempt,
       j.progress_current, j.progress_total, j.children_failed, j.started_at, j.finished_at,
       j.error ->> 'message' as error_message
from pgrun.jobs j where j.run_id = $1 and j.parent_id is null
order by j.id`

// DashboardRunChildStates counts the children of run $1's node jobs (map children,
// which have parent_id but no run_id) by parent and status, reading at most the first
// $2 children of each node (by jobs_parent_idx in id order), so that a map of 60,000
// children costs $2 rows: a node whose counts add up to $2 has more.
const DashboardRunChildStates = `select n.id as parent_id, c.status, count(*) as n
from pgrun.jobs n
cross join lateral (select x.status::text as status from pgrun.jobs x
                    where x.parent_id = n.id order by x.id limit $2) c
where n.run_id = $1 and n.parent_id is null
group by n.id, c.status`

// DashboardWorkers lists registered workers (pgrun.worker_status), live ones first,
// at most $1.
const DashboardWorkers = `select id, host, pid, state, queues, models, kinds, version, started_at, last_seen,
       extract(epoch from since_seen)::float8 as since_seen_secs, flagged_dead_at, alive, running, liveness
from pgrun.worker_status
order by alive desc, host, id
limit $1`

// DashboardWorkerControl lists the operator's worker switches per host and queue.
const DashboardWorkerControl = `select host, queue, mode, updated_at from pgrun.worker_control order by host, queue`

// DashboardHostSamples returns the hardware samples of the last $1 seconds, by
// host then time: CPU %, memory, and the GPUs' utilisation and memory (summed over
// a host's GPUs).
const DashboardHostSamples = `select m.host, m.at, m.cpu_pct::float8 as cpu_pct, m.mem_used, m.mem_total,
       jsonb_array_length(m.gpus) as gpu_count,
       (select avg((g ->> 'utilization')::float8) from jsonb_array_elements(m.gpus) g) as gpu_util,
       (select sum((g ->> 'memory_used')::float8) from jsonb_array_elements(m.gpus) g) as gpu_mem_used,
       (select sum((g ->> 'memory_total')::float8) from jsonb_array_elements(m.gpus) g) as gpu_mem_total,
       (select string_agg(distinct g ->> 'name', ', ') from jsonb_array_elements(m.gpus) g) as gpu_names
from pgrun.hw_metrics m
where m.at > now() - make_interval(secs => $1)
order by m.host, m.at`

// DashboardSchedules lists the cron schedules with their last job's status.
const DashboardSchedules = `select s.name, s.cron, s.kind, s.queue, s.timezone, s.enabled, s.next_fire_at,
       s.last_fire_at, s.last_job_id, j.status::text as last_job_status
from pgrun.schedules s
left join pgrun.jobs j on j.id = s.last_job_id
order by s.name`

// DashboardPoisonedOutbox lists the newest $1 outbox rows flagged poison: dispatches
// (fan-in, DAG expansion) that kept failing.
const DashboardPoisonedOutbox = `select o.id, o.job_id, o.event, o.attempts, o.last_error, o.created_at, o.poisoned_at
from pgrun.outbox o
where o.poisoned_at is not null
order by o.id desc
limit $1`

// DashboardFingerprint sums up what changes without a notification (completions,
// progress, heartbeats), for the live updates: the newest finish, the running jobs'
// progress and last beat, and the newest worker heartbeat. Cheap: the finished index
// backwards, the running index, the workers. (A waiting parent's progress moves
// when a child finishes, which the newest finish catches.)
const DashboardFingerprint = `select concat_ws('|',
  (select max(finished_at) from pgrun.jobs where finished_at is not null),
  (select count(*) || ':' || coalesce(sum(progress_current), 0) || ':' || coalesce(max(heartbeat_at)::text, '')
   from pgrun.jobs where status = 'running'),
  (select max(last_seen) from pgrun.workers))`
