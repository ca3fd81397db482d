package kv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/rsm"
	"github.com/tenure-io/tenure/rsm/kv"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/memstore"
)

func newServer(t *testing.T, d *direct, opts kv.HandlerOptions) *httptest.Server {
	t.Helper()
	h, err := kv.NewHandler(kv.NewClient(d), opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// call sends one request and returns the status and the decoded JSON body.
func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if method != http.MethodHead {
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s %s: body is not JSON: %v\n%s", method, path, err, data)
		}
	}
	return resp.StatusCode, out, resp.Header
}

// TestHTTP runs one script of requests; each step sees the state the steps
// before it left.
func TestHTTP(t *testing.T) {
	d := newDirect()
	srv := newServer(t, d, kv.HandlerOptions{MaxValueSize: 16})
	steps := []struct {
		name, method, path, body string
		status                   int
		want                     map[string]any // fields the response must hold
	}{
		{"get of a missing key", "GET", "/v1/kv/a/b", "", 404, map[string]any{"code": "not_found", "key": "a/b"}},
		{"put", "PUT", "/v1/kv/a/b", "hello", 200, map[string]any{"key": "a/b", "revision": 1.0}},
		{"get, base64 by default", "GET", "/v1/kv/a/b", "", 200, map[string]any{"key": "a/b", "value": "aGVsbG8=", "revision": 1.0, "createRevision": 1.0}},
		{"get as text", "GET", "/v1/kv/a/b?encoding=text", "", 200, map[string]any{"value": "hello"}},
		{"an escaped slash is a slash", "GET", "/v1/kv/a%2Fb?encoding=text", "", 200, map[string]any{"key": "a/b", "value": "hello"}},
		{"unknown encoding", "GET", "/v1/kv/a/b?encoding=hex", "", 400, map[string]any{"code": "bad_request"}},
		{"overwrite", "PUT", "/v1/kv/a/b", "bye", 200, map[string]any{"revision": 2.0}},
		{"overwrite keeps the create revision", "GET", "/v1/kv/a/b", "", 200, map[string]any{"revision": 2.0, "createRevision": 1.0}},
		{"empty value", "PUT", "/v1/kv/empty", "", 200, map[string]any{"revision": 3.0}},
		{"empty value read back", "GET", "/v1/kv/empty?encoding=text", "", 200, map[string]any{"value": ""}},
		{"dots and double slashes are kept", "PUT", "/v1/kv/x//../y", "dots", 200, map[string]any{"key": "x//../y"}},
		{"binary value", "PUT", "/v1/kv/bin", "\xff\xfe", 200, nil},
		{"binary value as text", "GET", "/v1/kv/bin?encoding=text", "", 406, map[string]any{"code": "not_utf8"}},
		{"empty key", "PUT", "/v1/kv/", "x", 400, map[string]any{"code": "bad_request"}},
		{"empty key get", "GET", "/v1/kv/", "", 400, map[string]any{"code": "bad_request"}},
		{"key too long", "GET", "/v1/kv/" + strings.Repeat("k", kv.MaxKeySize+1), "", 400, nil},
		{"value too large", "PUT", "/v1/kv/big", strings.Repeat("v", 17), 413, map[string]any{"code": "too_large"}},
		{"largest value", "PUT", "/v1/kv/big", strings.Repeat("v", 16), 200, nil},
		{"cas at a stale revision", "POST", "/v1/cas", `{"key":"a/b","expectRevision":1,"value":"eA=="}`, 409,
			map[string]any{"code": "revision_mismatch", "swapped": false, "revision": 2.0}},
		{"cas", "POST", "/v1/cas", `{"key":"a/b","expectRevision":2,"value":"eA=="}`, 200, map[string]any{"swapped": true, "revision": 7.0}},
		{"cas as text", "POST", "/v1/cas?encoding=text", `{"key":"a/b","expectRevision":7,"value":"text"}`, 200, map[string]any{"swapped": true, "revision": 8.0}},
		{"cas read back", "GET", "/v1/kv/a/b?encoding=text", "", 200, map[string]any{"value": "text"}},
		{"cas create", "POST", "/v1/cas", `{"key":"new","expectRevision":0,"value":""}`, 200, map[string]any{"swapped": true, "revision": 9.0}},
		{"cas create of an existing key", "POST", "/v1/cas", `{"key":"new","expectRevision":0,"value":""}`, 409, map[string]any{"revision": 9.0}},
		{"cas without expectRevision", "POST", "/v1/cas", `{"key":"new","value":""}`, 400, map[string]any{"code": "bad_request"}},
		{"cas without value", "POST", "/v1/cas", `{"key":"new","expectRevision":0}`, 400, nil},
		{"cas with a value that is not base64", "POST", "/v1/cas", `{"key":"new","expectRevision":0,"value":"!!"}`, 400, nil},
		{"cas with an unknown field", "POST", "/v1/cas", `{"key":"new","expectRevison":0,"value":""}`, 400, nil},
		{"cas with an empty key", "POST", "/v1/cas", `{"key":"","expectRevision":0,"value":""}`, 400, nil},
		{"cas with a value too large", "POST", "/v1/cas?encoding=text", `{"key":"k","expectRevision":0,"value":"` + strings.Repeat("v", 17) + `"}`, 413, nil},
		{"cas with a body too large", "POST", "/v1/cas", `{"key":"k","expectRevision":0,"value":"` + strings.Repeat("A", 30000) + `"}`, 413, nil},
		{"cas with GET", "GET", "/v1/cas", "", 405, nil},
		{"delete", "DELETE", "/v1/kv/new", "", 200, map[string]any{"deleted": true, "revision": 10.0}},
		{"delete of a missing key", "DELETE", "/v1/kv/new", "", 404, map[string]any{"deleted": false, "revision": 10.0}},
		{"list", "GET", "/v1/list?prefix=a/", "", 200, map[string]any{"more": false}},
		{"list with a bad limit", "GET", "/v1/list?limit=0", "", 400, nil},
		{"list with a limit too large", "GET", "/v1/list?limit=10001", "", 400, nil},
		{"list with a bad keysOnly", "GET", "/v1/list?keysOnly=maybe", "", 400, nil},
		{"list of binary values as text", "GET", "/v1/list?encoding=text", "", 406, nil},
		{"status without a status func", "GET", "/v1/status", "", 404, nil},
		{"unknown path", "GET", "/v2/kv/a", "", 404, nil},
		{"method not allowed", "POST", "/v1/kv/a", "", 405, map[string]any{"code": "method_not_allowed"}},
	}
	for _, s := range steps {
		status, body, _ := call(t, srv, s.method, s.path, s.body)
		if status != s.status {
			t.Errorf("%s: %s %s: status %d; want %d (%v)", s.name, s.method, s.path, status, s.status, body)
			continue
		}
		for k, v := range s.want {
			if body[k] != v {
				t.Errorf("%s: %s = %#v; want %#v (%v)", s.name, k, body[k], v, body)
			}
		}
	}
}

