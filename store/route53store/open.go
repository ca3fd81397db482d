package route53store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// Scheme is the URL scheme the driver registers.
const Scheme = "route53"

func init() {
	store.Register(Scheme, func(ctx context.Context, u *url.URL) (driver.Store, error) {
		s, err := OpenURL(ctx, u)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

// URL query parameters OpenURL accepts.
var params = []string{"endpoint", "region", "profile", "rate"}

// DefaultRegion signs requests when neither the URL nor the AWS
// configuration names a region: Route 53 is a global service served from
// us-east-1.
const DefaultRegion = "us-east-1"

// OpenURL opens a driver for a URL such as
// "route53://Z0123456789ABCDEFGHIJ/tenure" or
// "route53://Z0123456789ABCDEFGHIJ/prod.tenure?rate=2". Credentials come
// from the AWS default chain, from the named profile with ?profile=. It
// makes one GetHostedZone request, to learn the zone's name, and fails with
// a Permanent error naming the problem if the zone does not exist or the
// credentials are refused.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	var load []func(*config.LoadOptions) error
	if c.region != "" {
		load = append(load, config.WithRegion(c.region))
	}
	if c.profile != "" {
		load = append(load, config.WithSharedConfigProfile(c.profile))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, driver.Errorf(driver.Permanent, "route53store: load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if cfg.Credentials == nil {
		return nil, driver.Errorf(driver.Permanent, "route53store: no AWS credentials configured")
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("route53store: retrieve AWS credentials: %w", errors.Join(ctx.Err(), err))
		}
		return nil, driver.Errorf(driver.Permanent, "route53store: no usable AWS credentials (environment, shared files, instance role, or ?profile=): %w", err)
	}
	client := route53.NewFromConfig(cfg, func(o *route53.Options) {
		if c.endpoint != "" {
			o.BaseEndpoint = aws.String(c.endpoint)
		}
	})
	where := c.endpoint
	if where == "" {
		where = "AWS Route 53"
	}
	zoneName, err := LookupZone(ctx, client, c.zoneID)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("route53store: look up hosted zone %q at %s: %w", c.zoneID, where, errors.Join(ctx.Err(), err))
		}
		var nsz *types.NoSuchHostedZone
		switch {
		case errors.As(err, &nsz):
			return nil, driver.Errorf(driver.Permanent, "route53store: hosted zone %q does not exist at %s: %w", c.zoneID, where, err)
		case classify(err) == driver.Permanent:
			return nil, driver.Errorf(driver.Permanent, "route53store: hosted zone %q at %s: are the credentials right, and do they allow route53:GetHostedZone? %w", c.zoneID, where, err)
		}
		return nil, driver.Errorf(classify(err), "route53store: look up hosted zone %q at %s: %w", c.zoneID, where, err)
	}
	return New(client, c.zoneID, zoneName, c.prefix, Options{Endpoint: where, RequestsPerSecond: c.rate})
}

type urlConfig struct {
	zoneID, prefix            string
	endpoint, region, profile string
	rate                      float64
}

func parseURL(u *url.URL) (urlConfig, error) {
	bad := func(format string, args ...any) (urlConfig, error) {
		return urlConfig{}, driver.Errorf(driver.Permanent, "route53store: URL %q: "+format, append([]any{u.Redacted()}, args...)...)
	}
	var c urlConfig
	if u.Scheme != Scheme {
		return bad("scheme is %q, not %q", u.Scheme, Scheme)
	}
	if u.User != nil {
		return bad("credentials do not belong in the URL: use the AWS credential chain (environment, shared files, ?profile=)")
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no hosted zone ID: want route53://ZONEID/NAME")
	}
	if u.Port() != "" {
		return bad("%q is not a hosted zone ID: set the server with ?endpoint=", u.Host)
	}
	c.zoneID = u.Host
	for _, r := range c.zoneID {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return bad("%q is not a hosted zone ID (letters and digits, such as Z0123456789ABCDEFGHIJ)", c.zoneID)
		}
	}
	c.prefix = strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if err := checkPrefixName(c.prefix); err != nil {
		return bad("%v", err)
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
	c.region = q.Get("region")
	c.profile = q.Get("profile")
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
			return bad("endpoint %q: want an http:// or https:// URL such as http://127.0.0.1:5000", e)
		}
		c.endpoint = e
	}
	if v := q.Get("rate"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r > 0) {
			return bad("rate=%q: want requests a second, a number above 0", v)
		}
		c.rate = r
	}
	return c, nil
}
