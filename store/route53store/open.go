package route53store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"

	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// Scheme is the URL scheme the driver registers.
const Scheme = "route53"

func init() {
	store.Register(Scheme, func(ctx context.Context, u *url.URL, o store.OpenOptions) (driver.Store, error) {
		s, err := openURL(ctx, u, o)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

// DefaultRegion signs requests when neither the URL nor the AWS
// configuration names a region: Route 53 is a global service served from
// us-east-1.
const DefaultRegion = "us-east-1"

// awsDriver describes the driver to awsutil: its name, URL and defaults.
var awsDriver = awsutil.Driver{
	Name:            "route53store",
	Scheme:          Scheme,
	Resource:        "hosted zone ID",
	ResourceName:    "hosted zone ID",
	Form:            "route53://ZONEID/NAME",
	Params:          []string{"endpoint", "region", "profile", "rate"},
	ExampleEndpoint: "http://127.0.0.1:5000",
	DefaultRegion:   DefaultRegion,
}

// OpenURL opens a driver for a URL such as
// "route53://Z0123456789ABCDEFGHIJ/tenure" or
// "route53://Z0123456789ABCDEFGHIJ/prod.tenure?rate=2". Credentials come
// from the AWS default chain, from the named profile with ?profile=. It
// makes one GetHostedZone request, to learn the zone's name, and fails with
// a Permanent error naming the problem if the zone does not exist or the
// credentials are refused.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	return openURL(ctx, u, store.OpenOptions{})
}

// openURL is OpenURL with what store.Open passes: the SDK logs to o.Logger.
func openURL(ctx context.Context, u *url.URL, o store.OpenOptions) (*Store, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	c.Settings.Logger = o.Logger
	cfg, err := awsDriver.LoadConfig(ctx, c.Settings)
	if err != nil {
		return nil, err
	}
	client := route53.NewFromConfig(cfg, func(o *route53.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
	})
	where := c.Endpoint
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
		case errorKinds.Kind(err) == driver.Permanent:
			return nil, driver.Errorf(driver.Permanent, "route53store: hosted zone %q at %s: are the credentials right, and do they allow route53:GetHostedZone? %w", c.zoneID, where, err)
		}
		return nil, driver.Errorf(errorKinds.Kind(err), "route53store: look up hosted zone %q at %s: %w", c.zoneID, where, err)
	}
	return New(client, c.zoneID, zoneName, c.prefix, Options{Endpoint: where, RequestsPerSecond: c.rate})
}

type urlConfig struct {
	awsutil.Settings
	zoneID, prefix string
	rate           float64
}

func parseURL(u *url.URL) (urlConfig, error) {
	if err := awsDriver.CheckHost(u); err != nil {
		return urlConfig{}, err
	}
	c := urlConfig{zoneID: u.Host}
	for _, r := range c.zoneID {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return urlConfig{}, awsDriver.Errorf(u, "%q is not a hosted zone ID (letters and digits, such as Z0123456789ABCDEFGHIJ)", c.zoneID)
		}
	}
	c.prefix = strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if err := checkPrefixName(c.prefix); err != nil {
		return urlConfig{}, awsDriver.Errorf(u, "%v", err)
	}
	q, settings, err := awsDriver.Query(u)
	if err != nil {
		return urlConfig{}, err
	}
	c.Settings = settings
	if v := q.Get("rate"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r > 0) {
			return urlConfig{}, awsDriver.Errorf(u, "rate=%q: want requests a second, a number above 0", v)
		}
		c.rate = r
	}
	return c, nil
}
