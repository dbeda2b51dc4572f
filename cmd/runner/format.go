package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// parseID reads a job id argument.
func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("job id %q is not a positive whole number", s)
	}
	return id, nil
}

// table writes aligned columns; call flush when done.
func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// ago renders how long before now t was, rounded for a person ("3.2s", "5m0s").
func ago(t time.Time) string {
	return age(time.Since(t))
}

// age rounds d for display.
func age(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// compactJSON renders raw JSON on one line, "-" when empty.
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "-"
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// errorMessage pulls "message" out of a job's error object.
func errorMessage(raw json.RawMessage) string {
	var e struct {
		Message string `json:"message"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &e) != nil {
		return ""
	}
	return strings.SplitN(e.Message, "\n", 2)[0]
}

// orDash renders an optional value.
func orDash[T any](p *T) string {
	if p == nil {
		return "-"
	}
	switch v := any(*p).(type) {
	case time.Time:
		return v.Local().Format(time.RFC3339)
	default:
		return fmt.Sprint(v)
	}
}
