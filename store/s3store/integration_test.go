package s3store_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/faultstore"
	"github.com/tenure-io/tenure/store/s3store"
)

// These tests check, on every server, what the conformance cases listed in
// knownDefects stop checking at their first failure: keys every server
// stores, paging, the longest key; and what each server does with a
// conditional delete.

// portableKeys are awkward keys that S3 and both file-backed servers store
// under their own name.
var portableKeys = []string{
	"plain",
	"with/slashes/in/it",
	"  with spaces  and more spaces  ",
	"unicode/日本語/ключ/🔑",
	"...",
	"percent%2Fencoded%",
	"query?x=1&y=2#frag",
	"plus+equals=comma,semicolon;colon:",
	"quote\"apostrophe'back\\slash",
	"brackets[]{}()<>|*!~^`$@",
	"a.k", ".tmp", ".locks", "%41",
	"tilde~and\u00a0nbsp",
}

func TestPortableKeys(t *testing.T) {
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			s := openOn(server.start(t))(t)
			versions := map[string]string{}
			for _, k := range portableKeys {
				v, err := s.Put(ctx(t), k, []byte("value of "+k), store.IfAbsent())
				if err != nil {
					t.Fatalf("Put(%q): %v", k, err)
				}
				versions[k] = v
			}
			for _, k := range portableKeys {
				data, v, err := s.Get(ctx(t), k)
				if err != nil || string(data) != "value of "+k || v != versions[k] {
					t.Errorf("Get(%q) = %q, %q, %v; want its value and version %q", k, data, v, err, versions[k])
				}
			}
			items, err := s.ListAll(ctx(t), "", 4)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Sorted(slices.Values(portableKeys))
			var got []string
			for _, it := range items {
				got = append(got, it.Key)
				if it.Version != versions[it.Key] || it.Size != int64(len("value of "+it.Key)) {
					t.Errorf("List item %+v: want version %q, size %d", it, versions[it.Key], len("value of "+it.Key))
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("List:\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestListPagingOnServers(t *testing.T) {
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			s := openOn(server.start(t))(t)
			var keys []string
			for i := range 57 {
				k := fmt.Sprintf("log/%020d", i)
				keys = append(keys, k)
				if _, err := s.Put(ctx(t), k, []byte(k), store.IfAbsent()); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range []string{"lof", "log.", "other/x"} {
				if _, err := s.Put(ctx(t), k, []byte(k), store.IfAbsent()); err != nil {
					t.Fatal(err)
				}
			}
			for _, page := range []int{1, 2, 10, 56, 57, 58, 1000} {
				var got []string
				after := ""
				for calls := 0; calls <= len(keys)+1; calls++ {
					items, err := s.List(ctx(t), "log/", after, page)
					if err != nil {
						t.Fatalf("List page %d: %v", page, err)
					}
					for _, it := range items {
						got = append(got, it.Key)
					}
					if len(items) < page {
						break
					}
					after = items[len(items)-1].Key
				}
				if !slices.Equal(got, keys) {
					t.Errorf("paging by %d: got %d keys, want %d", page, len(got), len(keys))
				}
			}
			items, err := s.List(ctx(t), "log/", keys[54], 10)
			if err != nil || len(items) != 2 || items[0].Key != keys[55] {
				t.Errorf("List after %q = %v, %v; want the last two keys", keys[54], items, err)
			}
		})
	}
}

// TestLongestKey stores a key of exactly MaxKeyLen bytes, in path segments
// short enough for file-backed servers.
func TestLongestKey(t *testing.T) {
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			s := openOn(server.start(t))(t)
			max := s.Driver().(*s3store.Store).MaxKeyLen()
			seg := strings.Repeat("s", 199) + "/"
			key := strings.Repeat(seg, max/len(seg))
			key += strings.Repeat("x", max-len(key))
			if len(key) != max || strings.HasSuffix(key, "/") {
				t.Fatalf("test bug: key of %d bytes", len(key))
			}
			v, err := s.Put(ctx(t), key, []byte("v"), store.IfAbsent())
			if err != nil {
				t.Fatalf("Put of a %d-byte key: %v", max, err)
			}
			if _, gv, err := s.Get(ctx(t), key); err != nil || gv != v {
				t.Fatalf("Get = %q, %v; want %q", gv, err, v)
			}
			if items, err := s.List(ctx(t), "", "", 10); err != nil || len(items) != 1 || items[0].Key != key {
				t.Fatalf("List = %d items, %v; want the key", len(items), err)
			}
			if _, err := s.Put(ctx(t), key+"y", []byte("v"), store.IfAbsent()); !errors.Is(err, store.ErrInvalidArgument) {
				t.Fatalf("Put of a %d-byte key: %v, want ErrInvalidArgument", max+1, err)
			}
		})
	}
}

// deletesIgnored says, per server, what it does with a conditional delete
// whose condition does not hold: MinIO deletes on a stale version (and a
// missing key "succeeds"), versitygw deletes a missing key "successfully".
// On both the driver refuses every conditional delete.
var deletesIgnored = map[string]string{
	"minio":     "a delete on a stale version succeeded; a delete of a missing key succeeded",
	"versitygw": "a delete of a missing key succeeded",
}

