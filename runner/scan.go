package runner

import (
	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
)

// scanClaimed collects the rows of sqlapi.ClaimJobs into one backing array of jobs,
// scanned by pgrun.Job's own pgx.RowScanner (the hand-written field list, measured
// faster than pgx's by-name scan on this path).
func scanClaimed(rows pgx.Rows, capacity int) ([]*pgrun.Job, error) {
	all, err := pgx.AppendRows(make([]pgrun.Job, 0, capacity), rows, pgx.RowTo[pgrun.Job])
	if err != nil {
		return nil, err
	}
	jobs := make([]*pgrun.Job, len(all))
	for i := range all {
		jobs[i] = &all[i]
	}
	return jobs, nil
}
