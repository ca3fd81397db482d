package store_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/store"
	_ "github.com/tenure-io/tenure/store/memstore" // mem://
)

func TestSplitKeyURL(t *testing.T) {
	cases := []struct{ in, store, key, err string }{
		{"s3://bucket/prefix/leader.json?region=eu", "s3://bucket/prefix?region=eu", "leader.json", ""},
		{"s3://bucket/leader.json", "s3://bucket", "leader.json", ""},
		{"s3://bucket//jobs/leader.json", "s3://bucket", "jobs/leader.json", ""},
		{"s3://bucket/prefix//jobs/a/leader.json?region=eu", "s3://bucket/prefix?region=eu", "jobs/a/leader.json", ""},
		{"file://./data/leader.json", "file://./data", "leader.json", ""},
		{"file://./data//examples/leader.json", "file://./data", "examples/leader.json", ""},
		{"file://.//leader.json", "file://.", "leader.json", ""},
		{"file:///var/lib/tenure/x.json", "file:///var/lib/tenure", "x.json", ""},
		{"file:///var/lib/tenure//a/x.json", "file:///var/lib/tenure", "a/x.json", ""},
		{"mem://name/leader.json", "mem://name", "leader.json", ""},
		{"mem://name/a%2Fb", "mem://name", "a/b", ""},
		{"mem://name/a%20b", "mem://name", "a b", ""},
		{"mem://na%20me/a", "", "", "invalid URL escape"},
		{"s3://bucket/prefix/", "", "", "must end with the key"},
		{"s3://bucket/prefix//", "", "", "must end with the key"},
		{"s3://bucket", "", "", "must end with the key"},
		{"leader.json", "", "", "no scheme"},
		{"file:data/leader.json", "", "", "want SCHEME://STORE/KEY"},
		{"file:///d//a/../b", "", "", `".." segment is not allowed`},
		{"file:///d//../b", "", "", `".." segment is not allowed`},
		{"file:///d/..", "", "", `".." segment is not allowed`},
		{"file:///d/../x.json", "", "", `".." segment is not allowed`},
		{"file:///d/%2E%2E/x.json", "", "", `".." segment is not allowed`},
		{"file:///d//a/%2e%2e/b", "", "", `".." segment is not allowed`},
		{"file:///d/./x.json", "", "", `"." segment is not allowed`},
		{"file:///d//./x.json", "", "", `"." segment is not allowed`},
		{"file:///d/.", "", "", `"." segment is not allowed`},
		{"file:///d//a//b", "", "", "empty segment"},
		{"file:///d//a/", "", "", "empty segment"},
		{"file:///d///a", "", "", "empty segment"},
		{"mem://x/%ff", "", "", "valid UTF-8"},
		{"mem://x/" + strings.Repeat("k", store.MaxKeyLen+1), "", "", "valid UTF-8 of at most"},
	}
	for _, c := range cases {
		st, key, err := store.SplitKeyURL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("SplitKeyURL(%q) = %q, %q, %v; want an error containing %q", c.in, st, key, err, c.err)
			}
			continue
		}
		if err != nil || st != c.store || key != c.key {
			t.Errorf("SplitKeyURL(%q) = %q, %q, %v; want %q, %q", c.in, st, key, err, c.store, c.key)
		}
	}
}

func TestJoinKeyURL(t *testing.T) {
	cases := []struct{ store, key, want, err string }{
		{"s3://bucket/prefix?region=eu", "leader.json", "s3://bucket/prefix/leader.json?region=eu", ""},
		{"s3://bucket/prefix/", "leader.json", "s3://bucket/prefix/leader.json", ""},
		{"s3://bucket", "jobs/leader.json", "s3://bucket//jobs/leader.json", ""},
		{"file://./data", "examples/leader.json", "file://./data//examples/leader.json", ""},
		{"file:///var/lib/tenure", "a b/c%d", "file:///var/lib/tenure//a%20b/c%25d", ""},
		{"mem://x", "a/../b", "", `".." segment`},
		{"mem://x", "./b", "", `"." segment`},
		{"mem://x", "a//b", "", "empty segment"},
		{"mem://x", "a/", "", "empty segment"},
		{"mem://x", "", "", "1 to"},
		{"mem://x/a//b", "k", "", "empty segment"},
		{"file:///d/../e", "k", "", `".." segment`},
		{"bucket/prefix", "k", "", "want SCHEME://STORE"},
	}
	for _, c := range cases {
		got, err := store.JoinKeyURL(c.store, c.key)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("JoinKeyURL(%q, %q) = %q, %v; want an error containing %q", c.store, c.key, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("JoinKeyURL(%q, %q) = %q, %v; want %q", c.store, c.key, got, err, c.want)
		}
		st, key, err := store.SplitKeyURL(got)
		if err != nil || st != strings.Replace(c.store, "prefix/", "prefix", 1) || key != c.key {
			t.Errorf("SplitKeyURL(%q) = %q, %q, %v; want %q, %q back", got, st, key, err, c.store, c.key)
		}
	}
}

func TestOpenKey(t *testing.T) {
	name := "mem://keyurl-" + t.Name()
	s, key, err := store.OpenKey(t.Context(), name+"//a/b.json")
	if err != nil || key != "a/b.json" {
		t.Fatalf("OpenKey = %q, %v", key, err)
	}
	defer s.Close()
	if _, err := s.Put(t.Context(), key, []byte("x"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	direct, err := store.Open(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if data, _, err := direct.Get(t.Context(), "a/b.json"); err != nil || string(data) != "x" {
		t.Fatalf("the key through the store's URL: %q, %v", data, err)
	}
	if _, _, err := store.OpenKey(t.Context(), name+"/../b"); err == nil {
		t.Fatal("OpenKey accepted a .. segment")
	}
	if _, _, err := store.OpenKey(t.Context(), "nope://x/k"); !errors.Is(err, store.ErrUnknownScheme) {
		t.Fatalf("OpenKey of an unknown scheme: %v", err)
	}
}

// FuzzKeyURL checks that a key URL that splits joins back to one that
// splits the same way, and that no accepted key holds a dot segment.
func FuzzKeyURL(f *testing.F) {
	for _, s := range []string{"s3://b/p/k", "file://./d//a/b", "mem://x/%2E%2E", "file:///d//a/../b", "s3://b//a%2Fb/c?x=1#f", "A:/%2F", "mem://x/a%2F..%2Fb/k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		st, key, err := store.SplitKeyURL(raw)
		if err != nil {
			return
		}
		for _, seg := range strings.Split(key, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("SplitKeyURL(%q) accepted the key %q", raw, key)
			}
		}
		u, err := url.Parse(st)
		if err != nil {
			t.Fatalf("SplitKeyURL(%q) returned the store URL %q, which does not parse: %v", raw, st, err)
		}
		for _, seg := range strings.Split(u.Path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("SplitKeyURL(%q) accepted the store %q", raw, st)
			}
		}
		joined, err := store.JoinKeyURL(st, key)
		if err != nil {
			t.Fatalf("JoinKeyURL(%q, %q) of SplitKeyURL(%q): %v", st, key, raw, err)
		}
		st2, key2, err := store.SplitKeyURL(joined)
		if err != nil || st2 != st || key2 != key {
			t.Fatalf("SplitKeyURL(%q) = %q, %q, %v; want %q, %q (from %q)", joined, st2, key2, err, st, key, raw)
		}
	})
}