func TestHTTPList(t *testing.T) {
	d := newDirect()
	srv := newServer(t, d, kv.HandlerOptions{})
	for _, k := range []string{"p/1", "p/2", "p/3", "q"} {
		if status, body, _ := call(t, srv, "PUT", "/v1/kv/"+k, "v"+k); status != 200 {
			t.Fatalf("put %s: %d %v", k, status, body)
		}
	}
	var got []string
	after := ""
	for page := 0; page < 10; page++ {
		status, body, _ := call(t, srv, "GET", "/v1/list?prefix=p/&limit=2&encoding=text&after="+after, "")
		if status != 200 {
			t.Fatalf("list: %d %v", status, body)
		}
		for _, it := range body["items"].([]any) {
			m := it.(map[string]any)
			got = append(got, fmt.Sprintf("%s=%s@%v", m["key"], m["value"], m["revision"]))
		}
		if body["more"] != true {
			break
		}
		after = body["next"].(string)
	}
	if want := "p/1=vp/1@1 p/2=vp/2@2 p/3=vp/3@3"; strings.Join(got, " ") != want {
		t.Errorf("pages gave %q; want %q", strings.Join(got, " "), want)
	}
	status, body, _ := call(t, srv, "GET", "/v1/list?keysOnly=true", "")
	if status != 200 || len(body["items"].([]any)) != 4 {
		t.Fatalf("keysOnly list: %d %v", status, body)
	}
	if _, ok := body["items"].([]any)[0].(map[string]any)["value"]; ok {
		t.Errorf("keysOnly list has values: %v", body)
	}
	status, body, _ = call(t, srv, "GET", "/v1/list?prefix=none", "")
	if status != 200 || body["items"] == nil || len(body["items"].([]any)) != 0 {
		t.Errorf("empty list: %d %v; want an empty items array", status, body)
	}
}

