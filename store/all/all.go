// Package all registers every store driver bundled with tenure, so that
// store.Open accepts all of their URL schemes. Import it for its side effect:
//
//	import _ "github.com/tenure-io/tenure/store/all"
package all

import (
	_ "github.com/tenure-io/tenure/store/azurestore"   // azblob://
	_ "github.com/tenure-io/tenure/store/dynamostore"  // dynamodb://
	_ "github.com/tenure-io/tenure/store/etcdstore"    // etcd://
	_ "github.com/tenure-io/tenure/store/filestore"    // file://
	_ "github.com/tenure-io/tenure/store/gcsstore"     // gs://
	_ "github.com/tenure-io/tenure/store/memstore"     // mem://
	_ "github.com/tenure-io/tenure/store/route53store" // route53://
	_ "github.com/tenure-io/tenure/store/s3store"      // s3://
)
