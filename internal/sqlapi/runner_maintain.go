package sqlapi

// MaintainAsLeader runs pgrun.maintain() as a candidate for the maintenance lease and
// returns its report as JSON text: $1 stall window, $2 leader (the worker id), $3
// leader lease.
const MaintainAsLeader = `select pgrun.maintain(stall_window => $1, leader => $2, leader_lease => $3)::text`
