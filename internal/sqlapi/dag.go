package sqlapi

// DefineWorkflow checks a workflow spec and stores it as the next version of its name
// (pgrun.define_workflow), returning the version: $1 name, $2 spec.
const DefineWorkflow = `select pgrun.define_workflow($1, $2::jsonb)`

// GetWorkflow reads one version of a workflow definition (pgrun.workflows): $1 name,
// $2 version.
const GetWorkflow = `select name, version, spec, created_at from pgrun.workflows where name = $1 and version = $2`
