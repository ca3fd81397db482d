package kv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tenure-io/tenure/rsm"
)

// DefaultMaxValueSize bounds a value written through the HTTP API unless
// HandlerOptions say otherwise.
const DefaultMaxValueSize = 256 << 10

// messageOverhead is what a command, a result or a log entry adds to its
// value: a key of up to MaxKeySize, the encodings, and the headroom the rsm
// node keeps in MaxMessageSize (1 KiB for a request, 4 KiB for a
// synchronization).
const messageOverhead = MaxKeySize + 16<<10

// MaxValueSizeLimit is the largest value a group can carry: one value
// travels in one RPC message of at most rsm.MaxMessageSizeLimit bytes.
const MaxValueSizeLimit = rsm.MaxMessageSizeLimit - messageOverhead

// MessageSize returns the rsm.Options.MaxMessageSize a group needs to carry
// values of maxValueSize bytes under any key: never below
// rsm.DefaultMaxMessageSize, and above rsm.MaxMessageSizeLimit (which
// Options.Validate refuses) when maxValueSize exceeds MaxValueSizeLimit.
func MessageSize(maxValueSize int) int {
	return max(rsm.DefaultMaxMessageSize, maxValueSize+messageOverhead)
}

// HandlerOptions configure the HTTP API. Zero values mean the defaults.
type HandlerOptions struct {
	// MaxValueSize bounds a value written through the API, in bytes;
	// larger ones get 413. The group's MaxMessageSize must be at least
	// MessageSize(MaxValueSize), or values near the bound fail with
	// rsm.ErrTooLarge. Default 256 KiB; at most MaxValueSizeLimit.
	MaxValueSize int
	// Status, if set, answers GET /v1/status (rsm.Node.Status is one).
	Status func() rsm.Status
}

// Validate reports an invalid option, naming the field.
func (o HandlerOptions) Validate() error {
	if o.MaxValueSize < 0 || o.MaxValueSize > MaxValueSizeLimit {
		return fmt.Errorf("kv: invalid handler options: MaxValueSize must be 0 to MaxValueSizeLimit (%d) (got %d)", MaxValueSizeLimit, o.MaxValueSize)
	}
	return nil
}

// Handler serves the HTTP API over c, which must not be nil, with the
// default options; see NewHandler.
func Handler(c *Client) http.Handler {
	return &handler{c: c, opts: HandlerOptions{MaxValueSize: DefaultMaxValueSize}}
}

// NewHandler serves the HTTP API over c:
//
//	GET    /v1/kv/{key}    {"key","value","revision","createRevision"}; 404 if absent
//	PUT    /v1/kv/{key}    body: the value's bytes; {"key","revision"}
//	DELETE /v1/kv/{key}    {"key","deleted","revision"}; 404 if absent
//	POST   /v1/cas         {"key","expectRevision","value"}: {"key","swapped","revision"}; 409 if not swapped
//	GET    /v1/list?prefix=&after=&limit=&keysOnly=   {"items":[…],"more","next"}
//	GET    /v1/status      the node's status, if HandlerOptions.Status is set
//
// The key is the rest of the path, percent-decoded, so it may hold '/',
// and "%2F" is a '/' too. The handler does its own routing: mounted under
// an http.ServeMux, keys holding "//" or "." segments would be redirected
// to cleaned paths.
//
// JSON values are base64 by default; with ?encoding=text they are plain
// strings (in requests and responses), and a value that is not UTF-8 gets
// 406. revision is the key's ModRevision.
//
// Errors are JSON {"error","code"} with, for writes, "outcome":
// "unknown" (504 on a timeout after the command may have been committed:
// read the key to find out), "applied" (500: applied once, result lost) or
// "not_applied" (503). 400: invalid key or argument; 413: value too large;
// 503 with Retry-After: no leader, busy, not committed, closing; 503
// "corrupt": the store holds an object of the group damaged or missing,
// named in the error, and the group serves nothing until it is back.
//
// The handler is safe for concurrent use if c's Submitter is.
func NewHandler(c *Client, opts HandlerOptions) (http.Handler, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("kv: NewHandler needs a client")
	}
	if opts.MaxValueSize == 0 {
		opts.MaxValueSize = DefaultMaxValueSize
	}
	return &handler{c: c, opts: opts}, nil
}

