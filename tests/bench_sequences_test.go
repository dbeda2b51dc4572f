package tests

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
	"github.com/pgrun/pgrun/runner"
)

// The sequences benchmarks of docs/benchmarks.md ("Sequences and debounce"):
//
//	go test ./tests/ -run '^$' -bench Sequences -benchtime 1x
//
// Each reports its own figures (b.ReportMetric); ns/op is the whole run.

// BenchmarkSequencesBurnDown: the burn-down of 50,000 no-op jobs through a runner of
// 200 slots, in a queue whose jobs belong to 10,000 sequences (five each, so that every
// completion but the last of a sequence queues its successor), against the same queue
// without sequences. Issue 35's goal: at least 70% of the rate. Each round runs both,
// the first of them alternating from round to round (on a shared machine the load
// drifts, and whichever ran second would carry it); each round is logged, and the
// figures reported are the medians over the rounds (-benchtime 4x: four rounds).
func BenchmarkSequencesBurnDown(b *testing.B) {
	const n, keys = 50000, 10000
	run := func(sequenced bool) float64 {
		db := testkit.NewDB(b)
		key := `null`
		if sequenced {
			key = fmt.Sprintf(`'k' || (i %% %d)`, keys)
		}
		testkit.ExecAll(b, db, fmt.Sprintf(`select pgrun.enqueue_jobs(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
			'kind', 'work', 'queue', 'bench', 'sequence_key', %s)) order by i)) from generate_series(1, %d) i`, key, n),
			`vacuum analyze pgrun.jobs`)
		if sequenced {
			require.Equal(b, keys, countRowsTB(b, db, `select count(*) from pgrun.jobs where status = 'queued'`))
		}
		checkpoint(b) // the enqueue's dirty pages written before the clock starts, as in burnDownCases
		r := benchRunner(db.Pool, 200)
		testkit.Handle(b, r, "work", func(context.Context, *runner.Job[struct{}]) (any, error) { return nil, nil })
		began := time.Now()
		stop := testkit.StartRunner(b, r)
		defer stop()
		// The runner's count, not a count(*) of the backlog every 10 ms (burnDownCounted).
		testkit.Eventually(b, 5*time.Minute, "the burn-down", func() bool { return r.Stats().Completed >= n })
		took := time.Since(began).Seconds()
		require.Equal(b, n, countRowsTB(b, db, `select count(*) from pgrun.jobs where status = 'succeeded'`))
		if sequenced {
			st := r.Stats()
			b.Logf("sequenced: %d jobs claimed in %d claims, %d handed over", st.Claimed, st.ClaimCalls, st.Handed)
		}
		return took
	}
	var bares, seqs, ratios []float64
	for i := range b.N {
		var bare, sequenced float64
		if i%2 == 0 {
			bare, sequenced = run(false), run(true)
		} else {
			sequenced, bare = run(true), run(false)
		}
		b.Logf("round %d: bare %.0f jobs/s, 10k sequences %.0f jobs/s, ratio %.2f", i+1, n/bare, n/sequenced, bare/sequenced)
		bares, seqs, ratios = append(bares, n/bare), append(seqs, n/sequenced), append(ratios, bare/sequenced)
	}
	b.ReportMetric(middle(bares), "bare_jobs/s")
	b.ReportMetric(middle(seqs), "10k_sequences_jobs/s")
	b.ReportMetric(middle(ratios), "ratio")
}

// middle is the median of v (the upper middle value of an even count).
func middle(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkSequencesEnqueueCost: what an enqueue costs, one job a statement and in
// batches of 1,000, for a job with no sequence or debounce key (the path every job
// takes; docs/benchmarks.md compares it with the build before sequences, run the same
// way) and, for scale, for jobs of a sequence and debounced ones.
func BenchmarkSequencesEnqueueCost(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		spec func(i int) pgrun.JobSpec
	}{
		{"plain", func(int) pgrun.JobSpec { return pgrun.JobSpec{Kind: "noop"} }},
		{"sequence", func(i int) pgrun.JobSpec { return pgrun.JobSpec{Kind: "noop", SequenceKey: fmt.Sprintf("k%d", i%1000)} }},
		{"debounce", func(i int) pgrun.JobSpec {
			return pgrun.JobSpec{Kind: "noop", DebounceKey: fmt.Sprintf("k%d", i%1000), Debounce: time.Minute}
		}},
	} {
		db := testkit.NewDB(b)
		i := 0
		b.Run(c.name+"/one", func(b *testing.B) {
			for b.Loop() {
				_, err := pgrun.EnqueueMany(ctx, db.Pool, []pgrun.JobSpec{c.spec(i)})
				require.NoError(b, err)
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/job")
		})
		b.Run(c.name+"/batch1000", func(b *testing.B) {
			specs := make([]pgrun.JobSpec, 1000)
			jobs := 0
			for b.Loop() {
				for k := range specs {
					specs[k] = c.spec(i)
					i++
				}
				_, err := pgrun.EnqueueMany(ctx, db.Pool, specs)
				require.NoError(b, err)
				jobs += len(specs)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(jobs), "us/job")
		})
	}
}
