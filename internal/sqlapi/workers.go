package sqlapi

// ListWorkers reads the registered runners by id (the worker_status view).
const ListWorkers = `select id, host, pid, state, queues, models, version, started_at, last_seen,
	since_seen, cadence, flagged_dead_at, alive, kinds, running, liveness
	from pgrun.worker_status order by id`

// WorkerHeartbeat records a worker's state in pgrun.workers: $1 id, $2 host, $3 pid,
// $4 queues, $5 warm models, $6 version, $7 state, $8 cadence, $9 servable models,
// $10 handled kinds.
const WorkerHeartbeat = `select pgrun.worker_heartbeat($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// QueuePeers counts, per queue, the other live workers that serve it, and gives the
// window of its rate limit (else of its per-key rate limit) in microseconds, 0 when it
// has none (a claim held back by a rate limit finds room as time passes, not as jobs
// finish; see pgrun.jobs_room_made), and whether completions announce room in it
// (max_running or concurrency_limit: pgrun.announces_room), and the key it is fair by
// (fair_by; empty for none): $1 worker id, $2 queues. A queue with no row in pgrun.queues
// has no limit.
const QueuePeers = `select p.queue, p.peers,
       coalesce(case when q.rate_limit is not null
                     then (extract(epoch from pgrun.rate_period(q.rate_period)) * 1000000)::bigint
                     when q.key_rate_limit is not null
                     then (extract(epoch from pgrun.rate_period(q.key_rate_period)) * 1000000)::bigint end, 0),
       coalesce(pgrun.announces_room(q.max_running, q.concurrency_limit), false),
       coalesce(q.fair_by, '')
from pgrun.queue_peers($1, $2) p left join pgrun.queues q on q.name = p.queue`
