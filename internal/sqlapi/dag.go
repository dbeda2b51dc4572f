package sqlapi

// DefineWorkflow checks a workflow spec and stores it as the next version of its name
// (pgrun.define_workflow), returning the version: $1 name, $2 spec.
const DefineWorkflow = `select pgrun.define_workflow($1, $2::jsonb)`
