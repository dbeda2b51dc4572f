package tests

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// pgHint returns the HINT of a PostgreSQL error, or "".
func pgHint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Hint
	}
	return ""
}

// list joins n values of a cron field with commas: "0,1,2,...".
func list(n, mod int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(i % mod)
	}
	return strings.Join(parts, ",")
}

// A cron expression is bounded before it is split or expanded: a field listing
// 400,000 values is refused with 22023 naming the limit, as is a field of more than
// 60 comma-separated parts, and neither leaves a schedule behind.
func TestCronExpressionIsBoundedBeforeParsing(t *testing.T) {
	b := testkit.Setup(t)
	huge := list(400000, 60) + " * * * *"
	for _, c := range []struct {
		name, expr, want string
	}{
		{"400,000 values", huge, fmt.Sprintf("cron expression '0,1,2,3,4,5,6,7,8,9,10,11,12,13,...' is %d characters, over the limit of 256 characters", len(huge))},
		{"a long @every", "@every " + strings.Repeat("1 second ", 40), "over the limit of 256 characters"},
		{"61 minutes", list(61, 60) + " * * * *", "cron minute field has 61 comma-separated parts, over the limit of 60 parts"},
		{"61 hours", "0 " + list(61, 24) + " * * *", "cron hour field has 61 comma-separated parts, over the limit of 60 parts"},
		{"61 days of week", "0 0 * * " + list(61, 7), "cron day-of-week field has 61 comma-separated parts, over the limit of 60 parts"},
		{"a step past integer", "*/99999999999 * * * *", "cron minute field '*/99999999999' has a bad step"},
		{"a value past integer", "0 99999999999 * * *", "cron hour field '99999999999' is out of range 0-23"},
	} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.cron_next($1, now())`, c.expr)
		require.Error(t, err, c.name)
		require.Equal(t, "22023", testkit.SQLState(err), "%s: %v", c.name, err)
		require.NotEmpty(t, pgHint(err), c.name)
		require.ErrorContains(t, err, c.want, c.name)

		_, err = b.Pool.Exec(b.Ctx, `select pgrun.set_schedule('hostile', $1, 'noop')`, c.expr)
		require.Equal(t, "22023", testkit.SQLState(err), c.name)
	}
	var n int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select count(*) from pgrun.schedules`).Scan(&n))
	require.Zero(t, n)

	// cron_field holds the same bounds when called on its own.
	long := list(400000, 60)
	for field, want := range map[string]string{
		long:         fmt.Sprintf("cron minute field is %d characters, over the limit of 256 characters", len(long)),
		list(61, 60): "cron minute field has 61 comma-separated parts, over the limit of 60 parts",
	} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.cron_field($1, 0, 59, 'minute')`, field)
		require.Equal(t, "22023", testkit.SQLState(err))
		require.ErrorContains(t, err, want)
		require.NotEmpty(t, pgHint(err))
	}
	var limits [2]int
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.max_cron_chars(), pgrun.max_cron_parts()`).Scan(&limits[0], &limits[1]))
	require.Equal(t, [2]int{256, 60}, limits)
}

// At the bounds an expression still works: 60 parts in a field, 256 characters.
func TestCronExpressionAtTheBoundsFires(t *testing.T) {
	b := testkit.Setup(t)
	sixty := list(60, 60) + " * * * *" // every minute, spelled out
	var got time.Time
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.cron_next($1, $2)`, sixty, testkit.At("2030-01-01T10:07:10Z")).Scan(&got))
	require.Equal(t, testkit.At("2030-01-01T10:08:00Z"), got.UTC())

	padded := "*/15" + strings.Repeat(" ", 256-len("*/15 * * * *")) + " * * * *"
	require.Len(t, padded, 256)
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `select pgrun.cron_next($1, $2)`, padded, testkit.At("2030-01-01T10:07:10Z")).Scan(&got))
	require.Equal(t, testkit.At("2030-01-01T10:15:00Z"), got.UTC())
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.cron_next($1, now())`, padded+" ")
	require.Equal(t, "22023", testkit.SQLState(err))
	require.ErrorContains(t, err, "is 257 characters, over the limit of 256 characters")
}
