package pgrun

import (
	"regexp"
	"time"
)

// The shared rules of the SQL API, for Go callers that check before a round trip
// (a runner's configuration, a CLI flag). Each is written once in SQL
// (sql/functions/01_common.sql) and once here; tests/shared_rules_test.go holds the
// two to each other. The rule for active jobs is [JobStatus.Finished]'s complement,
// pgrun.is_active in SQL.

// MinPriority and MaxPriority bound a job's priority (pgrun.min_priority() and
// pgrun.max_priority()): 0, the default and most urgent, up to 32767, the largest
// smallint; lower runs first.
const (
	MinPriority = 0
	MaxPriority = 32767
)

// DefaultLease is the lease of a claim when neither the worker nor the queue's
// default_lease names one (pgrun.default_lease()): long enough to survive a GC pause
// and a slow network, short enough that a dead worker's jobs come back within a
// minute.
const DefaultLease = 30 * time.Second

// QueueNameFormat says in words what [ValidQueueName] accepts, for error messages.
const QueueNameFormat = "1 to 63 characters from a-z, 0-9, _, - and . starting with a letter"

// queueName is pgrun.valid_queue_name's format.
var queueName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,62}$`)

// ValidQueueName reports whether name is a valid queue name (pgrun.valid_queue_name):
// see [QueueNameFormat].
func ValidQueueName(name string) bool { return queueName.MatchString(name) }