// TestProbe checks that the driver passes each server's refusals of
// conditional writes through unchanged, so that store.Probe judges the
// server itself, and that the probe accepts a server on which the driver
// refuses conditional deletes.
func TestProbe(t *testing.T) {
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			s := openOn(server.start(t))(t)
			res, err := store.Probe(ctx(t), s, 3)
			if err != nil {
				t.Fatalf("probe: %v", err)
			}
			if !res.OK() || !res.CreateIfAbsent || !res.IfMatch {
				t.Fatalf("probe = %+v; want create-if-absent and if-match enforced", res)
			}
			if says := deletesIgnored[server.name]; says != "" && (res.DeleteIfMatch || !strings.Contains(res.DeleteUnsupported, says)) {
				t.Fatalf("probe: deletes enforced %v, refused %q; want them refused, saying %q", res.DeleteIfMatch, res.DeleteUnsupported, says)
			}
			t.Logf("probe: create %v\n  swap   %v\n  get    %v\n  delete: %s", res.CreatePut, res.CASPut, res.Get, res.DeleteUnsupported)
		})
	}
}

// TestConditionalDeleteOnServers: a conditional delete on a stale version
// and one of a missing key neither delete nor succeed on any server: where
// the server would ignore the condition, the driver refuses them with
// ErrUnsupported naming the server, and the object stays as it was.
func TestConditionalDeleteOnServers(t *testing.T) {
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			srv := server.start(t)
			s := openOn(srv)(t)
			v1, err := s.Put(ctx(t), "k", []byte("one"), store.IfAbsent())
			if err != nil {
				t.Fatal(err)
			}
			v2, err := s.Put(ctx(t), "k", []byte("two"), store.IfMatch(v1))
			if err != nil {
				t.Fatal(err)
			}
			want := store.ErrPreconditionFailed
			says := deletesIgnored[server.name]
			if says != "" {
				want = store.ErrUnsupported
			}
			for _, c := range []struct{ name, key, version string }{
				{"on a stale version", "k", v1},
				{"of a missing key", "absent", v2},
			} {
				err := s.Delete(ctx(t), c.key, store.IfMatch(c.version))
				if !errors.Is(err, want) {
					t.Fatalf("conditional delete %s: %v; want %v", c.name, err, want)
				}
				if says != "" && (!strings.Contains(err.Error(), srv.Endpoint) || !strings.Contains(err.Error(), says)) {
					t.Fatalf("conditional delete %s: %v; want the server named and %q", c.name, err, says)
				}
			}
			if data, v, err := s.Get(ctx(t), "k"); err != nil || string(data) != "two" || v != v2 {
				t.Fatalf("k after the refused deletes: %q, %q, %v; want \"two\" at %q", data, v, err, v2)
			}
			if _, _, err := s.Get(ctx(t), "absent"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("absent after the refused delete: %v; want ErrNotFound", err)
			}
			if items, err := s.List(ctx(t), store.ProbePrefix, "", 10); err != nil || len(items) != 0 {
				t.Fatalf("scratch keys left: %v, %v", items, err)
			}
		})
	}
}

// TestLostAnswerOnServers makes a real server apply a conditional write
// whose answer the client never gets. The driver must report it once, as
// ambiguous, instead of letting the SDK retry into a 412 against its own
// write; PutResolved then finds that it landed.
func TestLostAnswerOnServers(t *testing.T) {
	for _, server := range servers {
		t.Run(server.name, func(t *testing.T) {
			srv := server.start(t)
			tr := faultstore.NewTransport(http.DefaultTransport.(*http.Transport).Clone())
			hc := &http.Client{Transport: tr}
			defer hc.CloseIdleConnections()
			d, err := s3store.New(clientFor(srv, hc), srv.Bucket, newPrefix(), s3store.Options{Endpoint: srv.Endpoint})
			if err != nil {
				t.Fatal(err)
			}
			s := store.New(d)
			defer s.Close()
			drop := func() {
				t.Helper()
				if _, err := tr.AddRule(faultstore.HTTPRule{Method: http.MethodPut, Cond: faultstore.Conditional, P: 1, Times: 1, Action: faultstore.HTTPApplyThenDrop}); err != nil {
					t.Fatal(err)
				}
				tr.Reset()
			}

			drop()
			_, err = s.Put(ctx(t), "create", []byte(`{"nonce":"1"}`), store.IfAbsent())
			if !store.IsAmbiguous(err) || errors.Is(err, store.ErrPreconditionFailed) {
				t.Fatalf("create whose answer was lost: %v; want an ambiguous error", err)
			}
			if n := tr.Counts().MethodTotal(http.MethodPut); n != 1 {
				t.Fatalf("%d PUTs sent, want 1", n)
			}
			if data, _, err := s.Get(ctx(t), "create"); err != nil || string(data) != `{"nonce":"1"}` {
				t.Fatalf("the write should have landed: %q, %v", data, err)
			}

			v, err := s.Put(ctx(t), "swap", []byte(`{"nonce":"2"}`), store.IfAbsent())
			if err != nil {
				t.Fatal(err)
			}
			drop()
			want := []byte(`{"nonce":"3"}`)
			nv, err := store.PutResolved(ctx(t), s, "swap", want, store.IfMatch(v), store.ResolveOptions{})
			if err != nil {
				t.Fatalf("PutResolved after a lost answer: %v", err)
			}
			if data, gv, err := s.Get(ctx(t), "swap"); err != nil || string(data) != string(want) || gv != nv {
				t.Fatalf("Get = %q, %q, %v; want %q, %q", data, gv, err, want, nv)
			}
			if n := tr.Counts().MethodTotal(http.MethodPut); n != 1 {
				t.Errorf("%d PUTs sent, want 1: PutResolved should read back, not write again", n)
			}
		})
	}
}
