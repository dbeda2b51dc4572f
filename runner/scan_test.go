package runner

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/pgrun/pgrun"
	"github.com/pgrun/pgrun/internal/sqlapi"
)

// jobTargets, the hand-written scan of a claim, lists pgrun.Job's fields in the order
// of sqlapi.JobColumns (each target is the address of the field whose db tag names
// the column at its position), and leaves no db-tagged field out: a column added to
// pgrun.Job must be added to the claim too.
func TestJobTargetsFollowJobColumns(t *testing.T) {
	var cols []string
	for _, c := range strings.Split(sqlapi.JobColumns, ",") {
		// "status::text as status" -> "status"
		f := strings.Fields(c)
		cols = append(cols, regexp.MustCompile(`[^a-z_].*`).ReplaceAllString(f[len(f)-1], ""))
	}
	var j pgrun.Job
	targets := jobTargets(&j, nil)
	if len(targets) != len(cols) {
		t.Fatalf("jobTargets has %d targets, JobColumns %d columns", len(targets), len(cols))
	}
	v := reflect.ValueOf(&j).Elem()
	tags := map[uintptr]string{}
	for i := 0; i < v.NumField(); i++ {
		tag := v.Type().Field(i).Tag.Get("db")
		if tag == "" || tag == "-" {
			continue
		}
		tags[v.Field(i).Addr().Pointer()] = tag
	}
	seen := map[string]bool{}
	for i, target := range targets {
		got := tags[reflect.ValueOf(target).Pointer()]
		if got != cols[i] {
			t.Errorf("target %d is field %q, JobColumns has %q there", i, got, cols[i])
		}
		seen[got] = true
	}
	for _, tag := range tags {
		if !seen[tag] {
			t.Errorf("pgrun.Job's field %q is not scanned by a claim", tag)
		}
	}
}
