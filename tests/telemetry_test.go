package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgrun/pgrun/internal/testkit"
)

// record_hw refuses a self that is not an object with numbers cpu_pct and mem_used,
// and accepts none (an older runner, or one that could not read its share).
func TestRecordHWChecksSelf(t *testing.T) {
	b := testkit.Setup(t)
	for _, bad := range []string{`[]`, `{"cpu_pct": 1}`, `{"cpu_pct": "1", "mem_used": 2}`} {
		_, err := b.Pool.Exec(b.Ctx, `select pgrun.record_hw('h', 1, 2, 3, '[]', self => $1::jsonb)`, bad)
		require.Equal(t, "22023", testkit.SQLState(err), bad)
	}
	_, err := b.Pool.Exec(b.Ctx, `select pgrun.record_hw('h', 1, 2, 3, '[]')`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(b.Ctx, `select pgrun.record_hw('h', 1, 2, 3, '[]', self => '{"cpu_pct": 0.5, "mem_used": 1}')`)
	require.NoError(t, err)
}
