package dynamostore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
	"github.com/tenure-io/tenure/store/dynamostore"
)

// request is one request the fake received: the operation (from
// X-Amz-Target) and the decoded JSON body.
type request struct {
	op   string
	body map[string]any
}

// fakeDynamo is an httptest server that records every request and answers
// with respond. It lets tests see exactly what goes on the wire.
type fakeDynamo struct {
	srv     *httptest.Server
	respond func(w http.ResponseWriter, op string, body map[string]any)

	mu   sync.Mutex
	reqs []request
}

func newFake(t *testing.T, respond func(w http.ResponseWriter, op string, body map[string]any)) *fakeDynamo {
	t.Helper()
	f := &fakeDynamo{respond: respond}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
		f.mu.Lock()
		f.reqs = append(f.reqs, request{op: op, body: body})
		f.mu.Unlock()
		f.respond(w, op, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeDynamo) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

// noBackoff keeps the SDK's retries but makes them immediate, so tests that
// count attempts do not wait.
type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

func (f *fakeDynamo) client() *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(f.srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		HTTPClient:   f.srv.Client(),
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff = noBackoff{}
		}),
	})
}

func (f *fakeDynamo) store(t *testing.T, namespace string) *store.Store {
	t.Helper()
	d, err := dynamostore.New(f.client(), "tenure", namespace, dynamostore.Options{Endpoint: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(d)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// awsError writes a DynamoDB error response as AWS does (awsJson1_0).
func awsError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", "REQ123")
	if code != "" {
		w.Header().Set("X-Amzn-Errortype", code)
	}
	w.WriteHeader(status)
	if code != "" {
		fmt.Fprintf(w, `{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"test message for %s"}`, code, code)
	}
}

func okJSON(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_, _ = io.WriteString(w, body)
}

// str returns body[path...] as a string, or "" if absent.
func str(body map[string]any, path ...string) string {
	var v any = body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func has(body map[string]any, field string) bool { _, ok := body[field]; return ok }

func TestWireConditions(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) {
		switch op {
		case "GetItem":
			okJSON(w, `{"Item":{"v":{"B":"c3RvcmVkIGJ5dGVz"},"ver":{"S":"v1"}}}`)
		default:
			okJSON(w, `{}`)
		}
	})
	s := f.store(t, "app1")
	cases := []struct {
		name  string
		call  func() error
		op    string
		cond  string            // the ConditionExpression sent; "" means none
		names map[string]string // ExpressionAttributeNames
		ver   string            // :ver sent
	}{
		{"create", func() error { _, err := s.Put(ctx(t), "lock", []byte("a"), store.IfAbsent()); return err },
			"PutItem", "attribute_not_exists(#k)", map[string]string{"#k": "k"}, ""},
		{"compare-and-swap", func() error { _, err := s.Put(ctx(t), "lock", []byte("b"), store.IfMatch("v1")); return err },
			"PutItem", "#ver = :ver", map[string]string{"#ver": "ver"}, "v1"},
		{"conditional delete", func() error { return s.Delete(ctx(t), "lock", store.IfMatch("v1")) },
			"DeleteItem", "#ver = :ver", map[string]string{"#ver": "ver"}, "v1"},
		{"unconditional delete", func() error { return s.Delete(ctx(t), "lock", store.Cond{}) },
			"DeleteItem", "", nil, ""},
		{"get", func() error {
			data, v, err := s.Get(ctx(t), "lock")
			if err == nil && (string(data) != "stored bytes" || v != "v1") {
				err = fmt.Errorf("got %q, %q", data, v)
			}
			return err
		}, "GetItem", "", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(f.requests())
			if err := c.call(); err != nil {
				t.Fatal(err)
			}
			reqs := f.requests()[before:]
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.op != c.op || str(r.body, "TableName") != "tenure" {
				t.Errorf("operation %s on table %q, want %s on tenure", r.op, str(r.body, "TableName"), c.op)
			}
			keys := r.body["Key"]
			if r.op == "PutItem" {
				keys = r.body["Item"]
			}
			km, _ := keys.(map[string]any)
			if str(km, "p", "S") != "/app1" || str(km, "k", "S") != "lock" {
				t.Errorf("key %v, want p=/app1 k=lock", keys)
			}
			if got := str(r.body, "ConditionExpression"); got != c.cond {
				t.Errorf("ConditionExpression %q, want %q", got, c.cond)
			}
			if c.cond == "" && (has(r.body, "ExpressionAttributeValues") || has(r.body, "Expected")) {
				t.Errorf("condition values sent without a condition: %v", r.body)
			}
			for k, v := range c.names {
				if got := str(r.body, "ExpressionAttributeNames", k); got != v {
					t.Errorf("ExpressionAttributeNames[%s] = %q, want %q", k, got, v)
				}
			}
			if got := str(r.body, "ExpressionAttributeValues", ":ver", "S"); got != c.ver {
				t.Errorf(":ver = %q, want %q", got, c.ver)
			}
			// No clock in any condition: the only value a condition
			// carries is the version.
			if vals, _ := r.body["ExpressionAttributeValues"].(map[string]any); len(vals) > 1 {
				t.Errorf("condition values %v: want only :ver", vals)
			}
			if r.op == "GetItem" && r.body["ConsistentRead"] != true {
				t.Errorf("GetItem without ConsistentRead: %v", r.body)
			}
		})
	}
}

