-- 00_version.sql: the version of this SQL API, the contract between the database and
-- every caller (runners, services, workers in any language). docs/upgrading.md has the
-- rules: a change that only appends parameters with defaults, adds functions or adds
-- columns raises api_version; a change that breaks a caller of an older version also
-- raises api_compatible_since. Migrate refuses to install a function set over a newer
-- one, and a runner refuses to run against a database whose api_compatible_since is
-- above its own api_version.

-- api_version is the version of the function set installed in this database.
create or replace function pgrun.api_version()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 10 $$;

-- api_compatible_since is the oldest api_version whose callers this function set still
-- serves: a runner built for an older version must be upgraded first.
create or replace function pgrun.api_compatible_since()
returns integer
language sql
immutable
set search_path = pgrun, pg_catalog
as $$ select 5 $$;
