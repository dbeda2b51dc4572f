package sqlapi

// Maintain runs one round of periodic work with the engine's defaults
// (pgrun.maintain) and returns its report as JSON text.
const Maintain = `select pgrun.maintain()::text`
