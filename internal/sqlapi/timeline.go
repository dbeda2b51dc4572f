package sqlapi

// JobTimeline reads a job's whole story, oldest first (pgrun.job_timeline): $1 id.
const JobTimeline = `select at, event, level, attempt, message, fields from pgrun.job_timeline($1)`

// TimelineStepEvents name the entries pgrun.job_timeline writes for the calls a
// durable handler recorded (job_steps), one per kind of call and outcome; their
// fields hold the step's name, kind, position and result_bytes (71_timeline.sql).
// The job page and `runner job get` list these entries as the job's steps.
var TimelineStepEvents = []string{
	"step.recorded", "sleep.recorded", "event.received", "event.timed_out",
	"job.spawned", "job.awaited", "job.await_timed_out",
}

// TimelineParkedEvent names the entry pgrun.job_timeline writes while a job is
// parked (pgrun.job_parked): what it waits for and until when.
const TimelineParkedEvent = "job.parked"
