package pack

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/store/driver"
)

// TestReadsFormat1: a pack that filestore wrote in format 1
// (testdata/format1: twelve creates across segments of 256 bytes, the
// first four keys overwritten, the next two deleted, the oldest segment
// reclaimed) reads as written, and takes writes after it.
func TestReadsFormat1(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/format1")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := range 12 {
		switch {
		case i < 4:
			want[fmt.Sprintf("k%02d", i)] = fmt.Sprintf("second %d", i)
		case i >= 6:
			want[fmt.Sprintf("k%02d", i)] = fmt.Sprintf("value %d %s", i, strings.Repeat("x", i*7))
		}
	}
	l, err := Open(Config{Head: filepath.Join(dir, "log.d"), Segments: filepath.Join(dir, "log.p"), ValidKey: testValidKey})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	check := func(when string) {
		t.Helper()
		items, err := l.List("g/log/", "")
		if err != nil || len(items) != len(want) {
			t.Fatalf("%s: List = %d keys, %v; want %d", when, len(items), err, len(want))
		}
		for _, it := range items {
			key := strings.TrimPrefix(it.Key, "g/log/")
			data, version, err := l.Get(it.Key, math.MaxInt64, nil)
			if err != nil || string(data) != want[key] || version != Version(data) || it.Version != version {
				t.Fatalf("%s: Get(%q) = %q, %s, %v; want %q", when, it.Key, data, version, err, want[key])
			}
		}
		for _, gone := range []string{"k04", "k05"} {
			if _, ok := want[gone]; ok {
				continue
			}
			if _, _, err := l.Get("g/log/"+gone, math.MaxInt64, nil); driver.Classify(nil, err) != driver.NotFound {
				t.Fatalf("%s: Get of deleted %s: %v; want not found", when, gone, err)
			}
		}
	}
	check("opened")
	if _, err := l.Put(t.Context(), "g/log/k04", []byte("again"), driver.Cond{Kind: driver.IfAbsent}); err != nil {
		t.Fatal(err)
	}
	want["k04"] = "again"
	if _, err := l.Put(t.Context(), "g/log/k06", []byte("over"), driver.Cond{Kind: driver.IfAbsent}); driver.Classify(nil, err) != driver.PreconditionFailed {
		t.Fatalf("create over a key of the fixture: %v; want precondition failed", err)
	}
	check("after a write")
}
