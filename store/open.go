package store

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/tenure-io/tenure/store/driver"
)

// Opener opens a driver for a URL of its scheme, as o asks.
type Opener func(ctx context.Context, u *url.URL, o OpenOptions) (driver.Store, error)

// OpenOptions is what Open tells a driver's Opener beyond the URL.
type OpenOptions struct {
	// ReadOnly: the caller will only read (Open was given ReadOnly()). The
	// opener must then create and write nothing: no directory, table,
	// bucket or probe file. It fails, naming what is missing, when the
	// store does not exist, and it must work with credentials or
	// permissions that allow reading only. The portable layer refuses
	// writes through the Store it returns.
	ReadOnly bool
	// Logger receives what the driver, or the SDK under it, logs (the AWS
	// SDK's warnings, for one), so that it follows the program's log
	// format (Open was given WithLogger). Nil: slog.Default().
	Logger *slog.Logger
}

// The URL registry is the only global mutable state in tenure.
var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register makes a driver available to Open under scheme. Drivers call it
// from init; registering a scheme twice panics, as it is a programming error
// found at start-up.
func Register(scheme string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[scheme]; dup {
		panic("store: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}

// driverPackages names the package that registers each of tenure's own
// schemes, for the error of an Open whose driver was not imported.
var driverPackages = map[string]string{
	"azblob":   "azurestore",
	"dynamodb": "dynamostore",
	"etcd":     "etcdstore",
	"file":     "filestore",
	"gs":       "gcsstore",
	"mem":      "memstore",
	"route53":  "route53store",
	"s3":       "s3store",
}

// schemeHint says what to do about an unregistered scheme: the import that
// registers it, if it is one of tenure's, and what is registered.
func schemeHint(scheme string) string {
	const mod = "github.com/tenure-io/tenure/store/"
	registered := "registered: none"
	if s := Schemes(); len(s) > 0 {
		registered = "registered: " + strings.Join(s, ", ")
	}
	if pkg, ok := driverPackages[scheme]; ok {
		return fmt.Sprintf("%s; import %s%s (or %sall for every driver) to register it", registered, mod, pkg, mod)
	}
	return fmt.Sprintf("%s; tenure's drivers are %s, registered by importing %sall", registered, strings.Join(sortedKeys(driverPackages), ", "), mod)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for s := range registry {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open opens the store named by rawURL, such as "file:///var/lib/tenure",
// "mem://", or "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1".
// The driver for the scheme must be registered, usually by importing its
// package (or github.com/tenure-io/tenure/store/all for every driver).
// With ReadOnly() the driver creates nothing and Open fails if the store
// does not exist.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store: open %q: %w", rawURL, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("store: open %q: %w: the URL has no scheme (want one of %s, as in file:///path)",
			rawURL, ErrUnknownScheme, strings.Join(Schemes(), ", "))
	}
	registryMu.RLock()
	open := registry[u.Scheme]
	registryMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("store: open %q: %w %q (%s)", rawURL, ErrUnknownScheme, u.Scheme, schemeHint(u.Scheme))
	}
	var asked Store // only to read the options
	for _, o := range opts {
		o(&asked)
	}
	drv, err := open(ctx, u, OpenOptions{ReadOnly: asked.readOnly, Logger: asked.logger})
	if err != nil {
		return nil, &Error{Op: "open", Key: u.Redacted(), Kind: driver.Classify(nil, err), Err: err}
	}
	return New(drv, opts...), nil
}
