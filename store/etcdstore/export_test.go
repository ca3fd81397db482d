package etcdstore

// FormatVersion lets tests compare versions with revisions read from etcd.
var FormatVersion = formatVersion
