package faultstore

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// HTTPAction is what a Transport does to a request a rule hits.
type HTTPAction int

const (
	// HTTPInternalError answers 500 InternalError with S3's XML error body,
	// without sending the request.
	HTTPInternalError HTTPAction = iota
	// HTTPSlowDown answers 503 SlowDown with S3's XML error body, without
	// sending the request.
	HTTPSlowDown
	// HTTPDelay waits Delay, then sends the request.
	HTTPDelay
	// HTTPHang never sends the request and returns only when the request's
	// context ends, with its error.
	HTTPHang
	// HTTPApplyThenDrop sends the request, reads and discards the whole
	// response, and returns a connection-reset error: the write landed and
	// the client never learns it. The error says "connection reset", which
	// SDK retryers (the AWS SDK's among them) retry, so it exposes an SDK
	// that retries conditional writes blindly.
	HTTPApplyThenDrop
	// HTTPForward sends the request untouched. It is the action under which
	// Counts files requests no rule hit.
	HTTPForward
)

var httpActionNames = []string{"internal-error", "slow-down", "delay", "hang", "apply-then-drop", "forward"}

func (a HTTPAction) String() string {
	if a >= 0 && int(a) < len(httpActionNames) {
		return httpActionNames[a]
	}
	return fmt.Sprintf("HTTPAction(%d)", int(a))
}

// HTTPCond narrows a rule by the conditional headers of the request.
type HTTPCond int

const (
	// AnyRequest matches whatever headers the request carries.
	AnyRequest HTTPCond = iota
	// WithIfMatch matches requests with an If-Match header (compare-and-swap).
	WithIfMatch
	// WithIfNoneMatch matches requests with an If-None-Match header (create).
	WithIfNoneMatch
	// Conditional matches requests with either header.
	Conditional
	// Unconditional matches requests with neither header.
	Unconditional
)

// HTTPRule injects a fault into some of the requests it matches. Rules are
// tried in the order they were added; the first that fires decides.
type HTTPRule struct {
	// Method is the HTTP method to match, such as http.MethodPut; empty
	// matches every method.
	Method string
	Cond   HTTPCond
	// Path restricts the rule to URL paths that start with it, such as
	// "/bucket/prefix/lock". Empty matches every path.
	Path string
	// P is the chance that a matching request is hit: 1 (or more) every
	// request, 0 (or less) none.
	P float64
	// Skip lets the first Skip matching requests through untouched.
	Skip int
	// Times removes the rule after it has hit this many requests; 0 keeps
	// it until it is removed.
	Times int

	Action HTTPAction
	// Delay is the pause of HTTPDelay; for HTTPInternalError and
	// HTTPSlowDown it passes before the answer, for HTTPApplyThenDrop
	// between the server's answer and the reset. HTTPHang ignores it.
	Delay time.Duration
}

// Validate reports the first field that makes the rule invalid, naming it.
func (r HTTPRule) Validate() error {
	switch {
	case r.Method != strings.ToUpper(r.Method):
		return fmt.Errorf("faultstore: HTTPRule.Method %q must be upper case, as in %q", r.Method, http.MethodPut)
	case r.Cond < AnyRequest || r.Cond > Unconditional:
		return fmt.Errorf("faultstore: HTTPRule.Cond %d is not an HTTPCond", int(r.Cond))
	case math.IsNaN(r.P):
		return errors.New("faultstore: HTTPRule.P is NaN")
	case r.Skip < 0:
		return fmt.Errorf("faultstore: HTTPRule.Skip is %d; it must not be negative", r.Skip)
	case r.Times < 0:
		return fmt.Errorf("faultstore: HTTPRule.Times is %d; it must not be negative", r.Times)
	case r.Delay < 0:
		return fmt.Errorf("faultstore: HTTPRule.Delay is %v; it must not be negative", r.Delay)
	case r.Action < HTTPInternalError || r.Action > HTTPForward:
		return fmt.Errorf("faultstore: HTTPRule.Action %v is not an HTTPAction", r.Action)
	}
	return nil
}