type handler struct {
	c    *Client
	opts HandlerOptions
}

const keyPath = "/v1/kv/"

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	path := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(path, keyPath):
		key, err := url.PathUnescape(path[len(keyPath):])
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("key in path %q: %v", path, err), nil)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			h.get(w, r, key)
		case http.MethodPut:
			h.put(w, r, key)
		case http.MethodDelete:
			h.delete(w, r, key)
		default:
			methodNotAllowed(w, "GET, HEAD, PUT, DELETE")
		}
	case path == "/v1/cas":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, "POST")
			return
		}
		h.cas(w, r)
	case path == "/v1/list":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, "GET, HEAD")
			return
		}
		h.list(w, r)
	case path == "/v1/status":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, "GET, HEAD")
			return
		}
		if h.opts.Status == nil {
			writeError(w, http.StatusNotFound, "not_found", "this server does not report a status", nil)
			return
		}
		writeJSON(w, http.StatusOK, h.opts.Status())
	default:
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no endpoint %s; see /v1/kv/{key}, /v1/cas, /v1/list, /v1/status", path), nil)
	}
}

// Item is a key in a JSON response. Value is []byte (base64) or string
// (encoding=text); nil with keysOnly.
type jsonItem struct {
	Key            string `json:"key"`
	Value          any    `json:"value,omitempty"`
	Revision       uint64 `json:"revision"`
	CreateRevision uint64 `json:"createRevision"`
}

// textEncoding reads ?encoding=: false for base64 (the default), true for
// text.
func textEncoding(r *http.Request) (bool, error) {
	switch e := r.URL.Query().Get("encoding"); e {
	case "", "base64":
		return false, nil
	case "text":
		return true, nil
	default:
		return false, fmt.Errorf("encoding %q: want base64 or text", e)
	}
}

func item(kv KeyValue, text, withValue bool) (jsonItem, error) {
	it := jsonItem{Key: kv.Key, Revision: kv.ModRevision, CreateRevision: kv.CreateRevision}
	switch {
	case !withValue:
	case !text:
		it.Value = kv.Value
	case utf8.Valid(kv.Value):
		it.Value = string(kv.Value)
	default:
		return it, fmt.Errorf("the value of %q is not valid UTF-8; use encoding=base64", kv.Key)
	}
	return it, nil
}

func (h *handler) get(w http.ResponseWriter, r *http.Request, key string) {
	text, err := textEncoding(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
		return
	}
	kv, err := h.c.Get(r.Context(), key)
	if errors.Is(err, ErrNotFound) {
		writeError(w, http.StatusNotFound, "not_found", err.Error(), map[string]any{"key": key})
		return
	}
	if err != nil {
		h.fail(w, err, false)
		return
	}
	it, err := item(kv, text, true)
	if err != nil {
		writeError(w, http.StatusNotAcceptable, "not_utf8", err.Error(), map[string]any{"key": key})
		return
	}
	writeJSON(w, http.StatusOK, it)
}

func (h *handler) put(w http.ResponseWriter, r *http.Request, key string) {
	if err := validKey(key); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
		return
	}
	// The body is read straight after the put's encoded head when its
	// length is declared: the command is the buffer it was read into.
	head := putHead(key, r.ContentLength, h.opts.MaxValueSize)
	buf, err := readBody(http.MaxBytesReader(w, r.Body, int64(h.opts.MaxValueSize)), head, r.ContentLength, h.opts.MaxValueSize)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("value larger than %d bytes", h.opts.MaxValueSize), map[string]any{"key": key})
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("reading the value: %v", err), nil)
		return
	}
	cmd := buf
	if value := buf[len(head):]; head == nil || int64(len(value)) != r.ContentLength {
		cmd = command{op: tagPut, key: key, value: value}.encode()
	}
	rev, err := h.c.putEncoded(r.Context(), key, cmd)
	if err != nil {
		h.fail(w, err, true)
		return
	}
	writeJSON(w, http.StatusOK, putReply{Key: key, Revision: rev})
}

