package awsutil

import (
	"log/slog"
	"net/url"
	"slices"
	"strings"

	"github.com/tenure-io/tenure/store/driver"
)

// Driver describes one AWS store driver to the helpers of this package: its
// name and URL, for the checks and the errors they make on its behalf. It is
// a value that drivers declare once; its methods are safe for concurrent
// use.
type Driver struct {
	// Name begins every error: "s3store".
	Name string
	// Scheme is the URL scheme the driver registers: "s3".
	Scheme string
	// Resource is what the URL's host names, as an error for a URL
	// without a host says it: "no bucket".
	Resource string
	// ResourceName is the same, as an error for a host with a port says
	// it: "%q is not a bucket name".
	ResourceName string
	// Form is the URL's shape, for an error: "s3://bucket/prefix".
	Form string
	// Params lists every query parameter the driver accepts, in the order
	// an error lists them. Query reads "endpoint", "region" and "profile";
	// the driver reads the others.
	Params []string
	// ExampleEndpoint shows what ?endpoint= takes, in an error:
	// "http://127.0.0.1:9000".
	ExampleEndpoint string
	// DefaultRegion is the region LoadConfig uses when neither the URL nor
	// the AWS configuration names one. Empty, that is an error.
	DefaultRegion string
}

// Settings are the AWS settings a driver's URL may carry.
type Settings struct {
	// Endpoint is the server's base URL (?endpoint=), http or https.
	// Empty: the service's own, as the SDK resolves it. The driver sets it
	// on its client's options (see the package documentation).
	Endpoint string
	// Region is the signing region (?region=). Empty: the AWS
	// configuration's (AWS_REGION, the profile), else Driver.DefaultRegion.
	Region string
	// Profile is the shared-configuration profile to load (?profile=).
	// Empty: AWS_PROFILE, else "default".
	Profile string
	// Logger receives the SDK's own log lines (see Logger); not from the
	// URL: the driver's opener sets it from store.OpenOptions. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// Errorf returns the Permanent error for u that the driver refuses, as
// "s3store: URL "s3://…": " followed by the message. The URL is redacted.
func (d Driver) Errorf(u *url.URL, format string, args ...any) error {
	return driver.Errorf(driver.Permanent, "%s: URL %q: "+format, append([]any{d.Name, u.Redacted()}, args...)...)
}

// CheckHost checks what every driver's URL needs before the driver checks
// its host and path: the driver's scheme, no user information (credentials
// come from the AWS chain, never the URL), a host, and no port in it (a
// server goes in ?endpoint=). The host is then u.Host.
func (d Driver) CheckHost(u *url.URL) error {
	if u.Scheme != d.Scheme {
		return d.Errorf(u, "scheme is %q, not %q", u.Scheme, d.Scheme)
	}
	if u.User != nil {
		return d.Errorf(u, "credentials do not belong in the URL: use the AWS credential chain (environment, shared files, ?profile=)")
	}
	if u.Opaque != "" || u.Host == "" {
		return d.Errorf(u, "no %s: want %s", d.Resource, d.Form)
	}
	if u.Port() != "" {
		return d.Errorf(u, "%q is not a %s: set the server with ?endpoint=", u.Host, d.ResourceName)
	}
	return nil
}

// Query checks u's query: every parameter is one of d.Params and given at
// most once, and an endpoint is an http or https URL with a host. It returns
// the parameters, for the driver to read its own with q.Get, and the AWS
// settings among them.
func (d Driver) Query(u *url.URL) (q url.Values, s Settings, err error) {
	q = u.Query()
	for k, vs := range q {
		if !slices.Contains(d.Params, k) {
			return nil, Settings{}, d.Errorf(u, "unknown parameter %q (known: %s)", k, strings.Join(d.Params, ", "))
		}
		if len(vs) > 1 {
			return nil, Settings{}, d.Errorf(u, "parameter %q given %d times", k, len(vs))
		}
	}
	s.Region = q.Get("region")
	s.Profile = q.Get("profile")
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
			return nil, Settings{}, d.Errorf(u, "endpoint %q: want an http:// or https:// URL such as %s", e, d.ExampleEndpoint)
		}
		s.Endpoint = e
	}
	return q, s, nil
}
