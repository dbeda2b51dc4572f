package sqlapi

// Maintain runs one round of periodic work with the engine's defaults
// (pgrun.maintain) and returns its report as JSON text.
const Maintain = `select pgrun.maintain()::text`

// SetMaintenanceStep sets how often maintain() runs a step
// (pgrun.set_maintenance_step) and returns the step's row: $1 step, $2 every ('0':
// every round).
const SetMaintenanceStep = `select step, every, last_run_at from pgrun.set_maintenance_step($1, $2)`
