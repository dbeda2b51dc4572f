package embeddings

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"

	"github.com/pgrun/pgrun/runner"
)

// The example's job kinds.
const (
	KindIngest = "embeddings.ingest"
	KindEmbed  = "embeddings.embed"
	KindKNN    = "embeddings.knn"
	KindReport = "embeddings.report"
)

// Batch is a range of one corpus's documents.
type Batch struct {
	Corpus string `json:"corpus"`
	From   int64  `json:"from"`
	To     int64  `json:"to"`
}

// IngestArgs: how many documents to generate, in batches of Batch, from Seed.
type IngestArgs struct {
	Docs  int    `json:"docs"`
	Batch int    `json:"batch"`
	Seed  uint64 `json:"seed"`
}

// Validate rejects an ingest that could not produce work.
func (a IngestArgs) Validate() error {
	if a.Docs < 1 || a.Batch < 1 {
		return fmt.Errorf("docs (%d) and batch (%d) must be at least 1", a.Docs, a.Batch)
	}
	return nil
}

// EmbedArgs: the batch to embed.
type EmbedArgs struct {
	Batch Batch `json:"batch"`
}

// Validate rejects an empty or reversed range.
func (a EmbedArgs) Validate() error {
	if a.Batch.Corpus == "" || a.Batch.From < 1 || a.Batch.To < a.Batch.From {
		return fmt.Errorf("batch %+v is not a range of a corpus", a.Batch)
	}
	return nil
}

// KNNArgs: evaluate Queries documents of Corpus against their K nearest neighbours.
type KNNArgs struct {
	Corpus  string `json:"corpus"`
	Queries int    `json:"queries"`
	K       int    `json:"k"`
}

// Register adds the example's operations to r; they read and write through pool.
// Embedding jobs take the embedder from r's model cache (Config.Models, loading with
// Load). It is an error if r handles one of their kinds already.
func Register(r *runner.Runner, pool *pgxpool.Pool) error {
	return errors.Join(
		runner.Handle(r, KindIngest, func(ctx context.Context, j *runner.Job[IngestArgs]) (any, error) {
			return ingest(ctx, pool, corpusName(j.RunID, j.ID), j.Args)
		}),
		runner.Handle(r, KindEmbed, func(ctx context.Context, j *runner.Job[EmbedArgs]) (any, error) {
			m, err := j.UseModel(ctx)
			if err != nil {
				return nil, err
			}
			e, ok := m.(*Embedder)
			if !ok {
				return nil, runner.Permanent(fmt.Errorf("model %s is a %T, not an embedder", *j.Model, m))
			}
			return embedBatch(ctx, pool, e, j.Args.Batch, j.Beat)
		}),
		runner.Handle(r, KindKNN, func(ctx context.Context, j *runner.Job[KNNArgs]) (any, error) {
			return knn(ctx, pool, j.Args)
		}),
		runner.Handle(r, KindReport, func(ctx context.Context, j *runner.Job[map[string]any]) (any, error) {
			corpus, _ := j.Args["corpus"].(string)
			if corpus == "" {
				return nil, runner.Permanent(errors.New("report needs a corpus"))
			}
			_, err := pool.Exec(ctx, `insert into pgrun_examples.reports (corpus, report) values ($1, $2)
			on conflict (corpus) do update set report = excluded.report, created_at = now()`, corpus, j.Args)
			return j.Args, err
		}),
	)
}

func corpusName(runID *int64, jobID int64) string {
	if runID != nil {
		return fmt.Sprintf("run-%d", *runID)
	}
	return fmt.Sprintf("job-%d", jobID)
}