func (r HTTPRule) matches(req *http.Request) bool {
	if r.Method != "" && r.Method != req.Method {
		return false
	}
	if !strings.HasPrefix(req.URL.Path, r.Path) {
		return false
	}
	ifMatch, ifNoneMatch := req.Header.Get("If-Match") != "", req.Header.Get("If-None-Match") != ""
	switch r.Cond {
	case WithIfMatch:
		return ifMatch
	case WithIfNoneMatch:
		return ifNoneMatch
	case Conditional:
		return ifMatch || ifNoneMatch
	case Unconditional:
		return !ifMatch && !ifNoneMatch
	}
	return true
}

type httpRule struct {
	HTTPRule
	id      uint64
	matched int
	hits    int
}

// HTTPKey identifies one counter of a Transport.
type HTTPKey struct {
	Method string
	Action HTTPAction
}

// HTTPSnapshot is a copy of a Transport's counters, holding only non-zero
// ones.
type HTTPSnapshot map[HTTPKey]int64

// Get returns the number of requests with method that met action; an empty
// method counts every method.
func (s HTTPSnapshot) Get(method string, action HTTPAction) int64 {
	var n int64
	for k, v := range s {
		if (method == "" || k.Method == method) && k.Action == action {
			n += v
		}
	}
	return n
}

// MethodTotal returns the number of requests with method.
func (s HTTPSnapshot) MethodTotal(method string) int64 {
	var n int64
	for k, v := range s {
		if k.Method == method {
			n += v
		}
	}
	return n
}

// Total returns the number of requests.
func (s HTTPSnapshot) Total() int64 {
	var n int64
	for _, v := range s {
		n += v
	}
	return n
}

// String returns one line per method with its actions, then the total.
func (s HTTPSnapshot) String() string {
	keys := make([]HTTPKey, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Method != keys[j].Method {
			return keys[i].Method < keys[j].Method
		}
		return keys[i].Action < keys[j].Action
	})
	var b strings.Builder
	for i, k := range keys {
		switch {
		case i == 0:
			b.WriteString(k.Method)
		case k.Method != keys[i-1].Method:
			b.WriteString("\n" + k.Method)
		}
		fmt.Fprintf(&b, " %s=%d", k.Action, s[k])
	}
	if len(keys) > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "total %d\n", s.Total())
	return b.String()
}

// Transport is an http.RoundTripper that injects network-level faults
// between an SDK and a real server (MinIO, S3), where faults at the driver
// boundary cannot reach: the SDK's own retries, its parsing of error bodies,
// its handling of a response lost after the write landed. Use it as the
// HTTP client's transport:
//
//	tr := faultstore.NewTransport(http.DefaultTransport, faultstore.WithSeed(1))
//	client := &http.Client{Transport: tr}
//
// It is safe for concurrent use, and rules may be added and removed while
// requests are in flight.
type Transport struct {
	base http.RoundTripper

	mu     sync.Mutex // guards the fields below and rng
	rng    *rand.Rand
	rules  []*httpRule
	nextID uint64
	reqID  uint64
	counts map[HTTPKey]int64
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport that sends requests through base
// (http.DefaultTransport if nil) until rules say otherwise.
func NewTransport(base http.RoundTripper, opts ...Option) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{base: base, rng: newRand(opts), counts: map[HTTPKey]int64{}}
}

// AddRule adds r after the existing rules and returns a function that
// removes it (safe to call more than once). It returns an error, and adds
// nothing, if r is invalid.
func (t *Transport) AddRule(r HTTPRule) (remove func(), err error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.nextID++
	id := t.nextID
	t.rules = append(t.rules, &httpRule{HTTPRule: r, id: id})
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.rules = slices.DeleteFunc(t.rules, func(r *httpRule) bool { return r.id == id })
	}, nil
}

// ClearRules removes every rule. The counters stay.
func (t *Transport) ClearRules() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rules = nil
}

// Counts returns a snapshot of the requests since NewTransport or the last
// Reset, by method and action (HTTPForward for those no rule hit).
func (t *Transport) Counts() HTTPSnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := HTTPSnapshot{}
	for k, v := range t.counts {
		out[k] = v
	}
	return out
}

