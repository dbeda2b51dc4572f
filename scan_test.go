package pgrun

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

// Job.targets, the hand-written scan of a job row, lists Job's fields in the order of
// sqlapi.JobColumns (each target is the address of the field whose db tag names the
// column at its position) and leaves no db-tagged field out: a column added to Job
// must be added to the scan too, or every job would silently take the slow path.
func TestJobTargetsFollowJobColumns(t *testing.T) {
	var cols []string
	for _, c := range strings.Split(sqlapi.JobColumns, ",") {
		// "status::text as status" -> "status"
		f := strings.Fields(c)
		cols = append(cols, regexp.MustCompile(`[^a-z_].*`).ReplaceAllString(f[len(f)-1], ""))
	}
	if !reflect.DeepEqual(cols, jobColumnNames) {
		t.Fatalf("jobColumnNames %v\ndiffer from sqlapi.JobColumns %v", jobColumnNames, cols)
	}
	var j Job
	targets := j.targets(nil)
	if len(targets) != len(cols) {
		t.Fatalf("Job.targets has %d targets, JobColumns %d columns", len(targets), len(cols))
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
			t.Errorf("Job's field %q is not scanned", tag)
		}
	}
}
