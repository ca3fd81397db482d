package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/rsm"
)

// TestNodeFlagsMaxConcurrentRequests: kv serve and etcd serve hold 1,000
// commands at the leader unless told otherwise (the library holds
// S2C's 100), --max-concurrent-requests sets it, and a negative value is
// refused before the node starts.
func TestNodeFlagsMaxConcurrentRequests(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
		err  string
	}{
		{nil, kvMaxConcurrentRequests, ""},
		{[]string{"--max-concurrent-requests", "50"}, 50, ""},
		{[]string{"--max-concurrent-requests", "-1"}, 0, "MaxConcurrentRequests"},
	} {
		fs := flag.NewFlagSet("etcd serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		nf := addNodeFlags(fs, "etcd")
		args := append([]string{"--store", "file://" + t.TempDir(), "--peer-listen", "127.0.0.1:0"}, tc.args...)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		ns, err := nf.setup(context.Background(), log, func(err error) error { return err }, rsm.DefaultMaxMessageSize)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v; want one naming %s", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		ns.host.Listener.Close()
		if got := ns.opts.MaxConcurrentRequests; got != tc.want {
			t.Errorf("%v: MaxConcurrentRequests %d; want %d", tc.args, got, tc.want)
		}
	}
}