// Reset zeroes the counters. The rules stay.
func (t *Transport) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.counts)
}

// CloseIdleConnections closes the idle connections of the base transport,
// if it has any, so that http.Client.CloseIdleConnections reaches it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// pick decides what happens to req, counts it, and returns the rule that
// fired (nil for none) and a request ID for a synthesized answer.
func (t *Transport) pick(req *http.Request) (*HTTPRule, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reqID++
	id := fmt.Sprintf("FAULTSTORE%010X", t.reqID)
	for i, r := range t.rules {
		if !r.matches(req) {
			continue
		}
		r.matched++
		if r.matched <= r.Skip || !fires(t.rng, r.P) {
			continue
		}
		r.hits++
		f := r.HTTPRule
		if r.Times > 0 && r.hits >= r.Times {
			t.rules = slices.Delete(t.rules, i, i+1)
		}
		t.counts[HTTPKey{Method: req.Method, Action: f.Action}]++
		return &f, id
	}
	t.counts[HTTPKey{Method: req.Method, Action: HTTPForward}]++
	return nil, id
}

// RoundTrip sends req through the base transport, or injects the fault of
// the first rule that fires. A request that is not sent has its body closed,
// as RoundTrip must; one that is sent gets its body untouched, so that the
// base transport reads it once (and may rewind it with GetBody).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	f, id := t.pick(req)
	if f == nil {
		return t.base.RoundTrip(req)
	}
	ctx := req.Context()
	ended := func(what string) error {
		return fmt.Errorf("faultstore: injected %s on %s %s: %w", what, req.Method, req.URL.Path, ctx.Err())
	}
	switch f.Action {
	case HTTPInternalError, HTTPSlowDown:
		closeBody(req)
		if err := sleep(ctx, f.Delay); err != nil {
			return nil, ended(f.Action.String())
		}
		if f.Action == HTTPSlowDown {
			return s3Error(req, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.", id), nil
		}
		return s3Error(req, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.", id), nil
	case HTTPDelay:
		if err := sleep(ctx, f.Delay); err != nil {
			closeBody(req)
			return nil, ended("delay")
		}
		return t.base.RoundTrip(req)
	case HTTPHang:
		closeBody(req)
		<-ctx.Done()
		return nil, ended("hang")
	case HTTPApplyThenDrop:
		resp, err := t.base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		// Read to the end so the server has finished with the request
		// before the client hears of the failure.
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err := sleep(ctx, f.Delay); err != nil {
			return nil, ended("dropped response")
		}
		return nil, fmt.Errorf("faultstore: injected connection reset after the server answered %s %s with %q: %w",
			req.Method, req.URL.Path, resp.Status, connReset(req))
	}
	return t.base.RoundTrip(req)
}

// connReset is the error a client sees when the server's RST arrives
// before the response: what errors.Is(err, syscall.ECONNRESET) and SDK
// retryers recognise.
func connReset(req *http.Request) error {
	var addr net.Addr
	if host := req.URL.Host; host != "" {
		addr = hostAddr(host)
	}
	return &net.OpError{Op: "read", Net: "tcp", Addr: addr, Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

type hostAddr string

func (a hostAddr) Network() string { return "tcp" }
func (a hostAddr) String() string  { return string(a) }

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// s3ErrorBody is S3's error document.
type s3ErrorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string
	Message   string
	Resource  string
	RequestID string `xml:"RequestId"`
	HostID    string `xml:"HostId"`
}

// s3Error builds the response S3 sends for an error: an XML body (none for
// HEAD) and the request ID header that SDKs report.
func s3Error(req *http.Request, status int, code, message, id string) *http.Response {
	doc, _ := xml.Marshal(s3ErrorBody{Code: code, Message: message, Resource: req.URL.Path, RequestID: id, HostID: "faultstore"})
	body := append([]byte(xml.Header), doc...)
	h := http.Header{}
	h.Set("Content-Type", "application/xml")
	h.Set("X-Amz-Request-Id", id)
	h.Set("X-Amz-Id-2", "faultstore")
	resp := &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
	if req.Method == http.MethodHead {
		resp.Body, resp.ContentLength = http.NoBody, 0
	}
	return resp
}
