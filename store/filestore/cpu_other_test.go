//go:build !unix

package filestore

import "testing"

type cpuMeter struct{}

func startCPU() cpuMeter           { return cpuMeter{} }
func (cpuMeter) report(*testing.B) {}
