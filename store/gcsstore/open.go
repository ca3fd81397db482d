package gcsstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"google.golang.org/api/option"
	"google.golang.org/api/storage/v1"

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

// emulatorEnv is the variable that points Google's Cloud Storage clients
// at an emulator: a host and port, or a base URL.
const emulatorEnv = "STORAGE_EMULATOR_HOST"

// emulatorEndpoint returns the base URL of the JSON API that
// STORAGE_EMULATOR_HOST names ("" if it is not set), read as Google's
// Cloud Storage client library reads it: a value without a scheme is an
// http:// host, and the path is /storage/v1/.
func emulatorEndpoint() (string, error) {
	host := os.Getenv(emulatorEnv)
	if host == "" {
		return "", nil
	}
	u := &url.URL{Scheme: "http", Host: host}
	if strings.Contains(host, "://") {
		var err error
		if u, err = url.Parse(host); err != nil || u.Host == "" {
			return "", fmt.Errorf("%s=%q is neither host:port nor a URL such as http://127.0.0.1:4443", emulatorEnv, host)
		}
	}
	u.Path, u.RawPath = "/storage/v1/", ""
	return u.String(), nil
}

// ClientOptions returns the options OpenURL builds its service with, for an
// endpoint (empty for Cloud Storage, or the emulator that
// STORAGE_EMULATOR_HOST names). Use them with storage.NewService
// (google.golang.org/api/storage/v1), adding your own, to build a service
// for New that behaves as OpenURL's does. With an endpoint or an emulator,
// requests go there without credentials; otherwise the service uses
// Application Default Credentials, as google.golang.org/api does by default.
func ClientOptions(endpoint string) []option.ClientOption {
	var base string
	switch emulator, err := emulatorEndpoint(); {
	case endpoint != "":
		base = strings.TrimSuffix(endpoint, "/") + "/storage/v1/"
	case err != nil:
		// OpenURL refuses such a value, and New a service built with it,
		// naming it.
		base = strings.TrimSuffix(os.Getenv(emulatorEnv), "/") + "/storage/v1/"
	case emulator != "":
		base = emulator
	default:
		return nil
	}
	return []option.ClientOption{option.WithEndpoint(base), option.WithoutAuthentication()}
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
	where := c.endpoint
	if where == "" {
		if _, err := emulatorEndpoint(); err != nil {
			return nil, driver.Errorf(driver.Permanent, "gcsstore: %w", err)
		}
		if h := os.Getenv(emulatorEnv); h != "" {
			where = emulatorEnv + "=" + h
		}
	}
	service, err := storage.NewService(ctx, ClientOptions(c.endpoint)...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("gcsstore: create the Cloud Storage service: %w", errors.Join(ctx.Err(), err))
		}
		return nil, driver.Errorf(driver.Permanent, "gcsstore: no usable Google credentials (Application Default Credentials: "+
			"GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, or the metadata server): %w", err)
	}
	s, err := New(service, c.bucket, c.prefix, Options{Endpoint: where})
	if err != nil {
		return nil, err
	}
	if err := s.CheckBucket(ctx); err != nil {
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
