package lease_test

import (
	"context"
	"log/slog"
	"testing"
)

// uniqueKeys fails the test on a log line that repeats a key: a JSON
// line would carry it twice, and readers keep only one of the two.
type uniqueKeys struct {
	slog.Handler
	t    *testing.T
	keys []string // from WithAttrs, with their groups
	grp  string
}

func checkKeys(t *testing.T, h slog.Handler) slog.Handler { return &uniqueKeys{Handler: h, t: t} }

func (u *uniqueKeys) Handle(ctx context.Context, r slog.Record) error {
	seen := map[string]bool{}
	for _, k := range u.keys {
		seen[k] = true
	}
	r.Attrs(func(a slog.Attr) bool {
		k := u.grp + a.Key
		if seen[k] {
			u.t.Errorf("the log line %q repeats the key %q", r.Message, k)
		}
		seen[k] = true
		return true
	})
	if !u.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return u.Handler.Handle(ctx, r)
}

// Enabled is true at every level: lines the inner handler drops are
// checked too.
func (u *uniqueKeys) Enabled(context.Context, slog.Level) bool { return true }

func (u *uniqueKeys) WithAttrs(as []slog.Attr) slog.Handler {
	keys := append([]string(nil), u.keys...)
	for _, a := range as {
		k := u.grp + a.Key
		for _, have := range keys {
			if have == k {
				u.t.Errorf("a logger repeats the key %q", k)
			}
		}
		keys = append(keys, k)
	}
	return &uniqueKeys{Handler: u.Handler.WithAttrs(as), t: u.t, keys: keys, grp: u.grp}
}

func (u *uniqueKeys) WithGroup(name string) slog.Handler {
	return &uniqueKeys{Handler: u.Handler.WithGroup(name), t: u.t, keys: u.keys, grp: u.grp + name + "."}
}