func TestPutSendsTheItem(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) { okJSON(w, `{}`) })
	s := f.store(t, "")
	data := []byte("{\"nonce\":\"a93e\"}\x00\xff")
	v1, err := s.Put(ctx(t), "k", data, store.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := s.Put(ctx(t), "k", data, store.IfMatch(v1))
	if err != nil {
		t.Fatal(err)
	}
	if v1 == v2 || v1 == "" {
		t.Errorf("versions %q then %q for the same bytes: every write must get a new version", v1, v2)
	}
	reqs := f.requests()
	item, _ := reqs[0].body["Item"].(map[string]any)
	if got := str(item, "p", "S"); got != "/" {
		t.Errorf("partition %q, want \"/\" for the empty namespace", got)
	}
	if got := str(item, "v", "B"); got != "eyJub25jZSI6ImE5M2UifQD/" {
		t.Errorf("value %q on the wire, want base64 of the bytes", got)
	}
	if got := str(item, "ver", "S"); got != v1 {
		t.Errorf("version attribute %q, want the returned %q", got, v1)
	}
	if got := str(item, "sz", "N"); got != fmt.Sprint(len(data)) {
		t.Errorf("size attribute %q, want %d", got, len(data))
	}
}

func TestListQueries(t *testing.T) {
	cases := []struct {
		prefix, after string
		cond          string // KeyConditionExpression; "" means no request
		values        map[string]string
	}{
		{"", "", "#p = :p", nil},
		{"log/", "", "#p = :p AND begins_with(#k, :prefix)", map[string]string{":prefix": "log/"}},
		{"log/", "a", "#p = :p AND begins_with(#k, :prefix)", map[string]string{":prefix": "log/"}},
		{"log/", "log/0001", "#p = :p AND #k > :after", map[string]string{":after": "log/0001"}},
		{"", "log/0001", "#p = :p AND #k > :after", map[string]string{":after": "log/0001"}},
		{"log/", "m", "", nil},
	}
	for _, c := range cases {
		t.Run(c.prefix+"|"+c.after, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) {
				okJSON(w, `{"Items":[{"k":{"S":"log/0002"},"ver":{"S":"v2"},"sz":{"N":"7"}},{"k":{"S":"m"},"ver":{"S":"v3"},"sz":{"N":"1"}}]}`)
			})
			items, err := f.store(t, "ns").List(ctx(t), c.prefix, c.after, 10)
			if err != nil {
				t.Fatal(err)
			}
			reqs := f.requests()
			if c.cond == "" {
				if len(reqs) != 0 || len(items) != 0 {
					t.Fatalf("%d requests, items %v; want none", len(reqs), items)
				}
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			b := reqs[0].body
			if got := str(b, "KeyConditionExpression"); got != c.cond {
				t.Errorf("KeyConditionExpression %q, want %q", got, c.cond)
			}
			if got := str(b, "ExpressionAttributeValues", ":p", "S"); got != "/ns" {
				t.Errorf(":p = %q, want /ns", got)
			}
			for k, v := range c.values {
				if got := str(b, "ExpressionAttributeValues", k, "S"); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if b["ConsistentRead"] != true {
				t.Error("Query without ConsistentRead")
			}
			if got := str(b, "ProjectionExpression"); got != "#k, #ver, #sz" {
				t.Errorf("ProjectionExpression %q: List must not read values", got)
			}
			if len(items) == 0 || items[0] != (store.Item{Key: "log/0002", Version: "v2", Size: 7}) {
				t.Errorf("items %v", items)
			}
			// An item past the prefix ends the listing.
			for _, it := range items {
				if !strings.HasPrefix(it.Key, c.prefix) {
					t.Errorf("item %q outside prefix %q", it.Key, c.prefix)
				}
			}
		})
	}
}

