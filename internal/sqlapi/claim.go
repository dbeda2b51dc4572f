package sqlapi

// ClaimJobs claims up to n due jobs of one queue (pgrun.claim_jobs) and returns them
// as [JobColumns]: $1 queue, $2 worker, $3 n, $4 lease (NULL: the queue's default),
// $5 warm models, $6 handled kinds, $7 $8 $9 the key (priority, run_at, id) to resume
// after (NULL: from the start).
const ClaimJobs = `select ` + JobColumns + `
	from pgrun.claim_jobs($1, $2, $3, $4, $5, $6, $7, $8, $9)`
