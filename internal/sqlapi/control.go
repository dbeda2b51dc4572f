package sqlapi

// SetWorkerControl sets the mode of a host's runners for a queue
// (pgrun.set_worker_control): $1 host, $2 queue ('*': every queue), $3 mode (on,
// drain, off).
const SetWorkerControl = `select pgrun.set_worker_control($1, $2, $3)`

// ListWorkerControl reads every operator switch by host and queue.
const ListWorkerControl = `select host, queue, mode, updated_at from pgrun.worker_control order by host, queue`
