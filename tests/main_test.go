package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// runnerBin is the `runner` command built once for the tests that drive it as a
// user would (signals, exit codes).
var runnerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pgrun-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runnerBin = filepath.Join(dir, "runner")
	build := exec.Command("go", "build", "-o", runnerBin, "../cmd/runner")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building cmd/runner:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
