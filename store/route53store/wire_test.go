package route53store_test

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/smithy-go"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/route53store"
)

// recorder wraps the fake so that tests see every request: its method and
// the change batch it carried.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method string
	query  string
	batch  changeRequest
}

func (r *recorder) hook(f *fakeRoute53, answer func(w http.ResponseWriter, req *http.Request) bool) {
	f.setHook(func(w http.ResponseWriter, req *http.Request) bool {
		rec := recorded{method: req.Method, query: req.URL.RawQuery}
		if req.Method == http.MethodPost {
			b, _ := io.ReadAll(req.Body)
			_ = xml.Unmarshal(b, &rec.batch)
			req.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, rec)
		r.mu.Unlock()
		return answer != nil && answer(w, req)
	})
}

func (r *recorder) since(n int) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs[n:])
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

// actions returns a change batch's actions, such as "DELETE CREATE".
func (c changeRequest) actions() string {
	var a []string
	for _, ch := range c.Changes {
		a = append(a, ch.Action)
	}
	return strings.Join(a, " ")
}

func newStore(t *testing.T, f *fakeRoute53, prefix string, opts route53store.Options) (*store.Store, *route53store.Store) {
	t.Helper()
	d, err := route53store.New(f.client(), f.zoneID, f.zoneName, prefix, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(d)
	t.Cleanup(func() { _ = s.Close() })
	return s, d
}

// The change batches on the wire: a create is one CREATE; a swap is one
// request that DELETEs the exact current record and CREATEs the new one; a
// conditional delete DELETEs the exact record.
func TestWireChangeBatches(t *testing.T) {
	f := newFakeRoute53(t)
	var rec recorder
	rec.hook(f, nil)
	s, _ := newStore(t, f, "tenure", unpaced)

	n := rec.count()
	v1, err := s.Put(ctx(t), "lock", []byte("owner one"), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	reqs := rec.since(n)
	if len(reqs) != 1 || reqs[0].method != http.MethodPost || reqs[0].batch.actions() != "CREATE" {
		t.Fatalf("create sent %+v, want one CREATE", reqs)
	}
	created := reqs[0].batch.Changes[0].Set
	wantName := route53store.RecordName("lock", "tenure.example.test.")
	if created.Name != wantName || created.Type != "TXT" || created.TTL != route53store.RecordTTL || len(created.Values) != 1 {
		t.Errorf("created %+v, want one TXT value at %s", created, wantName)
	}
	if v1 != route53store.VersionOf(created.TTL, created.Values[0]) {
		t.Errorf("version %q is not the digest of the record created", v1)
	}

	n = rec.count()
	v2, err := s.Put(ctx(t), "lock", []byte("owner two"), store.IfMatch(v1))
	if err != nil {
		t.Fatal(err)
	}
	reqs = rec.since(n)
	if len(reqs) != 1 || reqs[0].batch.actions() != "DELETE CREATE" {
		t.Fatalf("swap on a version this store wrote sent %d requests (%+v), want one DELETE CREATE batch", len(reqs), reqs)
	}
	del := reqs[0].batch.Changes[0].Set
	if del.Name != wantName || del.TTL != created.TTL || !slices.Equal(del.Values, created.Values) {
		t.Errorf("DELETE names %+v, want exactly the record created: %+v", del, created)
	}

	// Another store (another process) has not seen v2: it reads first,
	// then sends the same kind of batch.
	other, _ := newStore(t, f, "tenure", unpaced)
	n = rec.count()
	if err := other.Delete(ctx(t), "lock", store.IfMatch(v2)); err != nil {
		t.Fatal(err)
	}
	reqs = rec.since(n)
	if len(reqs) != 2 || reqs[0].method != http.MethodGet || reqs[1].batch.actions() != "DELETE" {
		t.Fatalf("conditional delete from a fresh store sent %+v, want a read and one DELETE", reqs)
	}
	if _, ok := f.get(wantName, "TXT"); ok {
		t.Error("the record is still there")
	}
}

// shardcoordinator's "eventual consistency enabling lock theft": a reader
// sees a stale record and swaps on it. Here the swap names the stale
// record exactly in its DELETE, which Route 53 checks against its own
// current record, so it fails and nothing changes.
func TestStaleReadCannotStealTheLock(t *testing.T) {
	f := newFakeRoute53(t)
	leader, _ := newStore(t, f, "tenure", unpaced)
	v1, err := leader.Put(ctx(t), "lock", []byte(`{"leader":"a","term":1}`), store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	name := route53store.RecordName("lock", "tenure.example.test.")
	stale, _ := f.get(name, "TXT")
	// The leader renews; a lagging read path keeps answering the old
	// record.
	if _, err := leader.Put(ctx(t), "lock", []byte(`{"leader":"a","term":1,"renewed":true}`), store.IfMatch(v1)); err != nil {
		t.Fatal(err)
	}
	current, _ := f.get(name, "TXT")
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/rrset") {
			return false
		}
		writeXML(w, fmt.Sprintf(`<ListResourceRecordSetsResponse xmlns="%s"><ResourceRecordSets><ResourceRecordSet><Name>%s</Name><Type>TXT</Type><TTL>%d</TTL><ResourceRecords><ResourceRecord><Value>%s</Value></ResourceRecord></ResourceRecords></ResourceRecordSet></ResourceRecordSets><IsTruncated>false</IsTruncated><MaxItems>1</MaxItems></ListResourceRecordSetsResponse>`,
			r53NS, name, stale.TTL, xmlEscape(stale.Values[0])))
		return true
	})
	thief, _ := newStore(t, f, "tenure", unpaced)
	data, seen, err := thief.Get(ctx(t), "lock")
	if err != nil || seen != v1 || !strings.Contains(string(data), `"term":1}`) {
		t.Fatalf("the stale read: %q, %q, %v", data, seen, err)
	}
	_, err = thief.Put(ctx(t), "lock", []byte(`{"leader":"b","term":2}`), store.IfMatch(seen))
	if !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("swap on a stale read: %v, want ErrPreconditionFailed", err)
	}
	if now, _ := f.get(name, "TXT"); !slices.Equal(now.Values, current.Values) {
		t.Errorf("the refused swap changed the record: %q", now.Values)
	}
}

