package sqlapi

// EnqueueColumns enqueues a batch given as one typed array per attribute of
// pgrun.job_spec (pgrun.enqueue_columns) and returns one pgrun.enqueued row per spec,
// in order: JobColumns, then deduplicated and folded. $1 kinds, $2 args, $3 queues,
// $4 priorities, $5 run_ats, $6 max_attempts, $7 unique_keys, $8 parent_ids, $9
// models, $10 timeouts, $11 metas, $12 concurrency_keys, $13 unique_windows, $14
// on_conflicts, $15 model_requireds, $16 sequence_keys, $17 debounce_keys, $18
// debounces, $19 debounce_edges (each NULL: the default for every spec).
const EnqueueColumns = `select ` + JobColumns + `, deduplicated, folded from pgrun.enqueue_columns(
	$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`
