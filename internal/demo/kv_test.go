package demo

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/tenure-io/tenure/store/filestore"
)

func TestDemoKV(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes several seconds")
	}
	var out lockedBuffer
	d := &demo{out: &out, start: time.Now(), log: slog.New(slog.DiscardHandler)}
	if err := d.runKV(t.Context(), "file://"+t.TempDir(), 20); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"leads (term 1)", "killed kv", "leads (term 2)", "cold restart", "recovered 30/30 acknowledged writes", "failover"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

// lockedBuffer is an output written by several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *lockedBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *lockedBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
