package harness

import (
	"os"
	"testing"
	"time"
)

func TestProcessCPU(t *testing.T) {
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for t0 := time.Now(); time.Since(t0) < 100*time.Millisecond; {
	}
	after, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time %s after spinning 100 ms, %s before", after, before)
	}
	if _, err := ProcessCPU(-1); err == nil {
		t.Error("no error for pid -1")
	}
}
