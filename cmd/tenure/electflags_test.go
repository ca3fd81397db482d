package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Short timings are valid on their own: the intervals left unset follow
// RenewDeadline, and PeerTimeout matters only in peer mode.
func TestElectFlagsShortTimings(t *testing.T) {
	for _, args := range [][]string{
		{"--leader-timeout", "2s", "--renew-deadline", "1500ms"},
		{"--leader-timeout", "2s"},
		{"--leader-timeout", "90s"},
		{},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			e := &env{stdout: &strings.Builder{}, stderr: &strings.Builder{}}
			fs := newFlags(e, "t", "t")
			ef := addElectFlags(fs)
			lock := tempStore(t) + "/leader.json"
			if err := fs.Parse(append([]string{"--lock", lock, "--priority", "2"}, args...)); err != nil {
				t.Fatal(err)
			}
			cfg, storeURL, err := ef.config(e)
			if err != nil {
				t.Fatalf("tenure elect %v: %v", args, err)
			}
			cfg.StoreURL = storeURL
			if err := cfg.Validate(); err != nil {
				t.Fatalf("tenure elect %v: %v", args, err)
			}
			if cfg.Priority != 2 {
				t.Fatalf("--priority 2 gave Priority %d", cfg.Priority)
			}
		})
	}
}

// JSON logs carry durations as Go writes them, not as nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	var out strings.Builder
	e := &env{stdout: &strings.Builder{}, stderr: &out}
	f := &electFlags{logFormat: ptr("json"), logLevel: ptr("info")}
	log, err := f.logger(e)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("waited", "for", 2249*time.Millisecond)
	var line map[string]any
	if err := json.Unmarshal([]byte(out.String()), &line); err != nil {
		t.Fatalf("log line %q: %v", out.String(), err)
	}
	if line["for"] != "2.249s" {
		t.Fatalf("the duration logged as %#v; want \"2.249s\" (line %s)", line["for"], out.String())
	}
}
