package sqlapi

// ListWorkers reads the registered runners by id (the worker_status view).
const ListWorkers = `select id, host, pid, state, queues, models, version, started_at, last_seen,
	since_seen, cadence, flagged_dead_at, alive, kinds, running
	from pgrun.worker_status order by id`
