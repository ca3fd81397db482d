package election_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/election"
)

// The settings table of docs/election.md gives the defaults the code has.
func TestDocumentedDefaults(t *testing.T) {
	b, err := os.ReadFile("../docs/election.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(\\w+)` \\| ([^|]+) \\|")
	doc := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		doc[m[1]] = strings.TrimSpace(m[2])
	}
	dur := func(s string) time.Duration {
		d, err := time.ParseDuration(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			t.Fatalf("docs/election.md: %q is not a duration", s)
		}
		return d
	}
	durations := map[string]time.Duration{
		"FrequentInterval":   election.DefaultFrequentInterval,
		"InfrequentInterval": election.DefaultInfrequentInterval,
		"LeaderTimeout":      election.DefaultLeaderTimeout,
		"RenewDeadline":      election.DefaultRenewDeadline,
		"PeerTimeout":        election.DefaultPeerTimeout,
	}
	for name, want := range durations {
		got, ok := doc[name]
		if !ok {
			t.Errorf("docs/election.md has no row for %s", name)
			continue
		}
		if dur(got) != want {
			t.Errorf("docs/election.md gives %s a default of %s; the code's is %v", name, got, want)
		}
	}
	var sched []time.Duration
	for _, part := range strings.Split(doc["RetrySchedule"], ",") {
		sched = append(sched, dur(strings.TrimSpace(part)))
	}
	if len(sched) != len(election.DefaultRetrySchedule) {
		t.Errorf("docs/election.md gives RetrySchedule %q; the code's is %v", doc["RetrySchedule"], election.DefaultRetrySchedule)
	} else {
		for i := range sched {
			if sched[i] != election.DefaultRetrySchedule[i] {
				t.Errorf("docs/election.md gives RetrySchedule %q; the code's is %v", doc["RetrySchedule"], election.DefaultRetrySchedule)
				break
			}
		}
	}
	if got := strings.Trim(doc["PeerHealthPath"], "`"); got != election.DefaultPeerHealthPath {
		t.Errorf("docs/election.md gives PeerHealthPath %q; the code's is %q", got, election.DefaultPeerHealthPath)
	}
}
