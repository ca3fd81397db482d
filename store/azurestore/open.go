package azurestore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// Scheme is the URL scheme the driver registers.
const Scheme = "azblob"

func init() {
	store.Register(Scheme, func(ctx context.Context, u *url.URL, _ store.OpenOptions) (driver.Store, error) {
		s, err := OpenURL(ctx, u)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

// Environment variables OpenURL reads, as the Azure CLI names them.
const (
	EnvAccount          = "AZURE_STORAGE_ACCOUNT"
	EnvKey              = "AZURE_STORAGE_KEY"
	EnvConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
)

// storageScope is the OAuth scope of Azure Storage's data plane.
const storageScope = "https://storage.azure.com/.default"

// URL query parameters OpenURL accepts.
var params = []string{"endpoint", "account"}

// OpenURL opens a driver for a URL such as "azblob://container/prefix" or
// "azblob://tenure/dev?endpoint=http://127.0.0.1:10000/devstoreaccount1&account=devstoreaccount1".
// Credentials come from the environment, first that matches:
//
//   - AZURE_STORAGE_CONNECTION_STRING: the connection string names the
//     account, its endpoint and its credentials; the URL must then carry
//     neither ?endpoint= nor ?account=.
//   - AZURE_STORAGE_KEY: the shared key of the account named by ?account=,
//     else AZURE_STORAGE_ACCOUNT.
//   - Otherwise azidentity's DefaultAzureCredential (environment, workload
//     identity, managed identity, Azure CLI, ...), over HTTPS only.
//
// It makes one List Blobs request (see CheckContainer) and fails with a
// Permanent error naming the problem if the container does not exist, the
// credentials are missing or refused, or the URL is malformed.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*Store, error) {
		return nil, driver.Errorf(driver.Permanent, "azurestore: "+format, args...)
	}
	opts := &container.ClientOptions{ClientOptions: policy.ClientOptions{
		Telemetry:       policy.TelemetryOptions{ApplicationID: "tenure"},
		PerCallPolicies: []policy.Policy{ListPolicy()},
	}}

	var client *container.Client
	connStr := os.Getenv(EnvConnectionString)
	key := os.Getenv(EnvKey)
	account := c.account
	if account == "" {
		account = os.Getenv(EnvAccount)
	}
	switch {
	case connStr != "":
		if c.endpoint != "" || c.account != "" {
			return bad("URL %q: ?endpoint= and ?account= cannot be used with %s, which names its own account and endpoint: remove them, or unset the variable",
				u.Redacted(), EnvConnectionString)
		}
		client, err = container.NewClientFromConnectionString(connStr, c.container, opts)
		if err != nil {
			// The SDK's message may quote the string, key included.
			return bad("%s is not a valid connection string (want AccountName=...;AccountKey=...;BlobEndpoint=... or DefaultEndpointsProtocol=https;...)", EnvConnectionString)
		}

	case key != "":
		if account == "" {
			return bad("%s is set but no account is named: add ?account= to the URL or set %s", EnvKey, EnvAccount)
		}
		cred, err := container.NewSharedKeyCredential(account, key)
		if err != nil {
			return bad("%s is not a valid account key (want the base64 key from the storage account's access keys)", EnvKey)
		}
		client, err = container.NewClientWithSharedKeyCredential(containerURL(c, account), cred, opts)
		if err != nil {
			return bad("container URL %q: %w", containerURL(c, account), err)
		}

	default:
		if c.endpoint == "" && account == "" {
			return bad("no account: add ?account= (or ?endpoint=) to the URL, or set %s", EnvAccount)
		}
		cu := containerURL(c, account)
		if strings.HasPrefix(cu, "http://") {
			return bad("endpoint %s is plain HTTP, over which Azure AD tokens are not sent: set %s (with the account) or %s",
				c.endpoint, EnvKey, EnvConnectionString)
		}
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return bad("no credentials: set %s or %s, or configure DefaultAzureCredential (%w)", EnvKey, EnvConnectionString, err)
		}
		if _, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{storageScope}}); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("azurestore: get an Azure AD token: %w", errors.Join(ctx.Err(), err))
			}
			return bad("no usable credentials: %s and %s are not set, and DefaultAzureCredential failed: %w", EnvKey, EnvConnectionString, err)
		}
		client, err = container.NewClient(cu, cred, opts)
		if err != nil {
			return bad("container URL %q: %w", cu, err)
		}
	}

	s, err := New(client, c.prefix, Options{})
	if err != nil {
		return nil, err
	}
	if err := s.CheckContainer(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// containerURL is the URL of the container: the endpoint (by default the
// account's public one) followed by the container's name.
func containerURL(c urlConfig, account string) string {
	endpoint := c.endpoint
	if endpoint == "" {
		endpoint = "https://" + account + ".blob.core.windows.net"
	}
	return strings.TrimSuffix(endpoint, "/") + "/" + c.container
}

type urlConfig struct {
	container, prefix string
	endpoint, account string
}

// containerName is Azure's rule for container names: 3 to 63 lower-case
// letters, digits and single hyphens, starting and ending with a letter or
// digit.
var containerName = regexp.MustCompile(`^[a-z0-9]+(?:-[a-z0-9]+)*$`)

// accountName is Azure's rule for storage account names.
var accountName = regexp.MustCompile(`^[a-z0-9]{3,24}$`)

func parseURL(u *url.URL) (urlConfig, error) {
	bad := func(format string, args ...any) (urlConfig, error) {
		return urlConfig{}, driver.Errorf(driver.Permanent, "azurestore: URL %q: "+format, append([]any{u.Redacted()}, args...)...)
	}
	var c urlConfig
	if u.Scheme != Scheme {
		return bad("scheme is %q, not %q", u.Scheme, Scheme)
	}
	if u.User != nil {
		return bad("credentials do not belong in the URL: set %s, %s or use DefaultAzureCredential", EnvKey, EnvConnectionString)
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("no container: want azblob://container/prefix")
	}
	if u.Port() != "" {
		return bad("%q is not a container name: set the service with ?endpoint=", u.Host)
	}
	if !containerName.MatchString(u.Host) || len(u.Host) < 3 || len(u.Host) > 63 {
		return bad("%q is not a valid container name (3 to 63 lower-case letters, digits and single hyphens, starting and ending with a letter or digit)", u.Host)
	}
	c.container = u.Host
	c.prefix = strings.TrimPrefix(u.Path, "/")
	if strings.HasPrefix(c.prefix, "/") {
		return bad("the prefix %q starts with \"/\"", c.prefix)
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
	if a := q.Get("account"); a != "" {
		if !accountName.MatchString(a) {
			return bad("account %q: want 3 to 24 lower-case letters and digits", a)
		}
		c.account = a
	}
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" || eu.RawQuery != "" || eu.Fragment != "" || eu.User != nil {
			return bad("endpoint %q: want the blob service's http:// or https:// URL, such as https://ACCOUNT.blob.core.windows.net or http://127.0.0.1:10000/devstoreaccount1", e)
		}
		c.endpoint = strings.TrimSuffix(e, "/")
	}
	return c, nil
}
