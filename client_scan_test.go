package pgrun

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// scanTargets, the hand-written scan of EnqueueMany, must list Job's fields in the
// order of JobColumns: each target is the address of the field whose db tag names
// the column at its position.
func TestScanTargetsFollowJobColumns(t *testing.T) {
	var cols []string
	for _, c := range strings.Split(JobColumns, ",") {
		// "status::text as status" -> "status"
		f := strings.Fields(c)
		cols = append(cols, regexp.MustCompile(`[^a-z_].*`).ReplaceAllString(f[len(f)-1], ""))
	}
	var j Job
	targets := j.scanTargets()
	if len(targets) != len(cols) {
		t.Fatalf("scanTargets has %d targets, JobColumns %d columns", len(targets), len(cols))
	}
	v := reflect.ValueOf(&j).Elem()
	tags := map[uintptr]string{}
	for i := 0; i < v.NumField(); i++ {
		tags[v.Field(i).Addr().Pointer()] = v.Type().Field(i).Tag.Get("db")
	}
	for i, target := range targets {
		if got := tags[reflect.ValueOf(target).Pointer()]; got != cols[i] {
			t.Errorf("target %d is field %q, JobColumns has %q there", i, got, cols[i])
		}
	}
}
