package sqlapi

// ScheduleColumns is the select list of one row of pgrun.schedules.
const ScheduleColumns = `name, cron, kind, args, queue, timezone, enabled, next_fire_at,
	last_fire_at, last_job_id, created_at, updated_at`

// ListSchedules reads every schedule by name.
const ListSchedules = `select ` + ScheduleColumns + ` from pgrun.schedules order by name`

// SetSchedule creates or replaces a schedule (pgrun.set_schedule): $1 name, $2 cron,
// $3 kind, $4 args, $5 queue, $6 time zone, $7 enabled.
const SetSchedule = `select ` + ScheduleColumns + ` from pgrun.set_schedule($1, $2, $3, $4::jsonb,
	coalesce($5, 'default'), coalesce($6, 'UTC'), $7)`

// DropSchedule removes a schedule (pgrun.drop_schedule): $1 name.
const DropSchedule = `select pgrun.drop_schedule($1)`

// PauseSchedule stops a schedule firing (pgrun.pause_schedule): $1 name.
const PauseSchedule = `select ` + ScheduleColumns + ` from pgrun.pause_schedule($1)`

// ResumeSchedule lets a paused schedule fire again from its next slot
// (pgrun.resume_schedule): $1 name.
const ResumeSchedule = `select ` + ScheduleColumns + ` from pgrun.resume_schedule($1)`