// ingest writes a synthetic corpus with COPY (replacing one left by an earlier
// attempt) and returns its batches.
func ingest(ctx context.Context, pool *pgxpool.Pool, corpus string, a IngestArgs) (any, error) {
	docs := Corpus(a.Docs, a.Seed)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `delete from pgrun_examples.documents where corpus = $1`, corpus); err != nil {
			return err
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"pgrun_examples", "documents"}, []string{"corpus", "id", "body", "label"},
			pgx.CopyFromSlice(len(docs), func(i int) ([]any, error) {
				return []any{corpus, docs[i].ID, docs[i].Body, docs[i].Label}, nil
			}))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", corpus, err)
	}
	var batches []Batch
	for from := 1; from <= a.Docs; from += a.Batch {
		batches = append(batches, Batch{Corpus: corpus, From: int64(from), To: int64(min(from+a.Batch-1, a.Docs))})
	}
	return map[string]any{"corpus": corpus, "docs": a.Docs, "batches": batches}, nil
}

// embedBatch computes the batch's vectors and writes them with pgvector-go in one
// statement.
func embedBatch(ctx context.Context, pool *pgxpool.Pool, e *Embedder, b Batch, beat func()) (any, error) {
	start := time.Now()
	rows, err := pool.Query(ctx, `select id, body from pgrun_examples.documents
		where corpus = $1 and id between $2 and $3 order by id`, b.Corpus, b.From, b.To)
	if err != nil {
		return nil, err
	}
	var ids []int64
	var vecs []string
	var id int64
	var body string
	if _, err := pgx.ForEachRow(rows, []any{&id, &body}, func() error {
		ids = append(ids, id)
		vecs = append(vecs, pgvector.NewVector(e.Embed(body)).String())
		if len(ids)%64 == 0 {
			beat()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `update pgrun_examples.documents d set embedding = v.e::vector
		from unnest($2::bigint[], $3::text[]) as v(id, e) where d.corpus = $1 and d.id = v.id`, b.Corpus, ids, vecs); err != nil {
		return nil, fmt.Errorf("write embeddings: %w", err)
	}
	return map[string]any{"embedded": len(ids), "ms": time.Since(start).Milliseconds()}, nil
}

// knn asks, for Queries documents spread over the corpus, for their K nearest
// neighbours by cosine distance (HNSW index) and measures how many share the query's
// label: precision at K.
func knn(ctx context.Context, pool *pgxpool.Pool, a KNNArgs) (any, error) {
	if a.Queries < 1 || a.K < 1 {
		return nil, runner.Permanent(fmt.Errorf("queries (%d) and k (%d) must be at least 1", a.Queries, a.K))
	}
	var docs int64
	if err := pool.QueryRow(ctx, `select count(*) from pgrun_examples.documents where corpus = $1`, a.Corpus).Scan(&docs); err != nil {
		return nil, err
	}
	if docs == 0 {
		return nil, runner.Permanent(fmt.Errorf("corpus %s is empty", a.Corpus))
	}
	start := time.Now()
	hits, total := 0, 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `set local hnsw.ef_search = 200`); err != nil {
			return err
		}
		for q := 0; q < a.Queries; q++ {
			qid := 1 + int64(q)*docs/int64(a.Queries)
			var same, n int
			if err := tx.QueryRow(ctx, `
				with query as (select label, embedding from pgrun_examples.documents where corpus = $1 and id = $2),
				nn as (select d.label from pgrun_examples.documents d, query q
				       where d.corpus = $1 and d.id <> $2 and d.embedding is not null
				       order by d.embedding <=> q.embedding limit $3)
				select count(*) filter (where nn.label = (select label from query)), count(*) from nn`,
				a.Corpus, qid, a.K).Scan(&same, &n); err != nil {
				return err
			}
			hits, total = hits+same, total+n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("knn %s: %w", a.Corpus, err)
	}
	if total == 0 {
		return nil, fmt.Errorf("knn %s: no neighbours found (embeddings missing?)", a.Corpus)
	}
	return map[string]any{"corpus": a.Corpus, "queries": a.Queries, "k": a.K,
		"precision_at_k": float64(hits) / float64(total), "ms": time.Since(start).Milliseconds()}, nil
}
