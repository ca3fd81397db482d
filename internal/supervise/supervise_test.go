//go:build unix

package supervise_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/supervise"
)

func TestLeadExitsByItself(t *testing.T) {
	l := &supervise.Lead{Cmd: exec.Command("sh", "-c", "exit 3"), Grace: time.Second, Log: slog.New(slog.DiscardHandler)}
	code, exited, err := l.Run(t.Context())
	if err != nil || !exited || code != 3 {
		t.Fatalf("status %d, exited %v, %v; want 3, true", code, exited, err)
	}
}

// When leadership ends the command gets SIGTERM, and SIGKILL if it
// outlives the grace period.
func TestLeadEnds(t *testing.T) {
	for _, c := range []struct {
		name, script string
		status       int
	}{
		{"stops on SIGTERM", "exec sleep 30", 128 + 15},
		{"ignores SIGTERM", "trap '' TERM; sleep 30 & wait; sleep 30", 128 + 9},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			var started, stopped bool
			l := &supervise.Lead{Cmd: exec.Command("sh", "-c", c.script), Grace: 300 * time.Millisecond, Log: slog.New(slog.DiscardHandler),
				Started: func(p *os.Process) { started, stopped = started || p != nil, p == nil }}
			time.AfterFunc(200*time.Millisecond, cancel)
			code, exited, err := l.Run(ctx)
			if err != nil || exited || code != c.status {
				t.Fatalf("status %d, exited %v, %v; want %d, false", code, exited, err, c.status)
			}
			if !started || !stopped {
				t.Errorf("Started told of the process %v, of its end %v", started, stopped)
			}
		})
	}
}
