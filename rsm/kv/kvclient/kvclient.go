// Package kvclient is a client of a kv node's HTTP API (rsm/kv's handler,
// as tenure kv serve serves it), for the tenure kv commands: it sends the
// bearer token, reads each response whole, and retries a request the node
// answered with a 503 and did not apply (no leader yet, busy).
//
// It returns responses as they came, status and JSON body, so that its
// caller can print the server's own JSON; Response.Err reads the error a
// response reports. It does not load certificates or read token files:
// its caller builds the *http.Client and passes the token.
//
// A write whose response was lost (a timeout, a reset connection) is not
// retried: it may have been applied, and only its caller can tell whether
// sending it again is safe.
package kvclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tenure-io/tenure/rsm"
)

// Client calls one kv node. It is safe for concurrent use.
type Client struct {
	base  string
	hc    *http.Client
	token string
}

// New returns a client of the node at server (http://HOST:PORT or
// https://HOST:PORT) through hc (nil: http.DefaultClient), sending token,
// if not "", as "Authorization: Bearer TOKEN".
func New(server string, hc *http.Client, token string) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimSuffix(server, "/"), hc: hc, token: token}
}

// Server is the node's URL.
func (c *Client) Server() string { return c.base }

// Response is a response of the HTTP API: its status and its body, JSON.
type Response struct {
	Status int
	Body   []byte
}

// Decode decodes the body into v.
func (r Response) Decode(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("the server's response (HTTP %d) is not the JSON expected: %v", r.Status, err)
	}
	return nil
}

// Err is the error a response that is not 2xx reports.
func (r Response) Err() error {
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(r.Body, &body) != nil || body.Error == "" {
		return fmt.Errorf("HTTP %d: %s", r.Status, bytes.TrimSpace(r.Body))
	}
	return fmt.Errorf("%s (HTTP %d)", body.Error, r.Status)
}

// UnreachableError is a request that got no response from the node.
type UnreachableError struct {
	Server string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the kv server at %s: %v", e.Server, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Do sends one request, body as it is, to path (with its query). A 503
// for a read, or for a write the node says it did not apply, is sent
// again after its Retry-After (at most 5 s), up to four attempts in all.
// The returned error is an *UnreachableError when no response came, and
// ctx's when it ended while Do waited to retry; a response of any status
// is no error.
func (c *Client) Do(ctx context.Context, method, path string, body []byte) (Response, error) {
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
		if err != nil {
			return Response{}, err
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return Response{}, &UnreachableError{Server: c.base, Err: err}
		}
		// Room for the largest value, base64 in JSON.
		data, err := io.ReadAll(io.LimitReader(resp.Body, 2*rsm.MaxMessageSizeLimit))
		resp.Body.Close()
		if err != nil {
			return Response{}, fmt.Errorf("reading the response from %s: %w", c.base, err)
		}
		r := Response{Status: resp.StatusCode, Body: data}
		if r.Status == http.StatusServiceUnavailable && attempt < 4 && retryable(method, data) {
			wait := time.Second
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
				wait = min(time.Duration(s)*time.Second, 5*time.Second)
			}
			select {
			case <-ctx.Done():
				return r, ctx.Err()
			case <-time.After(wait):
			}
			continue
		}
		return r, nil
	}
}

// retryable: a read, or a write the server says was not applied.
func retryable(method string, body []byte) bool {
	if method == http.MethodGet {
		return true
	}
	var b struct {
		Outcome string `json:"outcome"`
	}
	return json.Unmarshal(body, &b) == nil && b.Outcome == "not_applied"
}

// KeyPath is the API path of key: escaped whole, so that '/' and dot
// segments reach the server intact.
func KeyPath(key string) string {
	esc := url.PathEscape(key)
	if key == "." || key == ".." {
		esc = strings.ReplaceAll(esc, ".", "%2E")
	}
	return "/v1/kv/" + esc
}

// Item is a key as the API returns it.
type Item struct {
	Key            string `json:"key"`
	Value          []byte `json:"value"`
	Revision       uint64 `json:"revision"`
	CreateRevision uint64 `json:"createRevision"`
}