func TestListPages(t *testing.T) {
	var calls atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) {
		switch calls.Add(1) {
		case 1:
			if has(body, "ExclusiveStartKey") {
				t.Errorf("first page sent ExclusiveStartKey")
			}
			okJSON(w, `{"Items":[{"k":{"S":"a"},"ver":{"S":"1"},"sz":{"N":"1"}}],"LastEvaluatedKey":{"p":{"S":"/"},"k":{"S":"a"}}}`)
		default:
			if str(body, "ExclusiveStartKey", "k", "S") != "a" {
				t.Errorf("second page: ExclusiveStartKey %v, want the LastEvaluatedKey", body["ExclusiveStartKey"])
			}
			if got := body["Limit"]; got != float64(2) {
				t.Errorf("second page Limit %v, want the 2 still wanted", got)
			}
			okJSON(w, `{"Items":[{"k":{"S":"b"},"ver":{"S":"2"},"sz":{"N":"2"}},{"k":{"S":"c"},"ver":{"S":"3"},"sz":{"N":"3"}}]}`)
		}
	})
	items, err := f.store(t, "").List(ctx(t), "", "", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 || items[2].Key != "c" {
		t.Errorf("items %v, want a, b, c", items)
	}
}

func TestConditionalWritesAreNotRetried(t *testing.T) {
	cases := []struct {
		name    string
		call    func(s *store.Store) error
		retried bool
	}{
		{"create", func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); return err }, false},
		{"compare-and-swap", func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfMatch("v")); return err }, false},
		{"conditional delete", func(s *store.Store) error { return s.Delete(ctx(t), "k", store.IfMatch("v")) }, false},
		{"unconditional delete", func(s *store.Store) error { return s.Delete(ctx(t), "k", store.Cond{}) }, true},
		{"get", func(s *store.Store) error { _, _, err := s.Get(ctx(t), "k"); return err }, true},
		{"list", func(s *store.Store) error { _, err := s.List(ctx(t), "", "", 10); return err }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) { awsError(w, 500, "InternalServerError") })
			err := c.call(f.store(t, "p"))
			if !errors.Is(err, store.ErrTransient) {
				t.Fatalf("error %v, want one matching ErrTransient", err)
			}
			if !store.IsAmbiguous(err) {
				t.Errorf("IsAmbiguous(%v) = false; a 500 may hide a write that landed", err)
			}
			n := len(f.requests())
			switch {
			case c.retried && n < 2:
				t.Errorf("sent %d times; the SDK should have retried it", n)
			case !c.retried && n != 1:
				t.Errorf("sent %d times; a conditional write must be sent exactly once", n)
			}
		})
	}
}

