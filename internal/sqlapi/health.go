package sqlapi

// Health lists what needs a person in the database under the queue, at
// pgrun.health's default thresholds (73_health.sql): autovacuum off, dead rows over
// live, a held xmin horizon, maintenance gone silent, a queue with due jobs and no
// live worker. No row when all is well. The overview page and `runner status` read it.
const Health = `select check_name, severity, message, hint, fields from pgrun.health()`