func TestHTTPStatus(t *testing.T) {
	st := rsm.Status{Group: "g", ID: "n1", State: "JOINED", Role: "LEADER", Term: 3}
	srv := newServer(t, newDirect(), kv.HandlerOptions{Status: func() rsm.Status { return st }})
	status, body, _ := call(t, srv, "GET", "/v1/status", "")
	if status != 200 || body["role"] != "LEADER" || body["term"] != 3.0 {
		t.Fatalf("status: %d %v", status, body)
	}
}

// TestHTTPErrors: the node's errors become statuses a client can act on.
func TestHTTPErrors(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		status     int
		code       string
		outcome    string
		retryAfter bool
	}{
		{"unknown outcome", fmt.Errorf("%w: %w", rsm.ErrUnknownOutcome, context.DeadlineExceeded), 504, "unknown_outcome", "unknown", false},
		{"result unavailable", rsm.ErrApplicationResultUnavailable, 500, "result_unavailable", "applied", false},
		{"not committed", fmt.Errorf("%w: %w", rsm.ErrNotCommitted, context.DeadlineExceeded), 503, "not_committed", "not_applied", true},
		{"not leader", &rsm.NotLeaderError{Leader: "n2", Addr: "10.0.0.2:7400", Term: 4}, 503, "not_leader", "not_applied", true},
		{"busy", rsm.ErrBusy, 503, "busy", "not_applied", true},
		{"too large", fmt.Errorf("%w: 600000 bytes", rsm.ErrTooLarge), 413, "too_large", "not_applied", false},
		{"closed", rsm.ErrClosed, 503, "closed", "unknown", true},
		{"unknown machine", rsm.ErrUnknownMachine, 500, "unknown_machine", "not_applied", false},
		{"corrupt object", &rsm.CorruptError{Key: "g/log/00000000000000000007", Err: errors.New("checksum mismatch")}, 503, "corrupt", "unknown", false},
		{"corrupt slot, outcome unknown", fmt.Errorf("%w: %w", rsm.ErrUnknownOutcome, &rsm.CorruptError{Key: "g/log/00000000000000000007", Err: errors.New("checksum mismatch")}), 504, "unknown_outcome", "unknown", false},
		{"deadline", context.DeadlineExceeded, 504, "timeout", "unknown", false},
		{"anything else", errors.New("rsm: disk on fire"), 500, "internal", "unknown", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirect()
			d.fail(tc.err)
			srv := newServer(t, d, kv.HandlerOptions{})
			status, body, h := call(t, srv, "PUT", "/v1/kv/k", "v")
			if status != tc.status || body["code"] != tc.code || body["outcome"] != tc.outcome {
				t.Errorf("PUT: %d %v; want %d, code %s, outcome %s", status, body, tc.status, tc.code, tc.outcome)
			}
			if (h.Get("Retry-After") != "") != tc.retryAfter {
				t.Errorf("Retry-After %q; want it set: %v", h.Get("Retry-After"), tc.retryAfter)
			}
			if !strings.Contains(body["error"].(string), tc.err.Error()) {
				t.Errorf("error %q does not say %q", body["error"], tc.err)
			}
			if tc.outcome == "unknown" && !strings.Contains(body["error"].(string), "may or may not have been applied") {
				t.Errorf("error %q does not say the outcome is unknown", body["error"])
			}
			status, body, _ = call(t, srv, "GET", "/v1/kv/k", "")
			if status != tc.status || body["outcome"] != nil {
				t.Errorf("GET: %d %v; want %d and no outcome", status, body, tc.status)
			}
		})
	}
	t.Run("leader named", func(t *testing.T) {
		d := newDirect()
		d.fail(&rsm.NotLeaderError{Leader: "n2", Addr: "10.0.0.2:7400", Term: 4})
		_, body, _ := call(t, newServer(t, d, kv.HandlerOptions{}), "DELETE", "/v1/kv/k", "")
		if body["leader"] != "n2" || body["leaderAddr"] != "10.0.0.2:7400" {
			t.Errorf("body %v does not name the leader", body)
		}
	})
}