// Owner IDs with spaces, quotes and backslashes round-trip: the value is
// base64 in quoted strings, never split on a space.
func TestValuesWithSpacesRoundTrip(t *testing.T) {
	f := newFakeRoute53(t)
	s, _ := newStore(t, f, "tenure", unpaced)
	for _, owner := range []string{"host-a 1234 5f1c", `with "quotes" and \backslash`, " leading and trailing ", ""} {
		key := "owner/" + fmt.Sprint(len(owner))
		data := []byte(owner)
		if _, err := s.Put(ctx(t), key, data, store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
		got, _, err := s.Get(ctx(t), key)
		if err != nil || string(got) != owner {
			t.Errorf("owner %q came back as %q, %v", owner, got, err)
		}
	}
}

func TestValueLimitIsCheckedBeforeAnyRequest(t *testing.T) {
	f := newFakeRoute53(t)
	var rec recorder
	rec.hook(f, nil)
	s, d := newStore(t, f, "tenure", unpaced)
	if d.MaxValueSize() != route53store.MaxValueSize {
		t.Errorf("MaxValueSize() = %d", d.MaxValueSize())
	}
	_, err := s.Put(ctx(t), "k", make([]byte, route53store.MaxValueSize+1), store.IfAbsent())
	if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "4000 characters") {
		t.Errorf("one byte over: %v", err)
	}
	if rec.count() != 0 {
		t.Errorf("%d requests for an oversized value", rec.count())
	}
	// The largest value passes the fake, which refuses TXT values over
	// 4,000 characters as Route 53 does.
	if _, err := s.Put(ctx(t), "k", make([]byte, route53store.MaxValueSize), store.IfAbsent()); err != nil {
		t.Errorf("the largest value: %v", err)
	}
	_, err = s.Put(ctx(t), strings.Repeat("k", d.MaxKeyLen()+1), nil, store.IfAbsent())
	if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "DNS") {
		t.Errorf("a key one byte over MaxKeyLen: %v", err)
	}
}

