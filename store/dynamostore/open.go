package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tenure-io/tenure/internal/awsutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/driver"
)

// Scheme is the URL scheme the driver registers.
const Scheme = "dynamodb"

func init() {
	store.Register(Scheme, func(ctx context.Context, u *url.URL, o store.OpenOptions) (driver.Store, error) {
		s, err := openURL(ctx, u, o)
		if err != nil {
			return nil, err
		}
		return s, nil
	})
}

// awsDriver describes the driver to awsutil: its name, URL and defaults.
var awsDriver = awsutil.Driver{
	Name:            "dynamostore",
	Scheme:          Scheme,
	Resource:        "table",
	ResourceName:    "table name",
	Form:            "dynamodb://table/namespace",
	Params:          []string{"endpoint", "region", "profile", "create"},
	ExampleEndpoint: "http://127.0.0.1:8000",
}

// OpenURL opens a driver for a URL such as
// "dynamodb://tenure/app1?region=eu-west-1" or
// "dynamodb://tenure?endpoint=http://127.0.0.1:8000&region=us-east-1&create=true".
// Credentials come from the AWS default chain, from the named profile with
// ?profile=. It makes one DescribeTable request and fails with a Permanent
// error naming the problem if the table does not exist (unless
// ?create=true, which creates it), has another key schema, or the
// credentials are refused.
func OpenURL(ctx context.Context, u *url.URL) (*Store, error) {
	return openURL(ctx, u, store.OpenOptions{})
}

// openURL is OpenURL with what store.Open passes: read-only, it never
// creates the table, whatever ?create= says; the SDK logs to o.Logger.
func openURL(ctx context.Context, u *url.URL, o store.OpenOptions) (*Store, error) {
	c, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	if o.ReadOnly {
		c.create = false
	}
	c.Settings.Logger = o.Logger
	cfg, err := awsDriver.LoadConfig(ctx, c.Settings)
	if err != nil {
		return nil, err
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
	})
	where := c.Endpoint
	if where == "" {
		where = "AWS DynamoDB in " + cfg.Region
	}
	s, err := New(client, c.table, c.namespace, Options{Endpoint: where})
	if err != nil {
		return nil, err
	}
	if err := s.CheckTable(ctx, c.create); err != nil {
		return nil, err
	}
	return s, nil
}

type urlConfig struct {
	awsutil.Settings
	table, namespace string
	create           bool
}

func parseURL(u *url.URL) (urlConfig, error) {
	if err := awsDriver.CheckHost(u); err != nil {
		return urlConfig{}, err
	}
	c := urlConfig{table: u.Host}
	if err := checkTableName(c.table); err != nil {
		return urlConfig{}, awsDriver.Errorf(u, "%v", err)
	}
	// dynamodb://t/ns and dynamodb://t/ns/ are the same store.
	c.namespace = strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if strings.HasPrefix(c.namespace, "/") || strings.HasSuffix(c.namespace, "/") {
		return urlConfig{}, awsDriver.Errorf(u, "the namespace %q starts or ends with \"/\"", c.namespace)
	}
	q, settings, err := awsDriver.Query(u)
	if err != nil {
		return urlConfig{}, err
	}
	c.Settings = settings
	if v := q.Get("create"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return urlConfig{}, awsDriver.Errorf(u, "create=%q: want true or false", v)
		}
		c.create = b
	}
	return c, nil
}

// TableCreateTimeout bounds how long CheckTable waits for a table it
// created to become active.
const TableCreateTimeout = 5 * time.Minute

// CheckTable makes one DescribeTable request and returns a Permanent error
// that says what is wrong if the table is missing, has another key schema,
// or the credentials are refused. With create, a missing table is created
// (on-demand capacity, the key schema the driver needs) and CheckTable waits
// until it is active.
func (s *Store) CheckTable(ctx context.Context, create bool) error {
	where := s.opts.Endpoint
	if where == "" {
		where = "AWS DynamoDB"
	}
	out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("dynamostore: describe table %q at %s: %w", s.table, where, errors.Join(ctx.Err(), err))
		}
		var nf *types.ResourceNotFoundException
		switch {
		case errors.As(err, &nf) && create:
			return s.createTable(ctx, where)
		case errors.As(err, &nf):
			return driver.Errorf(driver.Permanent, "dynamostore: table %q does not exist at %s: create it as the package documentation shows, or add ?create=true: %w", s.table, where, err)
		case errorKinds.Kind(err) == driver.Permanent:
			return driver.Errorf(driver.Permanent, "dynamostore: describe table %q at %s: are the credentials right, and do they allow dynamodb:DescribeTable? %w", s.table, where, err)
		}
		return driver.Errorf(errorKinds.Kind(err), "dynamostore: describe table %q at %s: %w", s.table, where, err)
	}
	return checkSchema(s.table, out.Table)
}

// checkSchema returns a Permanent error unless the table's key schema is
// (p HASH string, k RANGE string).
func checkSchema(table string, t *types.TableDescription) error {
	if t == nil {
		return driver.Errorf(driver.Permanent, "dynamostore: DescribeTable of %q returned no table", table)
	}
	attrTypes := map[string]types.ScalarAttributeType{}
	for _, a := range t.AttributeDefinitions {
		attrTypes[aws.ToString(a.AttributeName)] = a.AttributeType
	}
	var hash, rng string
	for _, k := range t.KeySchema {
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = aws.ToString(k.AttributeName)
		case types.KeyTypeRange:
			rng = aws.ToString(k.AttributeName)
		}
	}
	if hash != AttrPartition || rng != AttrKey || attrTypes[AttrPartition] != types.ScalarAttributeTypeS || attrTypes[AttrKey] != types.ScalarAttributeTypeS {
		return driver.Errorf(driver.Permanent,
			"dynamostore: table %q has key schema (HASH %q %s, RANGE %q %s); tenure needs (HASH %q S, RANGE %q S): see the package documentation",
			table, hash, attrTypes[hash], rng, attrTypes[rng], AttrPartition, AttrKey)
	}
	return nil
}

func (s *Store) createTable(ctx context.Context, where string) error {
	_, err := s.client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(s.table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(AttrPartition), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrKey), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrPartition), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrKey), KeyType: types.KeyTypeRange},
		},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) { // in use: another process is creating it
		if ctx.Err() != nil {
			return fmt.Errorf("dynamostore: create table %q at %s: %w", s.table, where, errors.Join(ctx.Err(), err))
		}
		return driver.Errorf(errorKinds.Kind(err), "dynamostore: create table %q at %s (does the role allow dynamodb:CreateTable?): %w", s.table, where, err)
	}
	w := dynamodb.NewTableExistsWaiter(s.client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 500 * time.Millisecond
		o.MaxDelay = 5 * time.Second
	})
	out, err := w.WaitForOutput(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)}, TableCreateTimeout)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("dynamostore: wait for table %q at %s: %w", s.table, where, errors.Join(ctx.Err(), err))
		}
		return driver.Errorf(driver.Transient, "dynamostore: wait for table %q at %s to become active: %w", s.table, where, err)
	}
	return checkSchema(s.table, out.Table)
}
