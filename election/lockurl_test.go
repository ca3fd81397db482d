package election_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

func TestConfigLockURLValidate(t *testing.T) {
	mem := store.New(memstore.New())
	cases := []struct {
		name  string
		cfg   election.Config
		field string
	}{
		{"alone", election.Config{LockURL: "mem://x//a/leader.json", ServerID: "a"}, ""},
		{"with StoreURL", election.Config{LockURL: "mem://x/leader.json", StoreURL: "mem://x", ServerID: "a"}, "LockURL"},
		{"with Store", election.Config{LockURL: "mem://x/leader.json", Store: mem, ServerID: "a"}, "LockURL"},
		{"with LockfilePath", election.Config{LockURL: "mem://x/leader.json", LockfilePath: "l", ServerID: "a"}, "LockURL"},
		{"no key", election.Config{LockURL: "mem://x/", ServerID: "a"}, "must end with the key"},
		{"dot dot", election.Config{LockURL: "file:///d//a/../leader.json", ServerID: "a"}, `".." segment`},
		{"no scheme", election.Config{LockURL: "bucket/leader.json", ServerID: "a"}, "no scheme"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, election.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("Validate = %v; want an error naming %s", err, c.field)
			}
			if _, nerr := election.New(t.Context(), c.cfg); nerr == nil {
				t.Fatal("New accepted a config Validate refused")
			}
		})
	}
}

// TestConfigLockURLNamesTheSameLock: an elector configured by LockURL
// writes the record that one configured by StoreURL and LockfilePath
// reads, and the other way round.
func TestConfigLockURLNamesTheSameLock(t *testing.T) {
	storeURL := fmt.Sprintf("mem://lockurl-%s-%d", t.Name(), time.Now().UnixNano())
	const key = "jobs/leader.json"
	lockURL, err := store.JoinKeyURL(storeURL, key)
	if err != nil {
		t.Fatal(err)
	}
	if lockURL != storeURL+"//"+key {
		t.Fatalf("JoinKeyURL = %q", lockURL)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fast := election.Config{FrequentInterval: 50 * time.Millisecond, InfrequentInterval: 100 * time.Millisecond,
		LeaderTimeout: 2 * time.Second, RenewDeadline: time.Second, RetrySchedule: []time.Duration{0}, PeerTimeout: time.Second, Logger: quiet}

	lead := func(cfg election.Config, id string) *election.Elector {
		t.Helper()
		cfg.ServerID = id
		leading := make(chan struct{})
		cfg.OnStartedLeading = func(ctx context.Context) { close(leading); <-ctx.Done() }
		e, err := election.New(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-leading:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not lead", id)
		}
		return e
	}
	seen := func(cfg election.Config, wantID string, wantTerm uint64) {
		t.Helper()
		got := make(chan string, 16)
		cfg.ServerID = "watcher"
		cfg.OnNewLeader = func(id, _ string, term uint64) { got <- fmt.Sprintf("%s@%d", id, term) }
		e, err := election.New(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = e.Stop(context.Background()) }()
		want := fmt.Sprintf("%s@%d", wantID, wantTerm)
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("the other configuration saw leader %s; want %s", g, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the other configuration saw no leader; want %s", want)
		}
	}
	byURL, byParts := fast, fast
	byURL.LockURL = lockURL
	byParts.StoreURL, byParts.LockfilePath = storeURL, key

	a := lead(byURL, "a")
	seen(byParts, "a", 1)
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := lead(byParts, "b")
	seen(byURL, "b", 2)
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
