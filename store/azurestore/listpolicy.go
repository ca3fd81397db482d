package azurestore

import (
	"context"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// startFromKey carries List's startFrom parameter in a request's context to
// ListPolicy. azblob v1.8.0's flat pager drops ListBlobsFlatOptions.StartFrom
// (later versions send it, but import Apache Arrow, several MB in every
// binary), so the parameter is added to the request here instead.
type startFromKey struct{}

// ListPolicy returns the pipeline policy that sends List's startFrom
// parameter, so a listing after a key starts there instead of at the start
// of the prefix. OpenURL's clients have it; a client passed to New should
// list it in ClientOptions.PerCallPolicies. Without it List still returns
// the right keys, at the cost of the pages before after.
func ListPolicy() policy.Policy { return listPolicy{} }

type listPolicy struct{}

func (listPolicy) Do(req *policy.Request) (*http.Response, error) {
	raw := req.Raw()
	if from, ok := raw.Context().Value(startFromKey{}).(string); ok {
		q := raw.URL.Query()
		if q.Get("comp") == "list" && q.Get("startFrom") == "" {
			q.Set("startFrom", from)
			raw.URL.RawQuery = q.Encode()
		}
	}
	return req.Next()
}

func withStartFrom(ctx context.Context, from string) context.Context {
	return context.WithValue(ctx, startFromKey{}, from)
}
