package awsutil_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store/driver"
)

var testDriver = awsutil.Driver{
	Name:            "teststore",
	Scheme:          "test",
	Resource:        "bucket",
	ResourceName:    "bucket name",
	Form:            "test://bucket/prefix",
	Params:          []string{"endpoint", "region", "profile", "extra"},
	ExampleEndpoint: "http://127.0.0.1:9000",
}

// parse runs what a driver runs on its URL: CheckHost, then Query.
func parse(raw string) (url.Values, awsutil.Settings, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, awsutil.Settings{}, err
	}
	if err := testDriver.CheckHost(u); err != nil {
		return nil, awsutil.Settings{}, err
	}
	return testDriver.Query(u)
}

func TestParseAccepts(t *testing.T) {
	cases := []struct {
		name      string
		url       string
		want      awsutil.Settings
		wantExtra string
	}{
		{"bare", "test://b", awsutil.Settings{}, ""},
		{"with a path", "test://b/some/prefix/", awsutil.Settings{}, ""},
		{"every parameter", "test://b/p?endpoint=http://127.0.0.1:9000&region=eu-west-1&profile=dev&extra=x",
			awsutil.Settings{Endpoint: "http://127.0.0.1:9000", Region: "eu-west-1", Profile: "dev"}, "x"},
		{"https endpoint with a path", "test://b?endpoint=https://acct.r2.example.com/base",
			awsutil.Settings{Endpoint: "https://acct.r2.example.com/base"}, ""},
		{"empty values", "test://b?endpoint=&region=&extra=", awsutil.Settings{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, s, err := parse(c.url)
			if err != nil {
				t.Fatalf("parse(%q): %v", c.url, err)
			}
			if s != c.want {
				t.Errorf("settings %+v, want %+v", s, c.want)
			}
			if got := q.Get("extra"); got != c.wantExtra {
				t.Errorf("extra = %q, want %q", got, c.wantExtra)
			}
		})
	}
}

// Every refusal is Permanent, names the driver and the URL (redacted), and
// says what is wrong.
func TestParseRefuses(t *testing.T) {
	cases := []struct{ name, url, want string }{
		{"other scheme", "s3://b/p", `scheme is "s3", not "test"`},
		{"credentials", "test://AKID:hunter2@b/p", "credentials do not belong in the URL"},
		{"user only", "test://AKID@b/p", "credentials do not belong in the URL"},
		{"no host", "test:///p", "no bucket: want test://bucket/prefix"},
		{"opaque", "test:b/p", "no bucket: want test://bucket/prefix"},
		{"port", "test://b:9000/p", `"b:9000" is not a bucket name: set the server with ?endpoint=`},
		{"unknown parameter", "test://b?regoin=x", `unknown parameter "regoin" (known: endpoint, region, profile, extra)`},
		{"repeated parameter", "test://b?region=a&region=b", `parameter "region" given 2 times`},
		{"repeated driver parameter", "test://b?extra=1&extra=2&extra=3", `parameter "extra" given 3 times`},
		{"endpoint without scheme", "test://b?endpoint=127.0.0.1:9000", "want an http:// or https:// URL such as http://127.0.0.1:9000"},
		{"endpoint of another scheme", "test://b?endpoint=ftp://h", `endpoint "ftp://h"`},
		{"endpoint without host", "test://b?endpoint=http://", `endpoint "http://"`},
		{"endpoint that does not parse", "test://b?endpoint=http://%5B::1", "want an http:// or https:// URL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := parse(c.url)
			if err == nil {
				t.Fatalf("parse(%q) succeeded", c.url)
			}
			if k := driver.Classify(nil, err); k != driver.Permanent {
				t.Errorf("kind %v, want permanent", k)
			}
			if !strings.HasPrefix(err.Error(), "teststore: URL ") {
				t.Errorf("error %q does not begin with the driver's name and the URL", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the secret", err)
			}
		})
	}
}

func TestErrorf(t *testing.T) {
	u, err := url.Parse("test://AKID:hunter2@b/p?extra=1")
	if err != nil {
		t.Fatal(err)
	}
	err = testDriver.Errorf(u, "the prefix %q starts with %q", "/p", "/")
	const want = `teststore: URL "test://AKID:xxxxx@b/p?extra=1": the prefix "/p" starts with "/"`
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	var de *driver.Error
	if !errors.As(err, &de) || de.Kind != driver.Permanent {
		t.Errorf("error %v is not a Permanent *driver.Error", err)
	}
}