func TestErrorMapping(t *testing.T) {
	create := func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfAbsent()); return err }
	swap := func(s *store.Store) error { _, err := s.Put(ctx(t), "k", []byte("x"), store.IfMatch("v")); return err }
	del := func(s *store.Store) error { return s.Delete(ctx(t), "k", store.IfMatch("v")) }
	get := func(s *store.Store) error { _, _, err := s.Get(ctx(t), "k"); return err }
	list := func(s *store.Store) error { _, err := s.List(ctx(t), "", "", 10); return err }

	cases := []struct {
		name   string
		status int
		code   string
		call   func(*store.Store) error
		want   error
	}{
		{"condition failed on create", 400, "ConditionalCheckFailedException", create, store.ErrPreconditionFailed},
		{"condition failed on swap", 400, "ConditionalCheckFailedException", swap, store.ErrPreconditionFailed},
		{"condition failed on delete", 400, "ConditionalCheckFailedException", del, store.ErrPreconditionFailed},
		{"transaction conflict", 400, "TransactionConflictException", swap, store.ErrConflict},
		{"provisioned throughput", 400, "ProvisionedThroughputExceededException", create, store.ErrThrottled},
		{"request limit", 400, "RequestLimitExceeded", swap, store.ErrThrottled},
		{"throttling", 400, "ThrottlingException", get, store.ErrThrottled},
		{"internal server error", 500, "InternalServerError", create, store.ErrTransient},
		{"service unavailable", 503, "ServiceUnavailable", swap, store.ErrTransient},
		{"no such table", 400, "ResourceNotFoundException", get, store.ErrPermanent},
		{"no such table on create", 400, "ResourceNotFoundException", create, store.ErrPermanent},
		{"access denied", 400, "AccessDeniedException", list, store.ErrPermanent},
		{"bad credentials", 400, "UnrecognizedClientException", create, store.ErrPermanent},
		{"bad signature", 400, "InvalidSignatureException", del, store.ErrPermanent},
		{"validation", 400, "ValidationException", swap, store.ErrInvalidArgument},
	}
	sentinels := []error{store.ErrNotFound, store.ErrPreconditionFailed, store.ErrConflict, store.ErrThrottled,
		store.ErrTransient, store.ErrPermanent, store.ErrInvalidArgument}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) { awsError(w, c.status, c.code) })
			err := c.call(f.store(t, "p"))
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want one matching %v", err, c.want)
			}
			for _, other := range sentinels {
				if other != c.want && errors.Is(err, other) {
					t.Errorf("error also matches %v", other)
				}
			}
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("errors.As(smithy.APIError) fails on %v", err)
			}
			if apiErr.ErrorCode() != c.code {
				t.Errorf("ErrorCode() = %q, want %q", apiErr.ErrorCode(), c.code)
			}
			var se *store.Error
			if !errors.As(err, &se) || se.Op == "" {
				t.Errorf("not a *store.Error naming the operation: %v", err)
			}
		})
	}
}

func TestGetOfAMissingItem(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) { okJSON(w, `{}`) })
	_, _, err := f.store(t, "").Get(ctx(t), "k")
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("error %v, want one matching ErrNotFound", err)
	}
}

func TestForeignItemsAreReported(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) {
		switch op {
		case "GetItem":
			okJSON(w, `{"Item":{"v":{"S":"a string, not bytes"},"ver":{"S":"1"}}}`)
		default:
			okJSON(w, `{"Items":[{"k":{"S":"a"},"ver":{"S":"1"}}]}`)
		}
	})
	s := f.store(t, "")
	if _, _, err := s.Get(ctx(t), "k"); !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "not written by tenure") {
		t.Errorf("Get of a foreign item: %v", err)
	}
	if _, err := s.List(ctx(t), "", "", 10); !errors.Is(err, store.ErrPermanent) || !strings.Contains(err.Error(), "not written by tenure") {
		t.Errorf("List of a foreign item: %v", err)
	}
}

