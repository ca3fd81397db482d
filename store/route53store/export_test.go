package route53store

// Test hooks.
var (
	EncodeValue         = encodeValue
	DecodeValue         = decodeValue
	RecordName          = recordName
	KeyOf               = keyOf
	MaxKeyLenFor        = maxKeyLen
	ComputeMaxValueSize = maxValueSize
	VersionOf           = versionOf
)
