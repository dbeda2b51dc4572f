package tests

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/testkit"
)

// dbTags lists the db tags of t's fields (embedded structs flattened, "-" left out),
// as pgx.RowToStructByName matches them.
func dbTags(t reflect.Type) []string {
	var tags []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			tags = append(tags, dbTags(f.Type)...)
			continue
		}
		if tag := f.Tag.Get("db"); tag != "" && tag != "-" {
			tags = append(tags, tag)
		}
	}
	return tags
}

// Every Go row type has a field for every column of the relation it reads (and no
// other), in the relation's order, so that a column added by a migration cannot be
// missed by the client: Job and pgrun.jobs, Enqueued and pgrun.enqueued, the policy,
// schedule, run, worker and stats types and theirs; and JobColumns selects every
// column of pgrun.jobs.
func TestClientTypesHaveEveryColumn(t *testing.T) {
	b := testkit.Setup(t)
	for _, tc := range []struct {
		relation string
		typ      any
	}{
		{"pgrun.jobs", pgrun.Job{}},
		{"pgrun.enqueued", pgrun.Enqueued{}},
		{"pgrun.queues", pgrun.QueuePolicy{}},
		{"pgrun.queue_stats", pgrun.QueueStats{}},
		{"pgrun.schedules", pgrun.Schedule{}},
		{"pgrun.runs", pgrun.Run{}},
		{"pgrun.worker_control", pgrun.WorkerControl{}},
		{"pgrun.worker_status", pgrun.Worker{}},
		{"pgrun.job_events", pgrun.Event{}},
	} {
		var cols []string
		require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(attname::text order by attnum) from pg_attribute
			where attrelid = (select coalesce(to_regclass($1)::oid, (select typrelid from pg_type where oid = to_regtype($1))))
			  and attnum > 0 and not attisdropped`, tc.relation).Scan(&cols))
		require.Equal(t, cols, dbTags(reflect.TypeOf(tc.typ)), "%s and %T", tc.relation, tc.typ)
	}

	var jobCols []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(attname::text order by attnum) from pg_attribute
		where attrelid = 'pgrun.jobs'::regclass and attnum > 0 and not attisdropped`).Scan(&jobCols))
	var selected []string
	for _, c := range strings.Split(pgrun.JobColumns, ",") {
		f := strings.Fields(c)
		selected = append(selected, f[len(f)-1]) // "status::text as status" -> "status"
	}
	require.Equal(t, jobCols, selected)
}

// JobSpec can set every attribute of pgrun.job_spec from Go: its JSON form (what
// enqueue_jobs takes) names each one.
func TestJobSpecHasEveryAttribute(t *testing.T) {
	b := testkit.Setup(t)
	var attrs []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(attname::text order by attnum) from pg_attribute
		where attrelid = (select typrelid from pg_type where oid = 'pgrun.job_spec'::regtype)
		  and attnum > 0 and not attisdropped`).Scan(&attrs))
	spec := pgrun.JobSpec{Kind: "k", Args: map[string]any{}, Queue: "q", Priority: 1, RunAt: new(time.Now()),
		MaxAttempts: 2, UniqueKey: "u", ParentID: 3, Model: "m", Timeout: 1, Meta: map[string]any{"m": 1},
		ConcurrencyKey: "c", UniqueWindow: 1, ReplaceDuplicate: true, ModelRequired: true, SequenceKey: "s",
		DebounceKey: "d", Debounce: 1, DebounceEdge: pgrun.DebounceLeading}
	raw, err := spec.MarshalJSON()
	require.NoError(t, err)
	var keys []string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select array_agg(k order by k) from jsonb_object_keys($1::jsonb) k`, raw).Scan(&keys))
	slices.Sort(attrs)
	require.Equal(t, attrs, keys)

	// Each of them lands: enqueue_jobs reads the keys from the catalog.
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from jsonb_populate_record(null::pgrun.job_spec, $1::jsonb) s
		where s.kind = 'k' and s.queue = 'q' and s.priority = 1 and s.max_attempts = 2 and s.unique_key = 'u'
		  and s.parent_id = 3 and s.model = 'm' and s.timeout > '0' and s.concurrency_key = 'c'
		  and s.unique_window > '0' and s.on_conflict = 'replace' and s.model_required and s.sequence_key = 's'
		  and s.debounce_key = 'd' and s.debounce > '0' and s.debounce_edge = 'leading'`, raw).Scan(&n))
	require.Equal(t, 1, n)
}
