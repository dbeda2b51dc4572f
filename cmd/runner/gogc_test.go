package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// The runner binary collects garbage at GOGC=400 unless GOGC says otherwise.
func TestGCPercentDefaultsUnlessGOGCIsSet(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })

	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	setGCPercent()
	if got := debug.SetGCPercent(100); got != defaultGOGC {
		t.Fatalf("with GOGC unset the target is %d, want %d", got, defaultGOGC)
	}

	t.Setenv("GOGC", "100") // the runtime read it at start; setGCPercent leaves it
	setGCPercent()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("with GOGC set the target is %d, want it left at 100", got)
	}
}
