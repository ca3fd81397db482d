package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/bench"
)

// The benchmarks themselves are tested in internal/bench; these tests
// are of the command line.

func TestBenchElectionRefusesBadFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"one node", []string{"--nodes", "1"}, 2, "--nodes must be between 2"},
		{"no rounds", []string{"--rounds", "0"}, 2, "--rounds must be at least 1"},
		{"unknown timing", []string{"--timing", "slow"}, 2, `--timing "slow"`},
		{"short window", []string{"--window", "10s"}, 2, "shorter than the InfrequentInterval"},
		{"bad poll", []string{"--poll", "0s"}, 2, "--poll must be positive"},
		{"positional", []string{"file:///tmp/x"}, 2, "Usage: tenure bench election"},
		{"unknown config", []string{"--config", "store,peer"}, 2, `--config "store,peer"`},
		{"config twice", []string{"--config", "addr,addr"}, 2, `--config "addr,addr"`},
		{"unknown scheme", []string{"--store", "ftp://example/x"}, 1, `unknown URL scheme "ftp"`},
		{"no scheme", []string{"--store", "bucket/prefix"}, 1, "has no scheme"},
		{"mem", []string{"--store", "mem://x"}, 1, "separate processes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"bench", "election"}, c.args...)...)
			if code != c.code || !strings.Contains(errs, c.says) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errs, c.code, c.says)
			}
		})
	}
	if code, _, errs := runCmd(t, "bench", "nope"); code != 2 || !strings.Contains(errs, `unknown benchmark "nope"`) {
		t.Fatalf("unknown benchmark: exit %d, %q", code, errs)
	}
	if code, _, errs := runCmd(t, "bench"); code != 2 || !strings.Contains(errs, "tenure bench election") {
		t.Fatalf("bench alone: exit %d, %q", code, errs)
	}
}

func TestBenchRSMRefusesBadFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		says string
	}{
		{"no store", nil, "--store is required"},
		{"bad latency", []string{"--store", "mem://", "--latency", "fast"}, "--latency"},
		{"negative latency", []string{"--store", "mem://", "--latency", "-1ms"}, "negative"},
		{"zero batch", []string{"--store", "mem://", "--batch", "0"}, "--batch"},
		{"deep pipeline", []string{"--store", "mem://", "--pipeline", "65"}, "--pipeline"},
		{"nodes", []string{"--store", "mem://", "--nodes", "9"}, "--nodes"},
		{"flush", []string{"--store", "mem://", "--flush", "0s"}, "--flush"},
		{"positional", []string{"--store", "mem://", "extra"}, "no positional arguments"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"bench", "rsm"}, c.args...)...)
			if code != 2 || !strings.Contains(errs, c.says) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, c.says)
			}
		})
	}
}
func TestBenchShardsRefusesBadFlags(t *testing.T) {
	if code, _, errs := runCmd(t, "bench", "shards"); code != 2 || !strings.Contains(errs, "--store is required") {
		t.Errorf("bench shards without --store: exit %d, %q", code, errs)
	}
	if code, _, errs := runCmd(t, "bench", "shards", "--store", "mem://", "--mode", "all"); code != 1 || !strings.Contains(errs, `--mode "all"`) {
		t.Errorf("bench shards --mode all: exit %d, %q", code, errs)
	}
}

// TestBenchKVKeep: with --keep the bench leaves its temporary store and
// its group, and the command it prints starts a node that serves what the
// bench wrote.
func TestBenchKVKeep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kv node processes and runs puts")
	}
	t.Setenv(runMainEnv, "1")
	dir := t.TempDir()
	code, out, errs := runCmd(t, "bench", "kv", "--sizes", "50", "--seq-puts", "5", "--writers", "2", "--duration", "200ms",
		"--fill-writers", "4", "--value-size", "64", "--etcd=false", "--json", "--keep", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	var res bench.KVResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	k := res.Kept
	if k == nil || len(k.Command) < 6 || k.Command[0] != "kv" || k.Command[1] != "serve" || k.Command[3] != res.Store || k.Command[5] != k.Group {
		t.Fatalf("kept %+v; want the group and a kv serve command on store %s", k, res.Store)
	}
	if !strings.HasPrefix(res.Store, "file://"+dir) {
		t.Fatalf("store %s; want a directory under %s", res.Store, dir)
	}
	addr, stop := startKVServe(t, k.Command[2:]...)
	code, got, errs := runCmd(t, "kv", "get", bench.KVKey(0), "--server", addr)
	if code != 0 || len(strings.TrimSpace(got)) == 0 {
		t.Fatalf("kv get %s on the kept group: exit %d, %q, %s", bench.KVKey(0), code, got, errs)
	}
	if code, output := stop(); code != 0 {
		t.Fatalf("the node on the kept group exited %d:\n%s", code, output)
	}
}

func TestBenchEtcdRefusesBadFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		says string
	}{
		{"no store", nil, "--store is required"},
		{"negative latency", []string{"--store", "mem://", "--latency", "-1ms"}, "--latency must not be negative"},
		{"nodes", []string{"--store", "mem://", "--nodes", "1,9"}, "--nodes"},
		{"no writers", []string{"--store", "mem://", "--writers", "0"}, "--writers must be at least 1"},
		{"no objects", []string{"--store", "mem://", "--objects", "0"}, "--objects must be at least 1"},
		{"no duration", []string{"--store", "mem://", "--duration", "0s"}, "must be positive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"bench", "etcd"}, c.args...)...)
			if code != 2 || !strings.Contains(errs, c.says) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, c.says)
			}
		})
	}
	// Three processes cannot share one process's memory.
	if code, _, errs := runCmd(t, "bench", "etcd", "--store", "mem://", "--nodes", "3"); code != 1 || !strings.Contains(errs, "separate processes") {
		t.Fatalf("mem:// with three nodes: exit %d, %q", code, errs)
	}
}
