package pgrun

import "context"

// The free functions of the first client, each now a method of [Client]. They run on
// any [DB] (a pool, a connection or a transaction) and stay for one release.

// Enqueue adds one job of kind with args on db, as [Client.Enqueue] does; on a
// transaction the job is the transaction's ([Client.EnqueueTx]).
//
// Deprecated: use Client.Enqueue or Client.EnqueueTx; kept for one release.
func Enqueue(ctx context.Context, db DB, kind string, args any, opts ...Option) (*Job, error) {
	return enqueueOne(ctx, db, "", kind, args, opts)
}

// EnqueueMany adds many jobs in one statement on db, as [Client.EnqueueMany] does.
//
// Deprecated: use Client.EnqueueMany or Client.EnqueueManyTx; kept for one release.
func EnqueueMany(ctx context.Context, db DB, specs []JobSpec) ([]*Job, error) {
	return enqueueMany(ctx, db, "", specs)
}

// GetJob returns job id, or [ErrNotFound].
//
// Deprecated: use Client.GetJob; kept for one release.
func GetJob(ctx context.Context, db DB, id int64) (*Job, error) {
	return getJob(ctx, db, id)
}

// Cancel cancels job id, as [Client.Cancel] does.
//
// Deprecated: use Client.Cancel; kept for one release.
func Cancel(ctx context.Context, db DB, id int64, reason string) (*Job, error) {
	return cancelJob(ctx, db, id, reason)
}

// Retry redrives a failed or cancelled job, as [Client.Retry] does.
//
// Deprecated: use Client.Retry; kept for one release.
func Retry(ctx context.Context, db DB, id int64) (*Job, error) {
	return retryJob(ctx, db, id)
}

// Events returns job id's audit log, oldest first.
//
// Deprecated: use Client.Events (or Client.Timeline); kept for one release.
func Events(ctx context.Context, db DB, id int64) ([]Event, error) {
	return jobEvents(ctx, db, id)
}

// DefineWorkflow stores spec as the next version of workflow name.
//
// Deprecated: use Client.DefineWorkflow; kept for one release.
func DefineWorkflow(ctx context.Context, db DB, name string, spec any) (int, error) {
	return defineWorkflow(ctx, db, name, spec)
}

// StartRun starts a run of workflow's newest version.
//
// Deprecated: use Client.StartRun; kept for one release.
func StartRun(ctx context.Context, db DB, workflow string, input any, uniqueKey string) (*Run, error) {
	return startRun(ctx, db, workflow, input, uniqueKey)
}

// GetRun returns run id, or [ErrRunNotFound].
//
// Deprecated: use Client.GetRun; kept for one release.
func GetRun(ctx context.Context, db DB, id int64) (*Run, error) {
	return getRun(ctx, db, id)
}

// RunNodes returns the nodes of run id in creation order.
//
// Deprecated: use Client.RunNodes; kept for one release.
func RunNodes(ctx context.Context, db DB, id int64) ([]RunNode, error) {
	return runNodes(ctx, db, id)
}

// SubmitInput gives an input node its payload.
//
// Deprecated: use Client.SubmitInput; kept for one release.
func SubmitInput(ctx context.Context, db DB, runID int64, node string, payload any) (bool, error) {
	return submitInput(ctx, db, runID, node, payload)
}

// CancelRun cancels a running run and its unfinished nodes.
//
// Deprecated: use Client.CancelRun; kept for one release.
func CancelRun(ctx context.Context, db DB, runID int64, reason string) (*Run, error) {
	return cancelRun(ctx, db, runID, reason)
}
