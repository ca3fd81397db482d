package gcsstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// Scheme is the URL scheme the driver registers.
const Scheme = "gs"

func init() {
	store.Register(Scheme, func(ctx context.Context, u *url.URL, _ store.OpenOptions) (driver.Store, error) {
		s, err := OpenURL(ctx, u)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

// URL query parameters OpenURL accepts.
var params = []string{"endpoint"}

// emulatorEnv is the variable that points the client library at an
// emulator.
const emulatorEnv = "STORAGE_EMULATOR_HOST"

// Retries of the clients that OpenURL builds, for the requests that may be
// repeated (reads, listings, unconditional deletes): the library's default
// retries until the context ends, with pauses of up to 30 s, which would
// hide an outage from a caller with deadlines of its own (a leader's renew
// deadline). Three attempts, as the AWS SDK makes for s3store.
var (
	maxAttempts = 3
	backoff     = gax.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}
)

// ClientOptions returns the options OpenURL builds its client with, for an
// endpoint (empty for Cloud Storage or STORAGE_EMULATOR_HOST). Use them
// with storage.NewClient, adding your own, to build a client for New that
// behaves as OpenURL's does; OpenURL then also limits the client's retries
// with SetRetry (three attempts, pauses of 100 ms to 1 s).
func ClientOptions(endpoint string) []option.ClientOption {
	// The JSON API for reads too: one API, whose errors carry reasons,
	// and which every emulator serves at the endpoint's own host.
	opts := []option.ClientOption{storage.WithJSONReads()}
	if endpoint != "" {
		opts = append(opts,
			option.WithEndpoint(strings.TrimSuffix(endpoint, "/")+"/storage/v1/"),
			option.WithoutAuthentication())
	}
	return opts
}

// OpenURL opens a driver for a URL such as "gs://bucket/prefix" or
// "gs://bucket/prefix?endpoint=http://127.0.0.1:4443". Credentials come
// from Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS,
// gcloud's application-default login, the metadata server); with
// ?endpoint=, or STORAGE_EMULATOR_HOST set, requests are sent without
// credentials, as emulators expect. It makes one objects.list request and
// fails with a Permanent error naming the problem if the bucket does not
// exist or the credentials are refused.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	client, err := storage.NewClient(ctx, ClientOptions(c.endpoint)...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("gcsstore: create client: %w", errors.Join(ctx.Err(), err))
		}
		return nil, driver.Errorf(driver.Permanent, "gcsstore: no usable Google credentials (Application Default Credentials: "+
			"GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, or the metadata server): %w", err)
	}
	client.SetRetry(storage.WithMaxAttempts(maxAttempts), storage.WithBackoff(backoff))

	where := c.endpoint
	if where == "" {
		if h := os.Getenv(emulatorEnv); h != "" {
			where = emulatorEnv + "=" + h
		}
	}
	s, err := New(client, c.bucket, c.prefix, Options{Endpoint: where})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.owned = true
	if err := s.CheckBucket(ctx); err != nil {
		_ = client.Close()
		return nil, err
	}
	return s, nil
}

type urlConfig struct {
	bucket, prefix, endpoint string
}

func parseURL(u *url.URL) (urlConfig, error) {
	bad := func(format string, args ...any) (urlConfig, error) {
		return urlConfig{}, driver.Errorf(driver.Permanent, "gcsstore: URL %q: "+format, append([]any{u.Redacted()}, args...)...)
	}
	var c urlConfig
	if u.Scheme != Scheme {
		return bad("scheme is %q, not %q", u.Scheme, Scheme)
	}
	if u.User != nil {
		return bad("credentials do not belong in the URL: use Application Default Credentials")
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no bucket: want gs://bucket/prefix")
	}
	if u.Port() != "" {
		return bad("%q is not a bucket name: set the server with ?endpoint=", u.Host)
	}
	c.bucket = u.Host
	c.prefix = strings.TrimPrefix(u.Path, "/")
	if strings.HasPrefix(c.prefix, "/") {
		return bad("the prefix %q starts with \"/\"", c.prefix)
	}
	// Refused before any credentials are looked for.
	if _, err := cleanPrefix(c.prefix); err != nil {
		return urlConfig{}, err
	}

	q := u.Query()
	for k, vs := range q {
		if !slices.Contains(params, k) {
			return bad("unknown parameter %q (known: %s)", k, strings.Join(params, ", "))
		}
		if len(vs) > 1 {
			return bad("parameter %q given %d times", k, len(vs))
		}
	}
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" || eu.RawQuery != "" || eu.User != nil {
			return bad("endpoint %q: want an http:// or https:// URL such as http://127.0.0.1:4443", e)
		}
		c.endpoint = e
	}
	return c, nil
}
