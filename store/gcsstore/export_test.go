package gcsstore

// Classify exposes the error classification to the tests.
var Classify = classify
