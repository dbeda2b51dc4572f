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
	if len(jobColumnOIDs) != len(cols) {
		t.Fatalf("jobColumnOIDs has %d types, JobColumns %d columns", len(jobColumnOIDs), len(cols))
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

// The wire decoder reads bytes a server sent; whatever they are, it either decodes
// them or declines (and pgx then scans the row, reporting what is wrong), never
// panics or reads out of bounds.
func FuzzJobWireDecode(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1}, uint8(8), uint8(30))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 25, 0, 0, 0, 9, 0, 0, 0, 1}, uint8(20), uint8(30))
	f.Add([]byte{1, '{', '}'}, uint8(3), uint8(3))
	f.Fuzz(func(t *testing.T, value []byte, size uint8, column uint8) {
		raw := make([][]byte, len(jobColumnOIDs))
		for i := range raw {
			raw[i] = make([]byte, 8)
		}
		// Well-formed fixed-size values where the type says so, then one column of
		// the fuzzer's bytes (cut to size, or NULL at 255).
		for i, oid := range jobColumnOIDs {
			switch oid {
			case 21:
				raw[i] = raw[i][:2]
			case 23:
				raw[i] = raw[i][:4]
			case 16:
				raw[i] = []byte{1}
			case 2950, 1186:
				raw[i] = make([]byte, 16)
			case 3802:
				raw[i] = []byte{1, '{', '}'}
			case 1009:
				raw[i] = make([]byte, 12)
			case 25:
				raw[i] = []byte("x")
			}
		}
		c := int(column) % len(raw)
		switch {
		case size == 255:
			raw[c] = nil
		case int(size) < len(value):
			raw[c] = value[:size]
		default:
			raw[c] = value
		}
		w := jobWire{chunk: 4}
		for i := range w.formats {
			w.formats[i] = 1
		}
		var j Job
		w.decode(raw, &j)
		w.decode(raw[:len(raw)-1], &j)
	})
}
