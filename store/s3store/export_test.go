package s3store

// ConfigureChecksums lets tests build clients configured as OpenURL's.
var ConfigureChecksums = configureChecksums
