package awsutil_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store/driver"
)

// noAWSEnvironment empties every AWS_ variable and points the shared files
// at nothing, so that only what a test sets is configured.
func noAWSEnvironment(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, "")
		}
	}
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// staticKeys sets credentials in the environment.
func staticKeys(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
}

// sharedFiles writes a config and a credentials file with the profile
// "team" and points the environment at them.
func sharedFiles(t *testing.T) {
	dir := t.TempDir()
	cfgFile, credFile := filepath.Join(dir, "config"), filepath.Join(dir, "credentials")
	if err := os.WriteFile(cfgFile, []byte("[profile team]\nregion = eu-west-3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(credFile, []byte("[team]\naws_access_key_id = AKIDTEAM\naws_secret_access_key = s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", cfgFile)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", credFile)
}

func TestLoadConfig(t *testing.T) {
	cases := []struct {
		name          string
		env           func(*testing.T)
		defaultRegion string
		settings      awsutil.Settings
		wantRegion    string
		wantKey       string
	}{
		{"region from the URL", staticKeys, "", awsutil.Settings{Region: "ap-south-1"}, "ap-south-1", "AKIDTEST"},
		{"region from the environment", func(t *testing.T) { staticKeys(t); t.Setenv("AWS_REGION", "sa-east-1") }, "",
			awsutil.Settings{}, "sa-east-1", "AKIDTEST"},
		{"URL over environment", func(t *testing.T) { staticKeys(t); t.Setenv("AWS_REGION", "sa-east-1") }, "",
			awsutil.Settings{Region: "ap-south-1"}, "ap-south-1", "AKIDTEST"},
		{"default region", staticKeys, "us-east-1", awsutil.Settings{}, "us-east-1", "AKIDTEST"},
		{"configured region over default", staticKeys, "us-east-1", awsutil.Settings{Region: "eu-north-1"}, "eu-north-1", "AKIDTEST"},
		{"profile", sharedFiles, "", awsutil.Settings{Profile: "team"}, "eu-west-3", "AKIDTEAM"},
		{"endpoint is not applied", staticKeys, "", awsutil.Settings{Region: "r", Endpoint: "http://127.0.0.1:1"}, "r", "AKIDTEST"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			noAWSEnvironment(t)
			c.env(t)
			d := testDriver
			d.DefaultRegion = c.defaultRegion
			cfg, err := d.LoadConfig(t.Context(), c.settings)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Region != c.wantRegion {
				t.Errorf("region %q, want %q", cfg.Region, c.wantRegion)
			}
			creds, err := cfg.Credentials.Retrieve(t.Context())
			if err != nil || creds.AccessKeyID != c.wantKey {
				t.Errorf("credentials %q, %v; want %q", creds.AccessKeyID, err, c.wantKey)
			}
			if cfg.BaseEndpoint != nil {
				t.Errorf("BaseEndpoint %q: the driver sets the endpoint on its client", *cfg.BaseEndpoint)
			}
		})
	}
}

func TestLoadConfigRefuses(t *testing.T) {
	cases := []struct {
		name     string
		env      func(*testing.T)
		settings awsutil.Settings
		want     string
	}{
		{"no region", staticKeys, awsutil.Settings{}, "teststore: no region: add ?region= to the URL or set AWS_REGION"},
		{"no credentials", func(*testing.T) {}, awsutil.Settings{Region: "r"}, "teststore: no usable AWS credentials"},
		{"missing profile", staticKeys, awsutil.Settings{Region: "r", Profile: "nosuchprofile"}, "nosuchprofile"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			noAWSEnvironment(t)
			c.env(t)
			_, err := testDriver.LoadConfig(t.Context(), c.settings)
			if err == nil {
				t.Fatal("LoadConfig succeeded")
			}
			if k := driver.Classify(nil, err); k != driver.Permanent {
				t.Errorf("error %v: kind %v, want permanent", err, k)
			}
			if !strings.HasPrefix(err.Error(), "teststore: ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// A context that ends while credentials are retrieved is the caller's
// doing, not a configuration problem.
func TestLoadConfigCanceled(t *testing.T) {
	noAWSEnvironment(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := testDriver.LoadConfig(ctx, awsutil.Settings{Region: "r"})
	if !errors.Is(err, context.Canceled) || driver.Classify(nil, err) != driver.Canceled {
		t.Errorf("error %v: want one matching context.Canceled, not classified as permanent", err)
	}
}
