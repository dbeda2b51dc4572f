package sqlapi

// Emit appends an event to a job's audit log: $1 job id, $2 event, $3 fields, $4
// worker, $5 claim id (the claim the handler runs under).
const Emit = `select pgrun.emit($1, $2, $3::jsonb, worker => $4, claim_id => $5)`

// SetProgress records a job's progress: $1 id, $2 current, $3 total (NULL keeps the
// previous total), $4 worker, $5 claim id.
const SetProgress = `select pgrun.set_progress($1, $2, $3, $4, $5)`
