package sqlapi

import (
	"fmt"
	"strings"
)

// The statements of installing and upgrading schema pgrun (migrate.go, functionset.go
// and roles.go in the root package, internal/testdb): the server check, the SQL API
// version, the function ledger, the roles and their grants, and the pieces of the
// install script. Statements built from names (roles, the migrations table) are
// functions that quote what they are given.

// ServerVersion reads the server's version number (server_version_num) and its text.
const ServerVersion = `select current_setting('server_version_num')::int, current_setting('server_version')`

// APIFunctionsExist reports whether pgrun.api_version() and api_compatible_since()
// exist: a call of a missing function fails at parse time, even in a branch that
// would not run, so this is asked first.
const APIFunctionsExist = `select to_regprocedure('pgrun.api_version()') is not null
	and to_regprocedure('pgrun.api_compatible_since()') is not null`

// DatabaseAPI reads the installed SQL API's version and the oldest version it serves.
const DatabaseAPI = `select pgrun.api_version(), pgrun.api_compatible_since()`

// APIVersionExists reports whether pgrun.api_version() exists (see APIFunctionsExist).
const APIVersionExists = `select to_regprocedure('pgrun.api_version()') is not null`

// APIVersion reads the installed SQL API's version.
const APIVersion = `select pgrun.api_version()`

// LockFunctionSet takes the transaction-level advisory lock that serialises
// applications of the function set: $1 the lock key.
const LockFunctionSet = `select pg_advisory_xact_lock($1)`

// SetLocalLockTimeout bounds each lock wait for the rest of the transaction: $1 the
// timeout as text ('500ms').
const SetLocalLockTimeout = `select set_config('lock_timeout', $1, true)`

// FunctionSetApplied reports whether the function ledger records checksum $1.
const FunctionSetApplied = `select exists (select 1 from pgrun.function_ledger where checksum = $1)`

// ClearFunctionLedger empties the function ledger before the new checksum is recorded.
const ClearFunctionLedger = `delete from pgrun.function_ledger`

// RecordFunctionSet records the checksum of the function set just applied: $1.
const RecordFunctionSet = `insert into pgrun.function_ledger (checksum) values ($1)`

// SchemaReady reports whether schema pgrun is installed with its function set applied.
const SchemaReady = `select to_regclass('pgrun.function_ledger') is not null
	and exists (select 1 from pgrun.function_ledger)`

// DropStaleFunctions drops the functions of schema pgrun that the function set just
// applied did not write: their catalog row is older than this transaction. It runs in
// the applying transaction, after the whole set and before the grants (their REVOKE
// ... ON ALL FUNCTIONS rewrites every function's catalog row, the old ones' too).
const DropStaleFunctions = `do $$
declare
  f regprocedure;
begin
  for f in
    select p.oid::regprocedure from pg_proc p
    where p.pronamespace = 'pgrun'::regnamespace and p.xmin <> pg_current_xact_id()::xid
      and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')
  loop
    execute format('drop function %s', f);
  end loop;
end $$`

// EnableTestClock lets SET pgrun.now pin pgrun.clock() in this database, for test
// databases only: production databases never honour the seam.
const EnableTestClock = `insert into pgrun.settings (name, value) values ('test_clock', 'true')
	on conflict (name) do update set value = excluded.value`

// RoleExists reports whether role $1 exists.
const RoleExists = `select exists (select 1 from pg_roles where rolname = $1)`

// MayCreateRoles reports whether the current role may create roles.
const MayCreateRoles = `select rolcreaterole or rolsuper from pg_roles where rolname = current_user`

// SavepointCreateRole, RollbackCreateRole and ReleaseCreateRole wrap one CREATE ROLE,
// so that a duplicate created by a concurrent Migrate leaves the transaction usable.
const (
	SavepointCreateRole = `savepoint create_role`
	RollbackCreateRole  = `rollback to savepoint create_role`
	ReleaseCreateRole   = `release savepoint create_role`
)

// RoleGrants returns, one a row, the statements that grant the three roles their
// privileges: $1 enqueuer, $2 worker, $3 admin.
const RoleGrants = `select pgrun.role_grants($1, $2, $3)`

// GrantRoles runs those statements: $1 enqueuer, $2 worker, $3 admin.
const GrantRoles = `select pgrun.grant_roles($1, $2, $3)`

// CreateRole creates NOLOGIN role name (which must not exist yet).
func CreateRole(name string) string {
	return fmt.Sprintf(`create role %s nologin`, quoteIdent(name))
}

// CreateRoleIfMissing creates NOLOGIN role name where it is missing, as a statement
// of a script (semicolon and newline included). It looks first: CREATE ROLE by a role
// without CREATEROLE fails on permissions even when the role exists.
func CreateRoleIfMissing(name string) string {
	return fmt.Sprintf("do $$ begin if not exists (select 1 from pg_roles where rolname = %s) then create role %s nologin; end if; end $$;\n",
		quoteLiteral(name), quoteIdent(name))
}

// InstallBegin opens the install script: what it is, how to run it, and a transaction
// that first refuses a server older than minServerMajor and a database that has
// schema pgrun already.
func InstallBegin(schemaVersion uint, apiVersion int, functions string, minServerMajor int) string {
	return fmt.Sprintf(`-- pgrun: schema version %d, SQL API version %d, functions %s
-- Installs into a database without schema pgrun, in one transaction:
--   psql -v ON_ERROR_STOP=1 -f pgrun.sql
-- Upgrade an installed database with `+"`runner migrate up`"+` (docs/upgrading.md).
begin;
do $$ begin
  if current_setting('server_version_num')::int < %d then
    raise exception 'PostgreSQL %% is too old: pgrun needs %d or newer', current_setting('server_version')
      using errcode = '0A000';
  end if;
  if exists (select 1 from pg_namespace where nspname = 'pgrun') then
    raise exception 'schema pgrun exists already: this script installs pgrun into a database without it'
      using errcode = '42P06', hint = 'Upgrade an installed database with runner migrate up.';
  end if;
end $$;
`, schemaVersion, apiVersion, functions, minServerMajor*10000, minServerMajor)
}

// CreateMigrationsTable creates golang-migrate's version table public.<table> where
// it is missing, as a statement of a script.
func CreateMigrationsTable(table string) string {
	return fmt.Sprintf("create table if not exists public.%s (version bigint not null primary key, dirty boolean not null);\n",
		quoteIdent(table))
}

// SetMigrationsVersion records version as the applied migration in
// public.<table>, as statements of a script.
func SetMigrationsVersion(table string, version uint) string {
	return fmt.Sprintf("delete from public.%s;\ninsert into public.%s (version, dirty) values (%d, false);\n",
		quoteIdent(table), quoteIdent(table), version)
}

// GrantRolesStatement grants the three roles their privileges, as a statement of a
// script.
func GrantRolesStatement(enqueuer, worker, admin string) string {
	return fmt.Sprintf("select pgrun.grant_roles(%s, %s, %s);\n", quoteLiteral(enqueuer), quoteLiteral(worker), quoteLiteral(admin))
}

// InstallEnd records ledger as the applied function set and commits the install
// script's transaction.
func InstallEnd(ledger string) string {
	return fmt.Sprintf("delete from pgrun.function_ledger;\ninsert into pgrun.function_ledger (checksum) values (%s);\ncommit;\n",
		quoteLiteral(ledger))
}

// quoteIdent quotes s as an SQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }
