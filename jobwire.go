package pgrun

import (
	"encoding/binary"
	"math"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A job row on the hot paths (a claim of 500 jobs, an EnqueueMany of 1,000) is
// decoded here straight from its wire bytes, without pgx's per-column scan plans:
// measured on the runner's claims, pgx's scan (a reflective allocation for every
// non-NULL pointer field, a string for every text column, the Job and the list of
// forty targets on the heap for every row) was the largest share of the runner's own
// CPU. The decoder instead reuses the text values a batch repeats (kind, queue,
// status, worker) and places the pointer fields' values and the JSON bytes of many
// rows in shared blocks, a few allocations per batch instead of some twenty per row.
//
// It applies only when the row's columns are exactly sqlapi.JobColumns, of the types
// it knows (jobColumnOIDs), in binary format except for text and jsonb (which pgx
// asks for as text, and whose text is the value); anything else, or a value it
// does not expect (an infinite timestamp, a NULL in a NOT NULL column), goes through
// pgx as before, so the two always give the same Job (tests/scan_paths_test.go).

// jobColumnOIDs are the types of the columns of sqlapi.JobColumns, in its order.
var jobColumnOIDs = [...]uint32{
	pgtype.Int8OID, pgtype.TextOID, pgtype.TextOID, pgtype.JSONBOID, // id, kind, queue, args
	pgtype.TextOID, pgtype.Int2OID, pgtype.TimestamptzOID, pgtype.Int4OID, // status, priority, run_at, attempt
	pgtype.Int4OID, pgtype.Int4OID, pgtype.Int4OID, pgtype.TextOID, // failures, max_attempts, lease_expiries, claimed_by
	pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.IntervalOID, // lease_expires_at, heartbeat_at, timeout
	pgtype.TimestamptzOID, pgtype.TimestamptzOID, pgtype.TimestamptzOID, // created_at, started_at, finished_at
	pgtype.JSONBOID, pgtype.JSONBOID, pgtype.Int8OID, pgtype.Int8OID, // result, error, progress_current, progress_total
	pgtype.Int8OID, pgtype.Int8OID, pgtype.TextOID, pgtype.Int4OID, // parent_id, run_id, node, deps_remaining
	pgtype.TextOID, pgtype.TextOID, pgtype.JSONBOID, pgtype.Int4OID, // model, unique_key, meta, children_failed
	pgtype.TextArrayOID, pgtype.Float8OID, pgtype.TimestamptzOID, // child_errors, failure_ratio, dispatched_at
	pgtype.TextOID, pgtype.BoolOID, pgtype.TextOID, pgtype.TimestamptzOID, // concurrency_key, model_required, tenant, deadline_at
	pgtype.UUIDOID, pgtype.IntervalOID, pgtype.TextOID, pgtype.TextOID, // claim_id, lease_length, sequence_key, debounce_key
}

// AppendJobs scans rows that select the columns of pgrun.jobs as the binding does
// (every column, in table order, the status as text: what [Client.ListJobs] and the
// runner's claims read) and appends the jobs to dst. It is the hot paths' scan: a
// caller that reads jobs in bulk and can size dst (or reuse it) saves the
// allocations [Job.ScanRow] makes per row. Rows of any other column list are scanned
// by [Job.ScanRow]. rows is closed.
func AppendJobs(dst []Job, rows pgx.Rows) ([]Job, error) {
	return appendJobRows(dst, rows, false)
}

// appendJobRows is AppendJobs; with dedup, the rows end in pgrun.enqueued's
// deduplicated and folded columns, which set each job's Deduplicated and Folded.
func appendJobRows(dst []Job, rows pgx.Rows, dedup bool) ([]Job, error) {
	defer rows.Close()
	w, fast := newJobWire(rows, dedup, 0)
	for rows.Next() {
		dst = append(dst, Job{})
		j := &dst[len(dst)-1]
		if fast && w.decode(rows.RawValues(), j) {
			continue
		}
		if err := j.scanSlow(rows, dedup); err != nil {
			return dst[:len(dst)-1], err
		}
	}
	return dst, rows.Err()
}

// jobWire decodes job rows of one result. Values it hands out for pointer fields and
// JSON columns live in blocks shared by the rows it decodes (a job kept alive keeps
// its block alive, nothing more), and text values equal to the previous row's are
// shared with it.
type jobWire struct {
	loc     *time.Location // the connection's location for timestamps; nil: local
	dedup   bool           // the rows end in pgrun.enqueued's deduplicated and folded columns
	formats [len(jobColumnOIDs)]int16
	chunk   int // elements per block
	times   []time.Time
	durs    []time.Duration
	ints    []int64
	strs    []string
	flts    []float64
	bytes   []byte
	last    [textColumns]string
}

// textColumns is the number of text columns of a job row: their values are shared
// with the previous row's where equal.
const textColumns = 11

// wireBlock is the size of a block of JSON bytes; a value over a quarter of it gets
// its own allocation.
const wireBlock = 8 << 10

// checkedFields is the column list jobWire last found decodable (its first
// element): the rows of one result share one list, so per-row scans (Job.ScanRow
// through pgx.CollectRows) compare a pointer instead of forty names for every row
// after the first. pgconn makes a new list for each result of more than 16 columns
// (it reuses one array only for fewer, which never match), and holding the pointer
// keeps its memory from being reused for another list. A hit for the other shape
// (with or without deduplicated) is caught by decode's count of values.
var checkedFields atomic.Pointer[pgconn.FieldDescription]

// newJobWire returns a decoder for rows and whether their columns are the ones it
// decodes; rowsHint sizes its blocks (0: a batch of unknown size).
func newJobWire(rows pgx.Rows, dedup bool, rowsHint int) (w jobWire, ok bool) {
	conn := rows.Conn()
	if conn == nil {
		return w, false
	}
	fds := rows.FieldDescriptions()
	if len(fds) == 0 || !decodable(fds, dedup) {
		return w, false
	}
	typ, ok := conn.TypeMap().TypeForOID(pgtype.TimestamptzOID)
	if !ok {
		return w, false
	}
	tc, ok := typ.Codec.(*pgtype.TimestamptzCodec)
	if !ok {
		return w, false
	}
	chunk := 64
	if rowsHint > 0 {
		chunk = max(4, rowsHint*2)
	}
	w = jobWire{loc: tc.ScanLocation, dedup: dedup, chunk: chunk}
	for i := range w.formats {
		w.formats[i] = fds[i].Format
	}
	return w, true
}

// decodable reports whether fds are sqlapi.JobColumns (then deduplicated and folded,
// with dedup), each of its expected type and in binary format (or either, for text
// and jsonb).
func decodable(fds []pgconn.FieldDescription, dedup bool) bool {
	if checkedFields.Load() == &fds[0] {
		return true
	}
	if !columnsAre(fds, jobColumnNames, dedup) {
		return false
	}
	for i, oid := range jobColumnOIDs {
		if fds[i].DataTypeOID != oid {
			return false
		}
		text := oid == pgtype.TextOID || oid == pgtype.JSONBOID
		if fds[i].Format != pgx.BinaryFormatCode && !(text && fds[i].Format == pgx.TextFormatCode) {
			return false
		}
	}
	if dedup {
		for _, fd := range fds[len(jobColumnOIDs):] {
			if fd.Format != pgx.BinaryFormatCode || fd.DataTypeOID != pgtype.BoolOID {
				return false
			}
		}
	}
	checkedFields.Store(&fds[0])
	return true
}

// decode fills j from one row's raw values; false if a value is not what it
// expects, in which case j is to be scanned by pgx instead.
func (w *jobWire) decode(raw [][]byte, j *Job) bool {
	want := len(jobColumnOIDs)
	if w.dedup {
		want += 2
	}
	if len(raw) != want {
		return false
	}
	r := wireRow{w: w, raw: raw, ok: true}
	j.ID = r.int8()
	j.Kind = r.text(0)
	j.Queue = r.text(1)
	j.Args = r.json()
	j.Status = JobStatus(r.text(2))
	j.Priority = r.int2()
	j.RunAt = r.time()
	j.Attempt = int(r.int4())
	j.Failures = int(r.int4())
	j.MaxAttempts = int(r.int4())
	j.LeaseExpiries = int(r.int4())
	j.ClaimedBy = r.textPtr(3)
	j.LeaseExpiresAt = r.timePtr()
	j.HeartbeatAt = r.timePtr()
	j.Timeout = r.intervalPtr()
	j.CreatedAt = r.time()
	j.StartedAt = r.timePtr()
	j.FinishedAt = r.timePtr()
	j.Result = r.json()
	j.Error = r.json()
	j.ProgressCurrent = r.int8()
	j.ProgressTotal = r.int8Ptr()
	j.ParentID = r.int8Ptr()
	j.RunID = r.int8Ptr()
	j.Node = r.textPtr(4)
	j.DepsRemaining = int(r.int4())
	j.Model = r.textPtr(5)
	j.UniqueKey = r.textPtr(6)
	j.Meta = r.json()
	j.ChildrenFailed = int(r.int4())
	j.ChildErrors = r.textArray()
	j.FailureRatio = r.float8Ptr()
	j.DispatchedAt = r.timePtr()
	j.ConcurrencyKey = r.textPtr(7)
	j.ModelRequired = r.bool()
	j.Tenant = r.textPtr(8)
	j.DeadlineAt = r.timePtr()
	j.ClaimID = r.uuid()
	j.LeaseLength = r.intervalPtr()
	j.SequenceKey = r.textPtr(9)
	j.DebounceKey = r.textPtr(10)
	if w.dedup {
		j.Deduplicated = r.bool()
		j.Folded = r.bool()
	}
	return r.ok
}

// wireRow reads the values of one row in order. A value of the wrong length, or a
// NULL where the column has none, clears ok; the caller then scans the row by pgx.
type wireRow struct {
	w   *jobWire
	raw [][]byte
	i   int
	ok  bool
}

func (r *wireRow) next() []byte {
	b := r.raw[r.i]
	r.i++
	return b
}

// fixed returns the next value if it is n bytes long; nil for NULL, and for a value
// of another length, which also clears ok.
func (r *wireRow) fixed(n int) []byte {
	b := r.next()
	if b != nil && len(b) != n {
		r.ok = false
		return nil
	}
	return b
}

// required is fixed for a NOT NULL column: a NULL clears ok.
func (r *wireRow) required(n int) []byte {
	b := r.fixed(n)
	if b == nil {
		r.ok = false
	}
	return b
}

func (r *wireRow) int2() int16 {
	if b := r.required(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *wireRow) int4() int32 {
	if b := r.required(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (r *wireRow) int8() int64 {
	if b := r.required(8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

func (r *wireRow) int8Ptr() *int64 {
	b := r.fixed(8)
	if b == nil {
		return nil
	}
	return block(&r.w.ints, r.w.chunk, int64(binary.BigEndian.Uint64(b)))
}

func (r *wireRow) bool() bool {
	b := r.required(1)
	return b != nil && b[0] == 1
}

func (r *wireRow) float8Ptr() *float64 {
	b := r.fixed(8)
	if b == nil {
		return nil
	}
	return block(&r.w.flts, r.w.chunk, math.Float64frombits(binary.BigEndian.Uint64(b)))
}

func (r *wireRow) uuid() ClaimID {
	b := r.fixed(16)
	if b == nil {
		return ClaimID{}
	}
	return ClaimID(b)
}

// Timestamps are microseconds since 2000-01-01 UTC, made into a time.Time as pgx
// makes them (local time, or the connection's ScanLocation). Infinity is left to
// pgx, which refuses it for a time.Time.
const (
	unixToY2KMicros     = 946_684_800 * 1_000_000
	infinityMicros      = math.MaxInt64
	minusInfinityMicros = math.MinInt64
)

func (r *wireRow) timeOrNull() (time.Time, bool) {
	b := r.fixed(8)
	if b == nil {
		return time.Time{}, true
	}
	us := int64(binary.BigEndian.Uint64(b))
	if us == infinityMicros || us == minusInfinityMicros {
		r.ok = false
		return time.Time{}, true
	}
	t := time.Unix(unixToY2KMicros/1_000_000+us/1_000_000, unixToY2KMicros%1_000_000*1_000+us%1_000_000*1_000)
	if r.w.loc != nil {
		t = t.In(r.w.loc)
	}
	return t, false
}

func (r *wireRow) time() time.Time {
	t, null := r.timeOrNull()
	if null {
		r.ok = false
	}
	return t
}

func (r *wireRow) timePtr() *time.Time {
	t, null := r.timeOrNull()
	if null {
		return nil
	}
	return block(&r.w.times, r.w.chunk, t)
}

// intervalPtr reads an interval as pgx scans one into a time.Duration: a month is
// 30 days, a day 24 hours.
func (r *wireRow) intervalPtr() *time.Duration {
	b := r.fixed(16)
	if b == nil {
		return nil
	}
	const day = 24 * 60 * 60 * 1_000_000
	us := int64(binary.BigEndian.Uint64(b[0:8])) +
		int64(int32(binary.BigEndian.Uint32(b[8:12])))*day +
		int64(int32(binary.BigEndian.Uint32(b[12:16])))*30*day
	return block(&r.w.durs, r.w.chunk, time.Duration(us)*time.Microsecond)
}

// text reads a text value, sharing the string with the previous row's value of the
// same column (slot) when they are equal.
func (r *wireRow) text(slot int) string {
	b := r.next()
	if b == nil {
		r.ok = false
		return ""
	}
	return r.w.intern(slot, b)
}

func (r *wireRow) textPtr(slot int) *string {
	b := r.next()
	if b == nil {
		return nil
	}
	return block(&r.w.strs, r.w.chunk, r.w.intern(slot, b))
}

func (w *jobWire) intern(slot int, b []byte) string {
	if string(b) == w.last[slot] { // compares without allocating
		return w.last[slot]
	}
	s := string(b)
	w.last[slot] = s
	return s
}

// json reads a jsonb value, the JSON text (after a version byte, 1, in binary
// format), which is copied into the shared block (capped, so that appending to one
// job's bytes never overwrites the next one's).
func (r *wireRow) json() []byte {
	w := r.w
	binaryFormat := w.formats[r.i] == pgx.BinaryFormatCode
	b := r.next()
	if b == nil {
		return nil
	}
	if binaryFormat {
		if len(b) == 0 || b[0] != 1 {
			r.ok = false
			return nil
		}
		b = b[1:]
	}
	if len(b) > wireBlock/4 {
		return append([]byte(nil), b...)
	}
	if cap(w.bytes)-len(w.bytes) < len(b) {
		w.bytes = make([]byte, 0, wireBlock)
	}
	start := len(w.bytes)
	w.bytes = append(w.bytes, b...)
	return w.bytes[start:len(w.bytes):len(w.bytes)]
}

// textArray reads a one-dimensional text[] without NULLs (empty: a non-nil empty
// slice, as pgx gives).
func (r *wireRow) textArray() []string {
	b := r.next()
	if b == nil || len(b) < 12 {
		r.ok = false
		return nil
	}
	ndim := binary.BigEndian.Uint32(b[0:4])
	if ndim == 0 {
		return []string{}
	}
	if ndim != 1 || len(b) < 20 {
		r.ok = false
		return nil
	}
	n := int(int32(binary.BigEndian.Uint32(b[12:16])))
	if n < 0 || n > len(b) {
		r.ok = false
		return nil
	}
	out := make([]string, 0, n)
	rest := b[20:]
	for range n {
		if len(rest) < 4 {
			r.ok = false
			return nil
		}
		size := int(int32(binary.BigEndian.Uint32(rest[:4])))
		rest = rest[4:]
		if size < 0 || size > len(rest) { // NULL element, or a short value
			r.ok = false
			return nil
		}
		out = append(out, string(rest[:size]))
		rest = rest[size:]
	}
	return out
}

// block stores v in the shared block *s (a new one of chunk elements when it is
// full; earlier blocks are never moved) and returns its address.
func block[T any](s *[]T, chunk int, v T) *T {
	if len(*s) == cap(*s) {
		*s = make([]T, 0, chunk)
	}
	*s = append(*s, v)
	return &(*s)[len(*s)-1]
}
