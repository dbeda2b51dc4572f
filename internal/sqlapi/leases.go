package sqlapi

// RenewLeases renews the leases of the jobs a worker holds and returns the ids it
// still holds: $1 worker, $2 ids, $3 lease (NULL: each queue's default), $4 claim ids.
const RenewLeases = `select pgrun.renew_leases($1, $2, $3, $4)`

// Beat records a sign of life of running jobs: $1 ids, $2 worker, $3 their claim ids.
const Beat = `select pgrun.beat($1, $2, $3)`

// ReleaseUnheld hands back the jobs running under a worker whose claims it does not
// hold, without spending an attempt, and returns their ids: $1 worker, $2 held claim
// ids.
const ReleaseUnheld = `select pgrun.release_unheld($1, $2)`

// ClaimStates reads what a runner checks a cancel notification against, for each of
// $1 ids: id, attempt, status, claimed_by (empty for none), the error's class (empty for
// none) and claim_id (pgrun.claim_token: NULL unless this login holds the claim).
const ClaimStates = `select id, attempt, status::text as status, coalesce(claimed_by, '') as claimed_by,
	coalesce(error ->> 'class', '') as class, pgrun.claim_token(id) as claim_id from pgrun.jobs where id = any ($1)`

// BindWorkerSession ties a worker's liveness to the calling session (a session-level
// advisory lock that pgrun.reap_lost_sessions looks for; once the session ends the
// worker's jobs are handed back) and says how it went: bound, revived, held,
// unregistered or pooled: $1 worker, $2 the backend pid the connection was given.
const BindWorkerSession = `select pgrun.bind_worker_session($1, $2)`
