package sqlapi

// BackendPID reads the process id of the server connection that runs the query: a
// pooler that shares server connections hands the client a made-up one at startup
// (pgrun.ThroughPooler compares the two). Send it with the simple protocol.
const BackendPID = `select pg_backend_pid()`
