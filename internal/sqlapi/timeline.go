package sqlapi

// JobTimeline reads a job's whole story, oldest first (pgrun.job_timeline): $1 id.
const JobTimeline = `select at, event, level, attempt, message, fields from pgrun.job_timeline($1)`
