package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// electSeries are the series tenure elect's /metrics has exposed; users'
// dashboards and alerts name them, so none may go or be renamed.
var electSeries = []string{
	"tenure_election_is_leader",
	"tenure_election_term",
	"tenure_election_record_problem",
	"tenure_election_transitions_total",
	"tenure_election_renew_duration_seconds_bucket",
	"tenure_store_requests_total",
	"tenure_store_request_duration_seconds_bucket",
	"go_goroutines",
	"process_cpu_seconds_total",
}

func TestElectMetricsKeepTheirNames(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	errb := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		args := append([]string{"elect", "--lock", tempStore(t) + "/leader.json", "--id", "m", "--http", "127.0.0.1:0"}, fastFlags...)
		args = append(args, "--log-level", "info")
		done <- run(ctx, &env{stdout: &lockedBuffer{}, stderr: errb}, args)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("tenure elect exited %d:\n%s", code, errb.String())
		}
	}()
	addrRe := regexp.MustCompile(`serving HTTP.* addr=(\S+)`)
	var addr string
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := errb.String()
		if m := addrRe.FindStringSubmatch(s); m != nil && strings.Contains(s, "became leader") {
			addr = m[1]
			break
		}
		if time.Now().After(end) {
			t.Fatalf("tenure elect did not serve HTTP and lead within 30 s:\n%s", s)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	text := string(body)
	for _, name := range electSeries {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `[{ ]`).MatchString(text) {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if !regexp.MustCompile(`(?m)^tenure_election_is_leader(\{.*\})? 1$`).MatchString(text) {
		t.Errorf("/metrics does not show the leader leading:\n%s", text)
	}
}
