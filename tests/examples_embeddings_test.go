package tests

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/examples/embeddings"
	"github.com/pgrun/pgrun/gpu"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// createVector creates pgvector in the test database as the server's own user (the
// test role may not create extensions).
func createVector(t *testing.T, b *testkit.DB) {
	t.Helper()
	_, err := testkit.AsServerUser(t, b.URL).Exec(b.Ctx, `create extension if not exists vector`)
	require.NoError(t, err)
}

// Without the extension in the database, and a role that may not create it, the
// example says so, naming the extension, and creates nothing.
func TestEmbeddingsNeedPgvector(t *testing.T) {
	b := testkit.Setup(t)
	err := embeddings.Migrate(b.Ctx, b.Pool)
	require.ErrorIs(t, err, embeddings.ErrVectorNotCreated)
	require.ErrorContains(t, err, `extension "vector"`)
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pg_namespace where nspname = 'pgrun_examples'`).Scan(&n))
	require.Zero(t, n)
}

// The demo workflow end to end: ingest, embed batches on the gpu queue with the
// embedder kept warm (one load), KNN over the HNSW index, report.
func TestEmbeddingsWorkflowEndToEnd(t *testing.T) {
	b := testkit.Setup(t)
	createVector(t, b)
	require.NoError(t, embeddings.Migrate(b.Ctx, b.Pool))
	require.NoError(t, embeddings.Migrate(b.Ctx, b.Pool), "idempotent")
	_, err := pgrun.DefineWorkflow(b.Ctx, b.Pool, embeddings.WorkflowName, embeddings.Workflow)
	require.NoError(t, err)
	cache := gpu.NewCache(gpu.CacheConfig{Load: embeddings.Load})
	r := testkit.NewRunner(b.Pool, runner.Config{
		Queues: map[string]runner.QueueConfig{"default": {Workers: 2}, "gpu": {GPU: true}},
		Models: cache, Devices: []gpu.Device{},
	})
	require.NoError(t, embeddings.Register(r, b.Pool))
	testkit.StartRunner(t, r)
	run, err := pgrun.StartRun(b.Ctx, b.Pool, embeddings.WorkflowName,
		map[string]any{"docs": 400, "batch": 50, "seed": 3, "queries": 40}, "")
	require.NoError(t, err)
	testkit.Eventually(t, 60*time.Second, "the run ended", func() bool {
		r, err := pgrun.GetRun(b.Ctx, b.Pool, run.ID)
		require.NoError(t, err)
		return r.Status != "running"
	})
	got, err := pgrun.GetRun(b.Ctx, b.Pool, run.ID)
	require.NoError(t, err)
	require.Equal(t, "succeeded", got.Status, string(got.Error))
	var out struct {
		Report struct {
			Docs int `json:"docs"`
			KNN  struct {
				Precision float64 `json:"precision_at_k"`
			} `json:"knn"`
		} `json:"report"`
	}
	require.NoError(t, json.Unmarshal(got.Output, &out))
	require.Equal(t, 400, out.Report.Docs)
	require.Greater(t, out.Report.KNN.Precision, 0.8)
	var vectors int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun_examples.documents where embedding is not null and vector_dims(embedding) = 384`).Scan(&vectors))
	require.Equal(t, 400, vectors)
	st := cache.Stats()
	require.EqualValues(t, 1, st.Loads, "the embedder stays warm")
	require.EqualValues(t, 7, st.Hits)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pg_indexes where indexname = 'documents_embedding_idx' and indexdef like '%hnsw%'`).Scan(&vectors))
	require.Equal(t, 1, vectors)
}