func TestErrorsWithoutAResponse(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		client := dynamodb.New(dynamodb.Options{
			Region:       "us-east-1",
			BaseEndpoint: aws.String("http://" + addr),
			Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		})
		d, err := dynamostore.New(client, "tenure", "", dynamostore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.New(d).Put(ctx(t), "k", []byte("x"), store.IfAbsent())
		if !errors.Is(err, store.ErrTransient) || !store.IsAmbiguous(err) {
			t.Errorf("error %v: want transient and ambiguous", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		release := make(chan struct{})
		f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) { <-release })
		defer close(release)
		c, cancel := context.WithTimeout(ctx(t), 50*time.Millisecond)
		defer cancel()
		_, err := f.store(t, "").Put(c, "k", []byte("x"), store.IfAbsent())
		if !errors.Is(err, store.ErrTransient) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v: want transient and context.DeadlineExceeded", err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) {})
		c, cancel := context.WithCancel(ctx(t))
		cancel()
		_, _, err := f.store(t, "").Get(c, "k")
		if !errors.Is(err, context.Canceled) || store.KindOf(err) != driver.Canceled {
			t.Errorf("error %v (kind %v): want context.Canceled", err, store.KindOf(err))
		}
	})
}

// Limits are checked before any request: a value over the item limit and a
// key over the sort key limit.
func TestLimitsAreCheckedBeforeAnyRequest(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) { okJSON(w, `{}`) })
	d, err := dynamostore.New(f.client(), "tenure", "ns", dynamostore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(d)
	defer s.Close()
	max := d.MaxValueSize()
	if want := 400*1024 - len("/ns") - 1088; max != want {
		t.Errorf("MaxValueSize() = %d, want %d", max, want)
	}
	_, err = s.Put(ctx(t), "k", make([]byte, max+1), store.IfAbsent())
	if !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "400 KiB") {
		t.Errorf("value of %d bytes: %v; want ErrInvalidArgument naming the limit", max+1, err)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests sent for an oversized value", n)
	}
	if _, err := s.Put(ctx(t), strings.Repeat("k", 1024), make([]byte, max), store.IfAbsent()); err != nil {
		t.Errorf("longest key with the largest value: %v", err)
	}
	if err := d.CheckKey(strings.Repeat("k", 1025)); err == nil {
		t.Error("CheckKey accepted a key of 1,025 bytes")
	}
}

func TestNew(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, op string, body map[string]any) { okJSON(w, `{}`) })
	cases := []struct {
		table, namespace string
		ok               bool
	}{
		{"tenure", "", true},
		{"tenure", "app1", true},
		{"tenure", "a/b", true},
		{"tenure", "/a", false},
		{"tenure", "a/", false},
		{"tenure", "bad\xff", false},
		{"tenure", strings.Repeat("n", 2048), false},
		{"t", "", false},
		{"bad table", "", false},
	}
	for _, c := range cases {
		d, err := dynamostore.New(f.client(), c.table, c.namespace, dynamostore.Options{})
		switch {
		case c.ok && err != nil:
			t.Errorf("New(%q, %q): %v", c.table, c.namespace, err)
		case !c.ok && err == nil:
			t.Errorf("New(%q, %q) succeeded", c.table, c.namespace)
		case !c.ok && store.KindOf(&store.Error{Kind: driver.Classify(nil, err), Err: err}) != driver.Permanent:
			t.Errorf("New(%q, %q): %v is not permanent", c.table, c.namespace, err)
		case c.ok && d.Partition() != "/"+c.namespace:
			t.Errorf("Partition() = %q", d.Partition())
		}
	}
}