func TestHandlerOptions(t *testing.T) {
	if _, err := kv.NewHandler(kv.NewClient(newDirect()), kv.HandlerOptions{MaxValueSize: -1}); err == nil || !strings.Contains(err.Error(), "MaxValueSize") {
		t.Errorf("NewHandler with a negative MaxValueSize: %v; want an error naming the field", err)
	}
	if _, err := kv.NewHandler(kv.NewClient(newDirect()), kv.HandlerOptions{MaxValueSize: kv.MaxValueSizeLimit + 1}); err == nil || !strings.Contains(err.Error(), "MaxValueSizeLimit") {
		t.Errorf("NewHandler with MaxValueSize above what a group carries: %v; want an error naming the limit", err)
	}
	if _, err := kv.NewHandler(nil, kv.HandlerOptions{}); err == nil {
		t.Error("NewHandler without a client succeeded")
	}
	// Handler has the defaults: 256 KiB values.
	srv := httptest.NewServer(kv.Handler(kv.NewClient(newDirect())))
	defer srv.Close()
	if status, body, _ := call(t, srv, "PUT", "/v1/kv/k", strings.Repeat("v", kv.DefaultMaxValueSize)); status != 200 {
		t.Errorf("PUT of DefaultMaxValueSize bytes: %d %v", status, body)
	}
	if status, _, _ := call(t, srv, "PUT", "/v1/kv/k", strings.Repeat("v", kv.DefaultMaxValueSize+1)); status != 413 {
		t.Errorf("PUT of DefaultMaxValueSize+1 bytes: %d; want 413", status)
	}
}

// A group whose MaxMessageSize is MessageSize(n) carries a value of n bytes
// under the longest key through a follower to the leader and back, and to
// the follower's own replica; the defaults agree with each other.
func TestMessageSize(t *testing.T) {
	if got := kv.MessageSize(kv.DefaultMaxValueSize); got != rsm.DefaultMaxMessageSize {
		t.Errorf("MessageSize(DefaultMaxValueSize) = %d; want rsm.DefaultMaxMessageSize (%d)", got, rsm.DefaultMaxMessageSize)
	}
	if err := (rsm.Options{MaxMessageSize: kv.MessageSize(kv.MaxValueSizeLimit)}).Validate(); err != nil {
		t.Errorf("MessageSize(MaxValueSizeLimit) refused: %v", err)
	}
	if err := (rsm.Options{MaxMessageSize: kv.MessageSize(kv.MaxValueSizeLimit + 1)}).Validate(); err == nil {
		t.Error("MessageSize(MaxValueSizeLimit+1) accepted; want it above rsm.MaxMessageSizeLimit")
	}

	const size = 1 << 20 // twice the default MaxMessageSize
	opts := rsm.Options{MaxMessageSize: kv.MessageSize(size), FlushInterval: 5 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, LeadershipDelay: 10 * time.Millisecond}
	st := store.New(memstore.New())
	var nodes []*rsm.Node
	for _, id := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		h, err := rsm.NewHost(t.Context(), st, rsm.HostConfig{ID: id, Addr: ln.Addr().String(), Listener: ln,
			Logger: slog.New(slog.DiscardHandler), SkipProbe: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		n, err := h.Join(t.Context(), "big", map[string]rsm.StateMachine{kv.MachineName: kv.New()}, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Leave(context.Background()) })
		nodes = append(nodes, n)
		// Let a lead before b joins, so b follows.
		waitStatus(t, n, func(s rsm.Status) bool { return s.State == "JOINED" })
	}
	follower := nodes[1]
	if s := follower.Status(); s.Role != "FOLLOWER" {
		t.Fatalf("second node is %s; want FOLLOWER", s.Role)
	}
	key := strings.Repeat("k", kv.MaxKeySize)
	value := []byte(strings.Repeat("v", size))
	c := kv.NewClient(follower)
	rev, err := c.Put(t.Context(), key, value)
	if err != nil {
		t.Fatalf("put of %d bytes through the follower: %.300v", size, err)
	}
	if ok, _, err := c.CAS(t.Context(), key, rev, value); err != nil || !ok {
		t.Fatalf("cas of %d bytes through the follower: swapped %v, %.300v", size, ok, err)
	}
	got, err := c.Get(t.Context(), key)
	if err != nil || len(got.Value) != size {
		t.Fatalf("get through the follower: %d bytes, %.300v", len(got.Value), err)
	}
	leaderApplied := nodes[0].Status().ApplyIndex
	waitStatus(t, follower, func(s rsm.Status) bool { return s.ApplyIndex >= leaderApplied })
}

