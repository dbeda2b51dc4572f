package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/examples/embeddings"
	"github.com/pgrun/pgrun/gpu"
	"github.com/pgrun/pgrun/internal/progress"
	"github.com/pgrun/pgrun/internal/sqlapi"
	"github.com/pgrun/pgrun/runner"
)

func init() { commands = append(commands, newDemoCmd) }

func newDemoCmd(g *globals) *cobra.Command {
	var docs, batch, queries int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the embeddings workflow end to end and show it working",
		Long: `demo installs the schema (and the example's pgvector tables) if needed, defines
the embeddings-demo workflow and starts a run: ingest --docs synthetic documents,
embed them in batches of --batch on the gpu queue (one job per batch, the embedder
kept warm in the model cache; CPU fallback without a GPU), evaluate KNN on --queries
documents with the HNSW index, and write a report. It draws each node's progress
while an in-process runner works, prints what was done and how fast, and leaves the
data to inspect.`,
		Args: cobra.NoArgs,
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			if docs < 1 || batch < 1 || queries < 1 {
				return fmt.Errorf("--docs, --batch and --queries must be at least 1")
			}
			ctx := cmd.Context()
			if err := pgrun.Migrate(ctx, pool); err != nil {
				return err
			}
			if err := embeddings.Migrate(ctx, pool); err != nil {
				return err
			}
			return demo(ctx, pool, cmd.OutOrStdout(), map[string]any{
				"docs": docs, "batch": batch, "queries": queries, "seed": time.Now().UnixNano() % 1000})
		}),
	}
	cmd.Flags().IntVar(&docs, "docs", 3000, "documents to ingest and embed")
	cmd.Flags().IntVar(&batch, "batch", 100, "documents per embed job")
	cmd.Flags().IntVar(&queries, "queries", 200, "KNN queries in the evaluation")
	return cmd
}

func demo(ctx context.Context, pool *pgxpool.Pool, out io.Writer, input map[string]any) error {
	client, err := newClient(pool)
	if err != nil {
		return err
	}
	version, err := client.DefineWorkflow(ctx, embeddings.WorkflowName, embeddings.Workflow)
	if err != nil {
		return err
	}
	cache := gpu.NewCache(gpu.CacheConfig{Load: embeddings.Load, IdleUnload: 10 * time.Minute})
	r, err := runner.New(pool, runner.Config{
		Queues: map[string]runner.QueueConfig{"default": {Workers: 4}, "gpu": {GPU: true}},
		Models: cache, Servable: []string{embeddings.ModelName},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	if err := errors.Join(runner.RegisterExamples(r), embeddings.Register(r, pool)); err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { stop(); <-done }()

	start := time.Now()
	run, err := client.StartRun(ctx, embeddings.WorkflowName, input, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "run %d of %s v%d: %v docs, batches of %v, %v KNN queries\n",
		run.ID, embeddings.WorkflowName, version, input["docs"], input["batch"], input["queries"])
	tty := progress.IsTerminal(out)
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	lines := 0
	last := time.Time{}
	for {
		r, err := client.GetRun(ctx, run.ID)
		if err != nil {
			return err
		}
		nodes, err := client.RunNodes(ctx, run.ID)
		if err != nil {
			return err
		}
		ended := r.Status != "running"
		if tty || ended || time.Since(last) >= time.Second {
			if tty && lines > 0 {
				fmt.Fprintf(out, "\033[%dA", lines)
			}
			lines = drawNodes(out, nodes, time.Since(start), tty)
			last = time.Now()
		}
		if ended {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return demoSummary(ctx, client, out, run.ID, cache.Stats(), time.Since(start))
}

// drawNodes prints one line per node (a bar for the map node's children) and returns
// how many lines it printed.
func drawNodes(out io.Writer, nodes []pgrun.RunNode, elapsed time.Duration, tty bool) int {
	eol := "\n"
	if tty {
		eol = "\033[K\n" // clear what a longer earlier frame left
	}
	for _, n := range nodes {
		cur, total := int64(0), int64(1)
		switch {
		case n.ProgressTotal != nil && *n.ProgressTotal > 0:
			cur, total = n.ProgressCurrent, *n.ProgressTotal
		case n.Status.Finished():
			cur = 1
		}
		fmt.Fprintf(out, "  %-7s %s %-10s %s%s", n.Node, progress.Cells(cur, total, 30), n.Status, progressCount(n), eol)
	}
	fmt.Fprintf(out, "  elapsed %s%s", elapsed.Round(10*time.Millisecond), eol)
	return len(nodes) + 1
}

func progressCount(n pgrun.RunNode) string {
	if n.ProgressTotal == nil {
		return ""
	}
	return fmt.Sprintf("%d/%d batches", n.ProgressCurrent, *n.ProgressTotal)
}

func demoSummary(ctx context.Context, client *pgrun.Client, out io.Writer, runID int64, st gpu.Stats, took time.Duration) error {
	r, err := client.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	if r.Status != "succeeded" {
		return fmt.Errorf("run %d ended %s: %s", runID, r.Status, compactJSON(r.Error))
	}
	var report struct {
		Report struct {
			Corpus string `json:"corpus"`
			Docs   int    `json:"docs"`
			KNN    struct {
				Precision float64 `json:"precision_at_k"`
				Queries   int     `json:"queries"`
				K         int     `json:"k"`
				MS        int64   `json:"ms"`
			} `json:"knn"`
		} `json:"report"`
	}
	if err := json.Unmarshal(r.Output, &report); err != nil {
		return fmt.Errorf("run output: %w", err)
	}
	var embedSecs float64
	var batches, vectors int
	if err := client.Pool().QueryRow(ctx, sqlapi.DemoEmbedSummary, runID, report.Report.Corpus).Scan(&embedSecs, &batches, &vectors); err != nil {
		return err
	}
	devices, _ := gpu.Probe(ctx)
	where := "CPU (no GPU found: CPU fallback)"
	if len(devices) > 0 {
		names := make([]string, len(devices))
		for i, d := range devices {
			names[i] = d.Name
		}
		where = strings.Join(names, ", ")
	}
	k := report.Report.KNN
	fmt.Fprintf(out, "\nrun %d succeeded in %s on %s\n", runID, took.Round(time.Millisecond), where)
	fmt.Fprintf(out, "  ingested   %d documents into pgrun_examples.documents (corpus %s)\n", report.Report.Docs, report.Report.Corpus)
	fmt.Fprintf(out, "  embedded   %d vectors of %d dimensions in %d batch jobs: %.0f docs/s\n", vectors, embeddings.Dim, batches, float64(vectors)/max(embedSecs, 0.001))
	fmt.Fprintf(out, "  model      %s loaded %d time(s), %d warm hits, load time %s\n", embeddings.ModelName, st.Loads, st.Hits, st.LoadTime.Round(time.Millisecond))
	fmt.Fprintf(out, "  knn        precision@%d %.3f over %d queries (HNSW, cosine) in %d ms\n", k.K, k.Precision, k.Queries, k.MS)
	fmt.Fprintf(out, "  report     pgrun_examples.reports, corpus %s\n", report.Report.Corpus)
	fmt.Fprint(out, demoHints(client.Pool().Config().ConnString(), runID, runnerCommand()))
	return nil
}
