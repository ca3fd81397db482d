package azurestore_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/azurestore"
	"github.com/tenure-io/tenure/store/driver"
)

// refusedKeys are keys the portable layer accepts but Azure cannot store
// under their own name, each with a word the error must contain.
var refusedKeys = map[string]string{
	`back\slash`:              `"\" into "/"`,
	"trailing.":               `ends in "."`,
	"...":                     `ends in "."`,
	".":                       `ends in "."`,
	"..":                      `ends in "."`,
	"dots/./and/../segments":  `ends in "."`,
	"segment./x":              `ends in "."`,
	strings.Repeat("s/", 260): "path segments",
	"c1\u0085control":         "U+0085",
	"private\ue000use":        "U+E000",
	"non\uffffcharacter":      "U+FFFF",
}

// acceptedKeys are the conformance suite's awkward keys that Azure does
// store faithfully, and a few more.
var acceptedKeys = []string{
	"plain",
	"with/slashes/in/it",
	"/leading-slash",
	"trailing-slash/",
	"double//slash",
	"  with spaces  and more spaces  ",
	"unicode/日本語/ключ/🔑",
	".hidden/x.y",
	"percent%2Fencoded%",
	"query?x=1&y=2#frag",
	"plus+equals=comma,semicolon;colon:",
	"quote\"apostrophe'",
	"brackets[]{}()<>|*!~^`$@",
	"a.k", "a.d", "a.c", ".tmp", ".locks", "%41",
	"\u00a0nbsp and \u00ff",
	strings.Repeat("s/", 251) + "x", // 252 segments, 254 with newPrefix's two
}

func TestCheckKey(t *testing.T) {
	d, err := azurestore.New(clientFor(t, testutil.AzuriteServer{Endpoint: "http://127.0.0.1:1/devstoreaccount1", Account: testutil.AzuriteAccount, Key: testutil.AzuriteKey, Container: "c"}, nil),
		"tenure", azurestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for key, word := range refusedKeys {
		err := d.CheckKey(key)
		if err == nil || !strings.Contains(err.Error(), word) {
			t.Errorf("CheckKey(%.40q) = %v; want an error that says %s", key, err, word)
		}
	}
	for _, key := range acceptedKeys {
		if err := d.CheckKey(key); err != nil {
			t.Errorf("CheckKey(%.40q) = %v; want nil", key, err)
		}
	}
	if d.MaxKeyLen() != azurestore.MaxBlobNameLen-len("tenure/") {
		t.Errorf("MaxKeyLen = %d, want %d", d.MaxKeyLen(), azurestore.MaxBlobNameLen-len("tenure/"))
	}
	if err := d.CheckKey(strings.Repeat("k", d.MaxKeyLen())); err != nil {
		t.Errorf("a key of MaxKeyLen bytes: %v", err)
	}
	if err := d.CheckKey(strings.Repeat("k", d.MaxKeyLen()+1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a key of MaxKeyLen+1 bytes: %v, want an error naming the limit", err)
	}
	// The prefix's segments count: "tenure/" is one, so 253 in the key is
	// the most.
	if err := d.CheckKey(strings.Repeat("s/", 252) + "x"); err != nil {
		t.Errorf("a key of 253 segments under a one-segment prefix: %v", err)
	}
	if err := d.CheckKey(strings.Repeat("s/", 253) + "x"); err == nil {
		t.Error("a key of 254 segments under a one-segment prefix was accepted")
	}
}

func TestNewRefusesBadPrefixes(t *testing.T) {
	client := clientFor(t, testutil.AzuriteServer{Endpoint: "http://127.0.0.1:1/devstoreaccount1", Account: testutil.AzuriteAccount, Key: testutil.AzuriteKey, Container: "c"}, nil)
	for _, prefix := range []string{"/abs", "dot./x", `back\slash`, strings.Repeat("p", azurestore.MaxBlobNameLen)} {
		_, err := azurestore.New(client, prefix, azurestore.Options{})
		if driver.Classify(nil, err) != driver.Permanent {
			t.Errorf("New with prefix %.40q: %v, want a permanent error", prefix, err)
		}
	}
	if _, err := azurestore.New(nil, "", azurestore.Options{}); err == nil {
		t.Error("New with a nil client succeeded")
	}
	d, err := azurestore.New(client, "p", azurestore.Options{})
	if err != nil || d.Prefix() != "p/" {
		t.Errorf("New with prefix p: %v, prefix %q; want p/", err, d.Prefix())
	}
}

// TestKeysOnAzurite stores every accepted key on Azurite and reads it back,
// by Get and by List, and checks that refused keys are refused before any
// request, writing nothing. It stands in for the conformance suite's Keys
// case (see knownDefects).
func TestKeysOnAzurite(t *testing.T) {
	s := openOn(t, testutil.Azurite(t))(t)
	t.Cleanup(func() { _ = s.Close() })
	keys := append(slices.Clone(acceptedKeys), strings.Repeat("x", azurestore.MaxBlobNameLen-prefixLen), strings.Repeat("é", (azurestore.MaxBlobNameLen-prefixLen)/2))
	versions := map[string]string{}
	for _, k := range keys {
		v, err := s.Put(ctx(t), k, []byte("value of "+k), store.IfAbsent())
		if err != nil {
			t.Fatalf("Put(%.40q): %v", k, err)
		}
		versions[k] = v
	}
	for _, k := range keys {
		data, v, err := s.Get(ctx(t), k)
		if err != nil || string(data) != "value of "+k || v != versions[k] {
			t.Errorf("Get(%.40q) = %q, %q, %v; want its own value and version %q", k, data, v, err, versions[k])
		}
	}
	items, err := s.ListAll(ctx(t), "", 7)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := keysOf(items); !slices.Equal(got, want) {
		t.Fatalf("List of awkward keys:\n got %q\nwant %q", got, want)
	}
	for _, it := range items {
		if it.Version != versions[it.Key] || it.Size != int64(len("value of "+it.Key)) {
			t.Errorf("List item %.40q: version %q size %d; want %q, %d", it.Key, it.Version, it.Size, versions[it.Key], len("value of "+it.Key))
		}
	}
	for k, word := range refusedKeys {
		_, err := s.Put(ctx(t), k, []byte("x"), store.IfAbsent())
		if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), word) {
			t.Errorf("Put(%.40q): %v; want ErrInvalidArgument saying %s", k, err, word)
		}
		if _, _, err := s.Get(ctx(t), k); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("Get(%.40q): %v; want ErrInvalidArgument", k, err)
		}
	}
	for _, k := range keys {
		if err := s.Delete(ctx(t), k, store.IfMatch(versions[k])); err != nil {
			t.Errorf("Delete(%.40q): %v", k, err)
		}
	}
	if items, err := s.List(ctx(t), "", "", 10); err != nil || len(items) != 0 {
		t.Fatalf("List after deleting every key = %q, %v; the refused keys must not have been written", keysOf(items), err)
	}
}
