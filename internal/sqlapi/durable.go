package sqlapi

// Durable execution (sql/functions/35_durable.sql). Each worker-side call names the
// job, the step's name and position, the worker and the claim; its status says what
// the worker does next ('done', 'none', 'parked', 'timeout', 'mismatch', 'stale').

// StepGet reads a recorded step: $1 job id, $2 name, $3 position, $4 worker, $5 claim
// id. Returns status and result.
const StepGet = `select status, result from pgrun.step_get($1, $2, $3, $4, $5)`

// RecordedSteps lists what a job recorded, for the handler holding its claim: $1 job
// id, $2 worker, $3 claim id. Returns name, pos, kind, result.
const RecordedSteps = `select name, pos, kind, result from pgrun.recorded_steps($1, $2, $3)`

// StepPut records a step's result under the claim, in the caller's transaction: $1
// job id, $2 name, $3 position, $4 result, $5 worker, $6 claim id. Returns the status.
const StepPut = `select pgrun.step_put($1, $2, $3, $4::jsonb, $5, $6)`

// SleepJob is a durable sleep: $1 job id, $2 name, $3 position, $4 until, $5 worker,
// $6 claim id. Returns the status.
const SleepJob = `select pgrun.sleep_job($1, $2, $3, $4, $5, $6)`

// AwaitEvent waits for an event: $1 job id, $2 name, $3 position, $4 event, $5 timeout
// (NULL: the longest), $6 worker, $7 claim id. Returns status and payload.
const AwaitEvent = `select status, payload from pgrun.await_event($1, $2, $3, $4, $5, $6, $7)`

// SpawnJob enqueues a child once: $1 job id, $2 name, $3 position, $4 spec, $5
// worker, $6 claim id. Returns status and the child's id.
const SpawnJob = `select status, child from pgrun.spawn_job($1, $2, $3, $4::jsonb, $5, $6)`

// AwaitJob waits for a job to finish: $1 job id, $2 name, $3 position, $4 the awaited
// job, $5 timeout (NULL: the longest), $6 worker, $7 claim id. Returns status and
// outcome ({id, status, result, error}).
const AwaitJob = `select status, outcome from pgrun.await_job($1, $2, $3, $4, $5, $6, $7)`

// EmitEvent records an event and wakes its waiters: $1 name, $2 payload. Returns
// whether this emit was the first of the name.
const EmitEvent = `select pgrun.emit_event($1, $2::jsonb)`

// WatchJob registers a client waiting for a job: $1 id. Returns the job's status if it
// has finished, else NULL (its finish is announced on pgrun_done).
const WatchJob = `select pgrun.watch_job($1)`

// ListenDone is what Client.Wait listens on.
const ListenDone = `listen pgrun_done`

// UnlistenDone ends that.
const UnlistenDone = `unlisten pgrun_done`
