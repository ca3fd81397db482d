package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// Each refused flag of elect, run and shards is named in one line, with
// the value given and the rule it breaks: no usage dump, no library
// field names.
func TestElectRunShardsFlagErrorsAreOneLine(t *testing.T) {
	lock := func(t *testing.T) string { return tempStore(t) + "/leader.json" }
	cases := []struct {
		name string
		args func(t *testing.T) []string
		says []string
		not  []string
	}{
		{"a duration without a unit", func(t *testing.T) []string {
			return []string{"elect", "--lock", lock(t), "--http", "", "--leader-timeout", "10"}
		}, []string{"--leader-timeout", `"10"`, "a duration with a unit"}, nil},
		{"run: a duration without a unit", func(t *testing.T) []string {
			return []string{"run", "--lock", lock(t), "--http", "", "--renew-deadline", "5", "--", "true"}
		}, []string{"--renew-deadline", `"5"`, "a duration with a unit"}, nil},
		{"shards: a number that is not one", func(t *testing.T) []string {
			return []string{"shards", "--store", tempStore(t), "--shards", "many"}
		}, []string{"--shards", `"many"`, "a whole number"}, nil},
		{"shards: a negative count", func(t *testing.T) []string {
			return []string{"shards", "--store", tempStore(t), "--shards", "-4"}
		}, []string{"--shards -4", "at least 1"}, []string{"exactly one of"}},
		{"a port past 65535", func(t *testing.T) []string {
			return []string{"elect", "--lock", lock(t), "--http", "", "--advertise", "127.0.0.1:99999"}
		}, []string{`--advertise "127.0.0.1:99999"`, "port", "65535"}, nil},
		{"a port that is not a number", func(t *testing.T) []string {
			return []string{"elect", "--lock", lock(t), "--http", "", "--advertise", "127.0.0.1:https"}
		}, []string{`--advertise "127.0.0.1:https"`, "port", "65535"}, nil},
		{"a listen port past 65535", func(t *testing.T) []string {
			return []string{"run", "--lock", lock(t), "--http", "", "--advertise", "10.0.0.1:8443", "--peer-listen", ":70000", "--", "true"}
		}, []string{`--peer-listen ":70000"`, "port", "65535"}, nil},
		{"a leader timeout too short for the retries", func(t *testing.T) []string {
			return []string{"elect", "--lock", lock(t), "--http", "", "--leader-timeout", "1ms"}
		}, []string{"--leader-timeout 1ms", "--retry", "1.65s"}, []string{"RetrySchedule", "RenewDeadline"}},
		{"store-only and peer mode required", func(t *testing.T) []string {
			return []string{"elect", "--lock", lock(t), "--http", "", "--advertise", "127.0.0.1:0", "--require-peer", "--no-peer"}
		}, []string{"--no-peer", "--require-peer"}, []string{"PeerDisabled", "PeerMode"}},
		{"timings named by their flags", func(t *testing.T) []string {
			return []string{"elect", "--lock", lock(t), "--http", "", "--frequent", "2s", "--infrequent", "1s"}
		}, []string{"--infrequent 1s", "--frequent 2s"}, []string{"InfrequentInterval", "FrequentInterval"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Accepted, the command would run until stopped.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			code, out, errs := runCmdCtx(t, ctx, c.args(t)...)
			if code == 0 || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want a refusal", code, out, errs)
			}
			line := strings.TrimSuffix(errs, "\n")
			if strings.Contains(line, "\n") {
				t.Fatalf("stderr has more than one line:\n%s", errs)
			}
			for _, s := range c.says {
				if !strings.Contains(line, s) {
					t.Errorf("stderr %q lacks %q", line, s)
				}
			}
			for _, s := range c.not {
				if strings.Contains(line, s) {
					t.Errorf("stderr %q names %q, which is not a flag", line, s)
				}
			}
		})
	}
}

func TestElectPeerPortTakenIsToldInFlags(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()

	// --require-peer: the member does not start, and says why in one line.
	code, _, errs := runCmd(t, "elect", "--lock", tempStore(t)+"/leader.json", "--http", "", "--advertise", addr, "--require-peer")
	if line := strings.TrimSuffix(errs, "\n"); code != 1 || strings.Contains(line, "\n") ||
		!strings.Contains(line, "--advertise "+addr) || !strings.Contains(line, "--peer-listen") {
		t.Fatalf("exit %d, stderr %q; want one line naming --advertise %s and --peer-listen", code, errs, addr)
	}

	// Otherwise it runs store-only, and the warning names the flags.
	ctx, cancel := context.WithCancel(t.Context())
	errb := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, &env{stdout: &lockedBuffer{}, stderr: errb},
			append(append([]string{"elect", "--lock", tempStore(t) + "/leader.json", "--http", "", "--advertise", addr}, fastFlags...), "--log-level", "info"))
	}()
	for end := time.Now().Add(20 * time.Second); !strings.Contains(errb.String(), "became leader"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			cancel()
			<-done
			t.Fatalf("the member did not lead:\n%s", errb.String())
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, errb.String())
	}
	logs := errb.String()
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "--no-peer") || !strings.Contains(logs, "--peer-listen") || strings.Contains(logs, "PeerDisabled") {
		t.Fatalf("the warning should name --no-peer and --peer-listen, not the library's PeerDisabled:\n%s", logs)
	}
}
