package demo

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestDemoEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes several seconds")
	}
	var out lockedBuffer
	d := &demo{out: &out, start: time.Now(), log: slog.New(slog.DiscardHandler)}
	if err := d.runEtcd(t.Context(), "file://"+t.TempDir()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"leads (term 1)", "stopped etcd", "leads (term 2); the put after the failover was acknowledged",
		"every acknowledged write", "each revision once, in order, across the failover", "the watch went on with no gap"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
