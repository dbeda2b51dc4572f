package runner

import (
	"github.com/jackc/pgx/v5"

	"github.com/pgrun/pgrun"
)

// scanClaimed collects the rows of sqlapi.ClaimJobs into an array of jobs made for
// capacity (grown if more come) with pgrun.AppendJobs, the scan that decodes job rows
// from their wire bytes.
func scanClaimed(rows pgx.Rows, capacity int) ([]*pgrun.Job, error) {
	all, err := pgrun.AppendJobs(make([]pgrun.Job, 0, capacity), rows)
	if err != nil {
		return nil, err
	}
	jobs := make([]*pgrun.Job, len(all))
	for i := range all {
		jobs[i] = &all[i]
	}
	return jobs, nil
}