func waitStatus(t *testing.T, n *rsm.Node, ok func(rsm.Status) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok(n.Status()) {
		if time.Now().After(deadline) {
			t.Fatalf("status %+v did not reach the state wanted", n.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A put reads its value whole whether or not the client sent its length,
// refuses one over the limit either way, and answers with exactly the JSON
// the API documents (no HTML escaping, a trailing newline) and its length.
func TestHTTPPutBodyAndAnswer(t *testing.T) {
	d := newDirect()
	srv := newServer(t, d, kv.HandlerOptions{MaxValueSize: 16})
	put := func(key string, body io.Reader, length int64) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/v1/kv/"+key, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(data), resp.Header
	}
	get := func(key string) string {
		t.Helper()
		status, out, _ := call(t, srv, "GET", "/v1/kv/"+key+"?encoding=text", "")
		if status != 200 {
			t.Fatalf("get %s: %d %v", key, status, out)
		}
		return out["value"].(string)
	}

	full := strings.Repeat("v", 16)
	status, body, h := put("a%3Cb", strings.NewReader(full), 16)
	if want := `{"key":"a<b","revision":1}` + "\n"; status != 200 || body != want {
		t.Fatalf("put with its length: %d %q, want 200 %q", status, body, want)
	}
	if h.Get("Content-Length") != fmt.Sprint(len(body)) || h.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v for a body of %d bytes", h, len(body))
	}
	if got := get("a%3Cb"); got != full {
		t.Fatalf("read back %q, want %q", got, full)
	}

	// Without a length (chunked): io.NopCloser hides the reader's size.
	status, body, _ = put("c", io.NopCloser(strings.NewReader("chunked")), -1)
	if status != 200 || get("c") != "chunked" {
		t.Fatalf("chunked put: %d %s", status, body)
	}
	status, body, _ = put("c", io.NopCloser(strings.NewReader(full+"x")), -1)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "too_large") {
		t.Fatalf("chunked put over the limit: %d %s", status, body)
	}
	status, body, _ = put("c", strings.NewReader(full+"x"), 17)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "too_large") {
		t.Fatalf("put over the limit with its length: %d %s", status, body)
	}
	status, _, _ = put("empty", strings.NewReader(""), 0)
	if status != 200 || get("empty") != "" {
		t.Fatalf("empty put: %d", status)
	}
	if get("c") != "chunked" {
		t.Fatal("a refused put changed the value")
	}
}

// TestPutBodyOtherThanItsLength: a put whose body is shorter or longer
// than its declared length (possible only below net/http's server, which
// holds a body to its Content-Length) stores the body it read, not bytes
// framed by the length it was told.
func TestPutBodyOtherThanItsLength(t *testing.T) {
	d := newDirect()
	h := kv.Handler(kv.NewClient(d))
	for _, tc := range []struct {
		key, body string
		length    int64
	}{
		{"short", "abc", 10},
		{"long", "abcdefghij", 3},
		{"exact", "abcdef", 6},
	} {
		req := httptest.NewRequest(http.MethodPut, "/v1/kv/"+tc.key, strings.NewReader(tc.body))
		req.ContentLength = tc.length
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: put: %d %s", tc.key, w.Code, w.Body)
		}
		got, err := kv.NewClient(d).Get(t.Context(), tc.key)
		if err != nil || string(got.Value) != tc.body {
			t.Fatalf("%s: stored %q (%v); want the body %q", tc.key, got.Value, err, tc.body)
		}
	}
}

// BenchmarkHTTPPut is the HTTP API's put of a 1 KiB value with a declared
// length, applied to a machine in the calling goroutine: the handler's
// own cost and allocations (-benchmem).
func BenchmarkHTTPPut(b *testing.B) {
	h := kv.Handler(kv.NewClient(newDirect()))
	value := strings.Repeat("v", 1024)
	b.ReportAllocs()
	for i := range b.N {
		req := httptest.NewRequest(http.MethodPut, fmt.Sprintf("/v1/kv/key-%d", i%1000), strings.NewReader(value))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("put: %d %s", w.Code, w.Body)
		}
	}
}