// List reads the whole subtree, page by page, skips what the driver did
// not write (the zone's own records, other programs' TXT records, a sibling
// name that shares the prefix's text) and sorts by key.
func TestListSkipsForeignRecordsAndSorts(t *testing.T) {
	f := newFakeRoute53(t)
	s, _ := newStore(t, f, "tenure", unpaced)
	other, _ := newStore(t, f, "tenure-b", unpaced) // sorts between tenure and its children as text
	var keys []string
	for i := 0; i < 650; i++ {
		k := fmt.Sprintf("log/%04d", (i*7919)%650) // written out of order
		keys = append(keys, k)
		if _, err := s.Put(ctx(t), k, []byte("x"), store.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Put(ctx(t), "log/0001", []byte("other"), store.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	f.put(fakeSet{Name: "_acme-challenge.tenure.example.test.", Type: "TXT", TTL: 60, Values: []string{`"token"`}})
	f.put(fakeSet{Name: "tenure.example.test.", Type: "TXT", TTL: 60, Values: []string{`"v=spf1 -all"`}})
	f.put(fakeSet{Name: route53store.RecordName("log/0001", "tenure.example.test."), Type: "A", TTL: 60, Values: []string{"192.0.2.1"}})
	slices.Sort(keys)

	_, lists0 := f.counts()
	items, err := s.List(ctx(t), "log/", "log/0100", 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := itemKeys(items); !slices.Equal(got, keys[101:106]) {
		t.Errorf("List after log/0100 = %q, want %q", got, keys[101:106])
	}
	if _, lists := f.counts(); lists-lists0 != 3 {
		t.Errorf("List of 650 records took %d requests, want 3 (300 a page)", lists-lists0)
	}
	all, err := s.ListAll(ctx(t), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got := itemKeys(all); !slices.Equal(got, keys) {
		t.Errorf("ListAll = %d keys %q…, want %d", len(got), got[:min(3, len(got))], len(keys))
	}
	if items, _ := other.List(ctx(t), "", "", 10); len(items) != 1 {
		t.Errorf("the sibling store lists %q", itemKeys(items))
	}
}

func itemKeys(items []store.Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Key)
	}
	return out
}

func TestForeignRecordAtAKeysName(t *testing.T) {
	f := newFakeRoute53(t)
	s, _ := newStore(t, f, "tenure", unpaced)
	f.put(fakeSet{Name: route53store.RecordName("k", "tenure.example.test."), Type: "TXT", TTL: 60, Values: []string{`"hello world"`}})
	// Refused as the key's damaged data (store.ErrCorrupt), which a
	// replicated state machine refuses to serve past (docs/rsm.md rule 12).
	if _, _, err := s.Get(ctx(t), "k"); !errors.Is(err, store.ErrPermanent) || !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "not a record written by tenure") {
		t.Errorf("Get: %v", err)
	}
	if _, err := s.List(ctx(t), "", "", 10); !errors.Is(err, store.ErrPermanent) || !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("List: %v", err)
	}
}

func TestConditionalChangesAreNotRetried(t *testing.T) {
	cases := []struct {
		name    string
		call    func(s *store.Store, v string) error
		changes int // change requests expected
	}{
		{"create", func(s *store.Store, v string) error {
			_, err := s.Put(ctx(t), "new", []byte("x"), store.IfAbsent())
			return err
		}, 1},
		{"compare-and-swap", func(s *store.Store, v string) error {
			_, err := s.Put(ctx(t), "k", []byte("y"), store.IfMatch(v))
			return err
		}, 1},
		{"conditional delete", func(s *store.Store, v string) error { return s.Delete(ctx(t), "k", store.IfMatch(v)) }, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeRoute53(t)
			s, _ := newStore(t, f, "tenure", unpaced)
			v, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent())
			if err != nil {
				t.Fatal(err)
			}
			var rec recorder
			rec.hook(f, func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method != http.MethodPost {
					return false
				}
				r53Error(w, 500, "InternalFailure", "boom")
				return true
			})
			err = c.call(s, v)
			if !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
				t.Fatalf("error %v: want transient and ambiguous", err)
			}
			posts := 0
			for _, r := range rec.since(0) {
				if r.method == http.MethodPost {
					posts++
				}
			}
			if posts != c.changes {
				t.Errorf("%d change requests, want exactly %d", posts, c.changes)
			}
		})
	}
	t.Run("reads are retried", func(t *testing.T) {
		f := newFakeRoute53(t)
		s, _ := newStore(t, f, "tenure", unpaced)
		var rec recorder
		rec.hook(f, func(w http.ResponseWriter, r *http.Request) bool {
			r53Error(w, 500, "InternalFailure", "boom")
			return true
		})
		_, _, err := s.Get(ctx(t), "k")
		if !errors.Is(err, store.ErrTransient) || rec.count() < 2 {
			t.Errorf("Get: %v after %d requests; want transient after the SDK's retries", err, rec.count())
		}
	})
}

// A change that Route 53 refused as throttled was not applied, so the
// driver sends it again, after a backoff; if Route 53 keeps refusing, the
// error is ErrThrottled.
func TestThrottledChangesAreResent(t *testing.T) {
	for _, code := range []string{"Throttling", "PriorRequestNotComplete"} {
		t.Run(code, func(t *testing.T) {
			f := newFakeRoute53(t)
			s, _ := newStore(t, f, "tenure", route53store.Options{RequestsPerSecond: -1, ThrottleRetries: 2})
			var refuse atomic.Int32
			refuse.Store(2)
			var rec recorder
			rec.hook(f, func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method != http.MethodPost || refuse.Add(-1) < 0 {
					return false
				}
				r53Error(w, 400, code, "Rate exceeded")
				return true
			})
			if _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); err != nil {
				t.Fatalf("Put after two refusals: %v", err)
			}
			if n := rec.count(); n != 3 {
				t.Errorf("%d requests, want 3", n)
			}
			refuse.Store(100)
			_, err := s.Put(ctx(t), "k2", []byte("x"), store.IfAbsent())
			if !errors.Is(err, store.ErrThrottled) {
				t.Errorf("Put refused every time: %v, want ErrThrottled", err)
			}
			if store.IsAmbiguous(err) != true {
				// Throttled is retryable; callers still treat it as
				// possibly applied, which is safe.
				t.Errorf("IsAmbiguous(%v) = false", err)
			}
		})
	}
}