// putReply is a put's answer: a struct, not a map, so encoding it needs no
// map and no sorting of its keys.
type putReply struct {
	Key      string `json:"key"`
	Revision uint64 `json:"revision"`
}

// readBody reads a request's body after head (nil or not) into one
// buffer sized by its Content-Length when the client sent one within max
// (io.ReadAll, and bytes.Buffer.ReadFrom, grow their buffer as they go,
// copying the value each time). A length beyond max is not trusted: the
// limited reader r reports it. The body is what follows head.
func readBody(r io.Reader, head []byte, length int64, max int) ([]byte, error) {
	if length < 0 || length > int64(max) {
		b, err := io.ReadAll(r)
		if len(head) == 0 {
			return b, err
		}
		return append(head, b...), err
	}
	// One byte more than the length, so the read that finds the end has
	// room and the buffer never grows.
	buf := make([]byte, len(head), int64(len(head))+length+1)
	copy(buf, head)
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		case len(buf) == cap(buf):
			// Longer than its length said (the server does not let that
			// happen): take the rest as it comes.
			rest, err := io.ReadAll(r)
			return append(buf, rest...), err
		}
	}
}

func (h *handler) delete(w http.ResponseWriter, r *http.Request, key string) {
	existed, rev, err := h.c.Delete(r.Context(), key)
	if err != nil {
		h.fail(w, err, true)
		return
	}
	if !existed {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("kv: delete %q: key not found", key),
			map[string]any{"key": key, "deleted": false, "revision": rev})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "deleted": true, "revision": rev})
}

type casRequest struct {
	Key            string          `json:"key"`
	ExpectRevision *uint64         `json:"expectRevision"`
	Value          json.RawMessage `json:"value"`
}

func (h *handler) cas(w http.ResponseWriter, r *http.Request) {
	text, err := textEncoding(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
		return
	}
	// Room for a base64 value of the largest size and a key escaped as
	// \uXXXX throughout.
	limit := int64(h.opts.MaxValueSize)/3*4 + 4 + 6*MaxKeySize + 1024
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	var req casRequest
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request larger than %d bytes", limit), nil)
			return
		}
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("request body: %v; want {\"key\":…, \"expectRevision\":N, \"value\":…}", err), nil)
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "bad_request", "request body: data after the JSON object", nil)
		return
	}
	if req.ExpectRevision == nil {
		writeError(w, http.StatusBadRequest, "bad_request", "expectRevision is required (0 means the key must not exist)", nil)
		return
	}
	if req.Value == nil || bytes.Equal(req.Value, []byte("null")) {
		writeError(w, http.StatusBadRequest, "bad_request", "value is required", nil)
		return
	}
	var value []byte
	if text {
		var s string
		err = json.Unmarshal(req.Value, &s)
		value = []byte(s)
	} else {
		err = json.Unmarshal(req.Value, &value)
	}
	if err != nil {
		want := "a base64 string"
		if text {
			want = "a string"
		}
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("value: want %s: %v", want, err), nil)
		return
	}
	if len(value) > h.opts.MaxValueSize {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("value of %d bytes, larger than %d", len(value), h.opts.MaxValueSize), map[string]any{"key": req.Key})
		return
	}
	swapped, rev, err := h.c.CAS(r.Context(), req.Key, *req.ExpectRevision, value)
	if err != nil {
		h.fail(w, err, true)
		return
	}
	if !swapped {
		writeError(w, http.StatusConflict, "revision_mismatch", casMismatch(req.Key, *req.ExpectRevision, rev),
			map[string]any{"key": req.Key, "swapped": false, "revision": rev})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": req.Key, "swapped": true, "revision": rev})
}

