package testutil

import (
	"path/filepath"
	"testing"
)

// IsolateAWSConfig clears, for the rest of the test, every environment
// variable and shared file through which the AWS SDK would find
// credentials, a region, a profile or an endpoint, so that tests of the
// AWS drivers see only what they set themselves.
func IsolateAWSConfig(t *testing.T) {
	t.Helper()
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE":                        none,
		"AWS_SHARED_CREDENTIALS_FILE":            none,
		"AWS_PROFILE":                            "",
		"AWS_REGION":                             "",
		"AWS_DEFAULT_REGION":                     "",
		"AWS_ACCESS_KEY_ID":                      "",
		"AWS_SECRET_ACCESS_KEY":                  "",
		"AWS_SESSION_TOKEN":                      "",
		"AWS_EC2_METADATA_DISABLED":              "true",
		"AWS_WEB_IDENTITY_TOKEN_FILE":            "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_ENDPOINT_URL":                       "",
		"AWS_ENDPOINT_URL_S3":                    "",
		"AWS_ENDPOINT_URL_DYNAMODB":              "",
		"AWS_ENDPOINT_URL_ROUTE_53":              "",
	} {
		t.Setenv(k, v)
	}
}
