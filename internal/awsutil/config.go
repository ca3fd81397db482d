package awsutil

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/tenure-io/tenure/store/driver"
)

// LoadConfig loads the AWS configuration through the default chain
// (environment, shared files, web identity, container and instance roles)
// with the region and profile of s, and retrieves credentials once, so that
// a driver fails at Open rather than at its first request. It fails with a
// Permanent error if the configuration does not load, if there is no region
// and no d.DefaultRegion, or if there are no usable credentials; if ctx ends
// while it retrieves them, with an error that matches ctx.Err().
//
// s.Endpoint is not applied: see the package documentation. The SDK logs
// through Logger(s.Logger), never to stderr directly.
func (d Driver) LoadConfig(ctx context.Context, s Settings) (aws.Config, error) {
	// The configuration builds its own HTTP client: it must, to honour
	// AWS_CA_BUNDLE.
	// The SDK's own lines go to slog, not to stderr in a format of their
	// own.
	load := []func(*config.LoadOptions) error{config.WithLogger(Logger(s.Logger))}
	if s.Region != "" {
		load = append(load, config.WithRegion(s.Region))
	}
	if s.Profile != "" {
		load = append(load, config.WithSharedConfigProfile(s.Profile))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return aws.Config{}, driver.Errorf(driver.Permanent, "%s: load AWS configuration: %w", d.Name, err)
	}
	if cfg.Region == "" {
		if d.DefaultRegion == "" {
			return aws.Config{}, driver.Errorf(driver.Permanent, "%s: no region: add ?region= to the URL or set AWS_REGION", d.Name)
		}
		cfg.Region = d.DefaultRegion
	}
	if cfg.Credentials == nil {
		return aws.Config{}, driver.Errorf(driver.Permanent, "%s: no AWS credentials configured", d.Name)
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		if ctx.Err() != nil {
			return aws.Config{}, fmt.Errorf("%s: retrieve AWS credentials: %w", d.Name, errors.Join(ctx.Err(), err))
		}
		return aws.Config{}, driver.Errorf(driver.Permanent, "%s: no usable AWS credentials (environment, shared files, instance role, or ?profile=): %w", d.Name, err)
	}
	return cfg, nil
}