func casMismatch(key string, expect, current uint64) string {
	switch {
	case current == 0:
		return fmt.Sprintf("kv: cas %q: the key does not exist, expected revision %d", key, expect)
	case expect == 0:
		return fmt.Sprintf("kv: cas %q: the key exists at revision %d, expected it absent", key, current)
	}
	return fmt.Sprintf("kv: cas %q: the key is at revision %d, expected %d", key, current, expect)
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	text, err := textEncoding(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
		return
	}
	q := r.URL.Query()
	opts := ListOptions{After: q.Get("after")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxListLimit {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit %q: want 1 to %d", s, MaxListLimit), nil)
			return
		}
		opts.Limit = n
	}
	switch s := q.Get("keysOnly"); s {
	case "", "false", "0":
	case "true", "1":
		opts.KeysOnly = true
	default:
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("keysOnly %q: want true or false", s), nil)
		return
	}
	res, err := h.c.List(r.Context(), q.Get("prefix"), opts)
	if err != nil {
		h.fail(w, err, false)
		return
	}
	out := struct {
		Items []jsonItem `json:"items"`
		More  bool       `json:"more"`
		Next  string     `json:"next,omitempty"`
	}{Items: make([]jsonItem, 0, len(res.Items)), More: res.More}
	for _, kv := range res.Items {
		it, err := item(kv, text, !opts.KeysOnly)
		if err != nil {
			writeError(w, http.StatusNotAcceptable, "not_utf8", err.Error(), nil)
			return
		}
		out.Items = append(out.Items, it)
	}
	if res.More && len(res.Items) > 0 {
		out.Next = res.Items[len(res.Items)-1].Key
	}
	writeJSON(w, http.StatusOK, out)
}

// fail maps an error from the client to a status. For a write it also
// says whether the command was applied: "unknown", "applied" or
// "not_applied".
func (h *handler) fail(w http.ResponseWriter, err error, write bool) {
	status, code, outcome := http.StatusInternalServerError, "internal", "unknown"
	retry := false
	extra := map[string]any{}
	var nl *rsm.NotLeaderError
	switch {
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidArgument):
		status, code, outcome = http.StatusBadRequest, "bad_request", "not_applied"
	case errors.Is(err, rsm.ErrTooLarge):
		status, code, outcome = http.StatusRequestEntityTooLarge, "too_large", "not_applied"
	case errors.Is(err, rsm.ErrUnknownOutcome):
		status, code = http.StatusGatewayTimeout, "unknown_outcome"
	case errors.Is(err, rsm.ErrCorrupt):
		// The group refuses to serve over an object the store holds
		// damaged or lost (docs/rsm.md, rule 12): an operator's matter.
		status, code = http.StatusServiceUnavailable, "corrupt"
	case errors.Is(err, rsm.ErrApplicationResultUnavailable):
		status, code, outcome = http.StatusInternalServerError, "result_unavailable", "applied"
	case errors.Is(err, rsm.ErrNotCommitted):
		status, code, outcome, retry = http.StatusServiceUnavailable, "not_committed", "not_applied", true
	case errors.As(err, &nl):
		status, code, outcome, retry = http.StatusServiceUnavailable, "not_leader", "not_applied", true
		if nl.Leader != "" {
			extra["leader"], extra["leaderAddr"] = nl.Leader, nl.Addr
		}
	case errors.Is(err, rsm.ErrBusy):
		status, code, outcome, retry = http.StatusServiceUnavailable, "busy", "not_applied", true
	case errors.Is(err, rsm.ErrRequestOutOfSequence):
		status, code, retry = http.StatusServiceUnavailable, "out_of_sequence", true
	case errors.Is(err, rsm.ErrClosed):
		status, code, retry = http.StatusServiceUnavailable, "closed", true
	case errors.Is(err, rsm.ErrUnknownMachine):
		status, code, outcome = http.StatusInternalServerError, "unknown_machine", "not_applied"
	case errors.Is(err, context.DeadlineExceeded):
		status, code = http.StatusGatewayTimeout, "timeout"
	case errors.Is(err, context.Canceled):
		status, code = http.StatusServiceUnavailable, "canceled"
	}
	if retry {
		w.Header().Set("Retry-After", "1")
	}
	msg := err.Error()
	if write {
		extra["outcome"] = outcome
		switch outcome {
		case "unknown":
			msg += " (outcome unknown: the write may or may not have been applied; read the key to find out)"
		case "applied":
			msg += " (the write was applied, once, but its result is no longer available)"
		}
	}
	writeError(w, status, code, msg, extra)
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed; allowed: "+allow, nil)
}

func writeError(w http.ResponseWriter, status int, code, msg string, extra map[string]any) {
	body := map[string]any{"error": msg, "code": code}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the status is sent; a failed write has no one to tell
}