func TestErrorMapping(t *testing.T) {
	create := func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); return err }
	get := func(s *store.Store) error { _, _, err := s.Get(ctx(t), "k"); return err }
	list := func(s *store.Store) error { _, err := s.List(ctx(t), "", "", 10); return err }
	cases := []struct {
		name   string
		status int
		code   string
		msg    string
		call   func(*store.Store) error
		want   error
	}{
		{"already exists, ErrorResponse form", 400, "InvalidChangeBatch", "Tried to create resource record set [name='x.', type='TXT'] but it already exists", create, store.ErrPreconditionFailed},
		{"other InvalidChangeBatch", 400, "InvalidChangeBatch", "RRSet with DNS name x. is not permitted in zone y.", create, store.ErrInvalidArgument},
		{"no such zone", 404, "NoSuchHostedZone", "No hosted zone found", create, store.ErrPermanent},
		{"no such zone on get", 404, "NoSuchHostedZone", "No hosted zone found", get, store.ErrPermanent},
		{"access denied", 403, "AccessDenied", "not authorized", list, store.ErrPermanent},
		{"bad signature", 403, "SignatureDoesNotMatch", "bad", get, store.ErrPermanent},
		{"invalid input", 400, "InvalidInput", "bad", create, store.ErrInvalidArgument},
		{"internal failure", 500, "InternalFailure", "boom", create, store.ErrTransient},
		{"service unavailable", 503, "ServiceUnavailable", "later", create, store.ErrTransient},
	}
	sentinels := []error{store.ErrNotFound, store.ErrPreconditionFailed, store.ErrConflict, store.ErrThrottled,
		store.ErrTransient, store.ErrPermanent, store.ErrInvalidArgument}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeRoute53(t)
			s, _ := newStore(t, f, "tenure", route53store.Options{RequestsPerSecond: -1, ThrottleRetries: -1})
			f.setHook(func(w http.ResponseWriter, r *http.Request) bool { r53Error(w, c.status, c.code, c.msg); return true })
			err := c.call(s)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want one matching %v", err, c.want)
			}
			for _, other := range sentinels {
				if other != c.want && errors.Is(err, other) {
					t.Errorf("error also matches %v", other)
				}
			}
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != c.code {
				t.Errorf("errors.As(smithy.APIError) on %v", err)
			}
		})
	}
	// Route 53's own InvalidChangeBatch form carries several messages.
	f := newFakeRoute53(t)
	s, _ := newStore(t, f, "tenure", unpaced)
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		invalidChangeBatch(w, "Tried to delete resource record set [name='x.', type='TXT'] but the values provided do not match the current values")
		return true
	})
	if err := create(s); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Errorf("InvalidChangeBatch form: %v", err)
	}
}

func TestNew(t *testing.T) {
	client := route53.New(route53.Options{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	cases := []struct {
		zoneID, zoneName, prefix string
		opts                     route53store.Options
		ok                       bool
		root                     string
	}{
		{"Z1", "example.com.", "tenure", route53store.Options{}, true, "tenure.example.com."},
		{"/hostedzone/Z1", "Example.COM", "prod.tenure", route53store.Options{}, true, "prod.tenure.example.com."},
		{"", "example.com.", "tenure", route53store.Options{}, false, ""},
		{"Z1", "", "tenure", route53store.Options{}, false, ""},
		{"Z1", "example.com.", "", route53store.Options{}, false, ""},
		{"Z1", "example.com.", "Tenure", route53store.Options{}, false, ""},
		{"Z1", "example.com.", "a..b", route53store.Options{}, false, ""},
		{"Z1", "example.com.", "a b", route53store.Options{}, false, ""},
		{"Z1", "example.com.", strings.Repeat("x", 64), route53store.Options{}, false, ""},
		{"Z1", strings.Repeat("a.", 124), "tenure", route53store.Options{}, false, ""},
		{"Z1", "example.com.", "tenure", route53store.Options{Burst: -1}, false, ""},
	}
	for _, c := range cases {
		d, err := route53store.New(client, c.zoneID, c.zoneName, c.prefix, c.opts)
		switch {
		case c.ok && err != nil:
			t.Errorf("New(%q, %q, %q): %v", c.zoneID, c.zoneName, c.prefix, err)
		case !c.ok && err == nil:
			t.Errorf("New(%q, %q, %q) succeeded", c.zoneID, c.zoneName, c.prefix)
		case c.ok && d.Root() != c.root:
			t.Errorf("Root() = %q, want %q", d.Root(), c.root)
		}
	}
}
