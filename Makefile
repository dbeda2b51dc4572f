# pgrun's entry points. Every target that needs PostgreSQL gets it from
# scripts/ensure-postgres.sh, which uses $PGRUN_DATABASE_URL, a server on
# 127.0.0.1:5432, or a private cluster under ./.pgdata (installing what is missing).

SHELL := /bin/bash
GO ?= go
# WITH_DB runs the rest of the line with PGRUN_DATABASE_URL set, or fails.
WITH_DB = url=$$(scripts/ensure-postgres.sh) && PGRUN_DATABASE_URL=$$url

.PHONY: demo test bench build vet lint

## demo: run a real mixed workload through the engine and print a summary
demo:
	$(WITH_DB) $(GO) run ./cmd/runner demo

## test: the whole suite against real PostgreSQL, with the race detector; installs
## or starts what it needs first and leaves no daemon or per-test database behind
## (scripts/test.sh; PGRUN_NO_INSTALL=1 lists what is missing instead)
test:
	GO=$(GO) scripts/test.sh

## bench: runner bench plus the Go benchmarks (new passes go in docs/benchmarks-log.md; today's figures in docs/benchmarks.md)
bench:
	$(WITH_DB) $(GO) run ./cmd/runner bench
	$(WITH_DB) $(GO) test -run '^$$' -bench . -benchtime 3x ./tests/

build:
	$(GO) build -o bin/runner ./cmd/runner

## lint: what CI and reviewers expect to be clean
lint:
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) mod tidy -diff
