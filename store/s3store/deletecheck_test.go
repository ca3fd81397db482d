package s3store_test

import (
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/s3store"
)

// objectServer is a small S3 server in memory that enforces If-None-Match
// and If-Match on PUT, and on DELETE as told: as AWS S3 does, as MinIO
// does (If-Match ignored), or as versitygw does (a missing key deleted
// "successfully").
type objectServer struct {
	mu       sync.Mutex
	etags    map[string]string // path -> ETag
	deletes  string            // "enforced", "ignored", "missing-ok"
	userDels int               // DELETEs outside the scratch prefix
}

func (o *objectServer) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur, exists := o.etags[r.URL.Path]
	if r.Method == http.MethodDelete && !strings.Contains(r.URL.Path, "/.tenure-probe/") {
		o.userDels++
	}
	switch r.Method {
	case http.MethodPut:
		body, _ := io.ReadAll(r.Body)
		if (r.Header.Get("If-None-Match") == "*" && exists) || (r.Header.Get("If-Match") != "" && r.Header.Get("If-Match") != cur) {
			s3Error(w, http.StatusPreconditionFailed, "PreconditionFailed")
			return
		}
		sum := md5.Sum(body)
		etag := `"` + hex.EncodeToString(sum[:]) + `"`
		o.etags[r.URL.Path] = etag
		w.Header().Set("ETag", etag)
	case http.MethodDelete:
		if m := r.Header.Get("If-Match"); m != "" {
			switch {
			case o.deletes == "ignored":
			case !exists && o.deletes == "missing-ok":
			case !exists:
				s3Error(w, http.StatusNotFound, "NoSuchKey")
				return
			case m != cur:
				s3Error(w, http.StatusPreconditionFailed, "PreconditionFailed")
				return
			}
		}
		delete(o.etags, r.URL.Path)
		w.WriteHeader(http.StatusNoContent)
	default:
		s3Error(w, http.StatusNotImplemented, "NotImplemented")
	}
}

// On a server that ignores the condition of a delete, in either way, the
// first conditional delete finds out (once) and every conditional delete
// is refused with ErrUnsupported naming the server; none reaches the
// caller's key. On a server that enforces it, conditional deletes are sent
// after the same one check.
func TestConditionalDeleteChecksTheServer(t *testing.T) {
	for _, tc := range []struct {
		deletes string
		says    string // "" when the deletes are enforced
	}{
		{"enforced", ""},
		{"ignored", "a delete on a stale version succeeded; a delete of a missing key succeeded"},
		{"missing-ok", "a delete of a missing key succeeded"},
	} {
		t.Run(tc.deletes, func(t *testing.T) {
			o := &objectServer{etags: map[string]string{}, deletes: tc.deletes}
			f := newFake(t, o.serve)
			d, err := s3store.New(f.client(), "bucket", "p", s3store.Options{Endpoint: f.srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			s := store.New(d)
			defer s.Close()
			v1, err := s.Put(ctx(t), "k", []byte("one"), store.IfAbsent())
			if err != nil {
				t.Fatal(err)
			}
			v2, err := s.Put(ctx(t), "k", []byte("two"), store.IfMatch(v1))
			if err != nil {
				t.Fatal(err)
			}
			before := len(f.requests())
			err = s.Delete(ctx(t), "k", store.IfMatch(v1))
			if n := len(f.requests()) - before; n != 5 && n != 6 {
				t.Fatalf("the first conditional delete sent %d requests; want the check's five (and its own)", n)
			}
			if tc.says == "" {
				if !errors.Is(err, store.ErrPreconditionFailed) {
					t.Fatalf("delete on a stale version: %v; want ErrPreconditionFailed", err)
				}
				if err := s.Delete(ctx(t), "k", store.IfMatch(v2)); err != nil {
					t.Fatalf("delete on the current version: %v", err)
				}
				if o.userDels != 2 {
					t.Fatalf("%d deletes of k sent; want 2", o.userDels)
				}
			} else {
				if !errors.Is(err, store.ErrUnsupported) || !strings.Contains(err.Error(), f.srv.URL) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("delete on a stale version: %v; want ErrUnsupported naming %s and saying %q", err, f.srv.URL, tc.says)
				}
				before = len(f.requests())
				for _, v := range []string{v2, v1} {
					if err := s.Delete(ctx(t), "k", store.IfMatch(v)); !errors.Is(err, store.ErrUnsupported) {
						t.Fatalf("a later conditional delete: %v; want ErrUnsupported", err)
					}
				}
				if n := len(f.requests()) - before; n != 0 {
					t.Fatalf("later conditional deletes sent %d requests; want none", n)
				}
				if o.userDels != 0 {
					t.Fatalf("%d deletes of k reached the server; want none", o.userDels)
				}
				if o.etags["/bucket/p/k"] != v2 {
					t.Fatalf("k is %q; want it untouched at %q", o.etags["/bucket/p/k"], v2)
				}
			}
			for path := range o.etags {
				if strings.Contains(path, "/.tenure-probe/") {
					t.Fatalf("the check left %s behind", path)
				}
			}
		})
	}
}
