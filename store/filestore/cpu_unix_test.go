//go:build unix

package filestore

import (
	"syscall"
	"testing"
	"time"
)

// cpuMeter reports the process's CPU time (user and system, every thread)
// per operation: with fsyncs in the loop, wall time mostly measures the
// disk, and on a shared machine other writers' load on it.
type cpuMeter struct{ start time.Duration }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuMeter { return cpuMeter{cpuTime()} }

func (m cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(cpuTime()-m.start)/float64(b.N), "cpu-ns/op")
}
