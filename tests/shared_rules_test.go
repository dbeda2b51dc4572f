package tests

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// Each shared rule is written once in SQL (01_common.sql) and once in Go (rules.go),
// and the two agree: the priority range, the default lease, the queue-name format
// and which states are active. The partial index that keeps one active job per
// unique key spells the active states out; it lists exactly active_statuses().
func TestSharedRulesAgreeBetweenSQLAndGo(t *testing.T) {
	b := testkit.Setup(t)
	var minP, maxP int
	var lease time.Duration
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.min_priority(), pgrun.max_priority(), pgrun.default_lease()`).
		Scan(&minP, &maxP, &lease))
	require.Equal(t, pgrun.MinPriority, minP)
	require.Equal(t, pgrun.MaxPriority, maxP)
	require.Equal(t, pgrun.DefaultLease, lease)

	for _, name := range []string{"default", "a", "images.v2", "q-1_x", "a" + strings.Repeat("b", 62),
		"a" + strings.Repeat("b", 63), "", "Images", "1q", "_q", "q q", "q/x", "qé", "q\n"} {
		var valid, checked bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.valid_queue_name($1)`, name).Scan(&valid))
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.check_queue_name($1)`, name)
		checked = err == nil
		require.Equal(t, pgrun.ValidQueueName(name), valid, "%q", name)
		require.Equal(t, valid, checked, "%q", name)
	}

	var labels []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(s::text) from unnest(enum_range(null::pgrun.job_status)) s`).Scan(&labels))
	require.Len(t, labels, 8)
	for _, s := range labels {
		var active bool
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.is_active($1::pgrun.job_status)`, s).Scan(&active))
		require.Equal(t, !pgrun.JobStatus(s).Finished(), active, s)
	}

	var pred string
	var active []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pg_get_expr(i.indpred, i.indrelid), pgrun.active_statuses()::text[]
		from pg_index i where i.indexrelid = 'pgrun.jobs_unique_key_tenant_idx'::regclass`).Scan(&pred, &active))
	var listed []string
	for _, m := range regexp.MustCompile(`'([a-z]+)'::pgrun\.job_status`).FindAllStringSubmatch(pred, -1) {
		listed = append(listed, m[1])
	}
	require.ElementsMatch(t, active, listed, "the unique key index's predicate: %s", pred)
}
