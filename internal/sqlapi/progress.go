package sqlapi

// Emit appends an event to a job's audit log: $1 job id, $2 event, $3 fields.
const Emit = `select pgrun.emit($1, $2, $3::jsonb)`

// SetProgress records a job's progress: $1 id, $2 current, $3 total (NULL keeps the
// previous total).
const SetProgress = `select pgrun.set_progress($1, $2, $3)`
