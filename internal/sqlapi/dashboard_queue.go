package sqlapi

// One queue's page of the dashboard (/queues/NAME, ui/page_queue.go) and `runner queue
// show`: its settings, its counts, the keys using its per-key limits, its held
// sequences and its first due jobs with what holds each. Every read is bounded by the
// rows it returns (75_queue_view.sql, and the claim index level by level below), so
// the page costs the same beside a million queued jobs as beside ten.

// DashboardQueue is queue $1's settings (pgrun.queues), its intervals in seconds (the
// rates' periods as the claim applies them, pgrun.rate_period: a second when unset),
// and its queue-wide rate window now: the claims in it and when it ends (NULLs when no
// window is open). No row for an unknown queue.
const DashboardQueue = `select q.name as queue, q.paused, q.max_running, q.rate_limit,
       extract(epoch from pgrun.rate_period(q.rate_period))::float8 as rate_period_secs,
       case when q.rate_window_start + pgrun.rate_period(q.rate_period) > pgrun.clock() then q.rate_window_count end
         as rate_window_count,
       case when q.rate_window_start + pgrun.rate_period(q.rate_period) > pgrun.clock()
            then q.rate_window_start + pgrun.rate_period(q.rate_period) end as rate_window_ends,
       q.concurrency_limit, q.key_rate_limit, extract(epoch from pgrun.rate_period(q.key_rate_period))::float8 as key_rate_period_secs,
       q.fair_by, extract(epoch from q.priority_aging)::float8 as priority_aging_secs, q.sequence_on_failure,
       extract(epoch from q.default_lease)::float8 as default_lease_secs,
       extract(epoch from q.default_timeout)::float8 as default_timeout_secs, q.default_max_attempts,
       extract(epoch from q.backoff_base)::float8 as backoff_base_secs,
       extract(epoch from q.backoff_max)::float8 as backoff_max_secs,
       extract(epoch from q.retention)::float8 as retention_secs, q.archive,
       extract(epoch from q.warm_wait)::float8 as warm_wait_secs, q.ephemeral
from pgrun.queues q
where q.name = $1`

// DashboardQueueStats is queue $1's line of pgrun.queue_stats (exact up to 10,000 per
// number, estimated beyond; 70_stats.sql), the oldest due job's age in seconds, and the
// live workers serving it, as DashboardQueues has them.
const DashboardQueueStats = `select s.queued, s.scheduled, s.running, s.pending, s.waiting,
       extract(epoch from s.oldest_queued_age)::float8 as oldest_queued_secs,
       s.succeeded_1m, s.failed_1m, s.cancelled_1m, s.unhandled, s.estimated, s.held,
       s.keys_running, s.key_windows, s.keys_at_limit,
       (select count(*) from pgrun.workers x where $1 = any (x.queues) and pgrun.worker_alive(x, now())) as live_workers
from pgrun.queue_stats s
where s.queue = $1`

// DashboardQueueKeys lists the keys of queue $1 that use its per-key limits now, those
// at their limit first, at most $2 (pgrun.queue_keys, 75_queue_view.sql).
const DashboardQueueKeys = `select key, running, concurrency_limit, window_count, key_rate_limit, window_ends, room,
       queued, queued_more, keys_in_use
from pgrun.queue_keys($1, $2)`

// DashboardQueueSequences lists the sequences of queue $1 that hold jobs, those a
// failure stopped first, at most $2 (pgrun.queue_sequences, 75_queue_view.sql).
const DashboardQueueSequences = `select sequence_key, tenant, head_id, head_status, held, held_more, first_held,
       reason, stopped
from pgrun.queue_sequences($1, $2)`

// DashboardQueueDue lists queue $1's first $2 due jobs (run_at at or before the
// engine's clock) by priority, due time and id, each with why it is not being claimed
// (pgrun.job_blocker; NULL: nothing holds it but the jobs ahead of it). The claim's own
// order is this one unless the queue has fairness or aging. Read level by level of
// jobs_claim_idx, as queue_counts finds the oldest due job: one probe per priority in
// use, then at most $2 entries of each, so jobs scheduled for later are never walked.
const DashboardQueueDue = `with recursive levels(p) as (
  select (select j.priority from pgrun.jobs j where j.queue = $1 and j.status = 'queued' order by j.priority limit 1)
  union all
  select (select j.priority from pgrun.jobs j where j.queue = $1 and j.status = 'queued' and j.priority > l.p
          order by j.priority limit 1)
  from levels l where l.p is not null
)
select j.id, j.kind, j.priority, j.run_at, j.attempt, j.concurrency_key, j.sequence_key, j.tenant,
       pgrun.job_blocker(j.id) as blocker
from (select x.id, x.priority, x.run_at from levels l
      cross join lateral (select y.id, y.priority, y.run_at from pgrun.jobs y
                          where y.queue = $1 and y.status = 'queued' and y.priority = l.p
                            and y.run_at <= pgrun.clock()
                          order by y.run_at, y.id limit $2) x
      where l.p is not null
      order by x.priority, x.run_at, x.id
      limit $2) k
join pgrun.jobs j on j.id = k.id
order by k.priority, k.run_at, k.id`
