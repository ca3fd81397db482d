package dynamostore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tenure-io/tenure/internal/testutil"
	"github.com/tenure-io/tenure/store"
	"github.com/tenure-io/tenure/store/dynamostore"
)

// The moto server is shared by every test in the binary and stopped after
// them.
func TestMain(m *testing.M) { testutil.Main(m) }

func ctx(t testing.TB) context.Context { return t.Context() }

// clientFor returns a DynamoDB client for the moto server.
func clientFor(srv testutil.MotoServer) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       srv.Region,
		BaseEndpoint: aws.String(srv.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
	})
}

var seq atomic.Int64

// newTable returns a table name no other test in this binary uses.
func newTable() string { return fmt.Sprintf("tenure-test-%06d", seq.Add(1)) }

// newNamespace returns a namespace no other test in this binary uses.
func newNamespace() string { return fmt.Sprintf("ns%06d", seq.Add(1)) }

// motoTable creates a table on srv with the driver's key schema and returns
// its name.
func motoTable(t testing.TB, srv testutil.MotoServer) string {
	t.Helper()
	table := newTable()
	d, err := dynamostore.New(clientFor(srv), table, "", dynamostore.Options{Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CheckTable(ctx(t), true); err != nil {
		t.Fatalf("create table: %v", err)
	}
	return table
}

// openOn returns a function that opens a fresh, empty store on srv: one
// table, a namespace per store.
func openOn(t testing.TB, srv testutil.MotoServer) func(t testing.TB) *store.Store {
	client := clientFor(srv)
	table := motoTable(t, srv)
	return func(t testing.TB) *store.Store {
		t.Helper()
		d, err := dynamostore.New(client, table, newNamespace(), dynamostore.Options{Endpoint: srv.Endpoint})
		if err != nil {
			t.Fatal(err)
		}
		return store.New(d)
	}
}
