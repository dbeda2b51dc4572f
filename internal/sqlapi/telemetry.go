package sqlapi

// RecordHW records a hardware sample of a host: $1 host, $2 CPU percent, $3 memory
// used, $4 memory total (bytes), $5 GPUs (a JSON array), $6 the runner's own share
// (its cgroup or process; NULL: unknown).
const RecordHW = `select pgrun.record_hw($1, $2, $3, $4, $5::jsonb, self => $6::jsonb)`
