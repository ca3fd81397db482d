package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// A key URL names one key in one store, such as a lock:
//
//	s3://bucket/prefix/leader.json           key leader.json in s3://bucket/prefix
//	file:///var/lib/tenure//jobs/leader.json key jobs/leader.json in file:///var/lib/tenure
//
// The key is the path after the first "//" of the URL's path, or, if there
// is none, the path's last segment. Everything else (scheme, host, the path
// before the key, query) is the store's URL. The split point matters: most
// drivers keep a key under a directory of its own store, so the key
// jobs/leader.json in file:///d and the key leader.json in file:///d/jobs
// are different objects (they are the same object only on drivers that
// prefix keys with the store's path, such as S3). A key with a "/" in it
// therefore needs the "//".
//
// A key URL's path has no "." or ".." segment and its key has no empty
// segment: drivers that resolve them (a file system, some object stores'
// clients) would reach an object outside the store, and others would not,
// so the same URL would name different objects on different drivers.

// SplitKeyURL splits a key URL into the store's URL and the key. Every
// tenure component that takes a lock URL (the tenure CLI, election.Config's
// LockURL) splits it with this function. The error explains what is wrong.
func SplitKeyURL(raw string) (storeURL, key string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("key URL %q: %w", raw, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("key URL %q: %s", u.Redacted(), fmt.Sprintf(format, args...))
	}
	if u.Scheme == "" {
		return "", "", bad("no scheme; want e.g. file://./data/leader.json or s3://bucket/prefix/leader.json")
	}
	if u.Opaque != "" {
		return "", "", bad("want SCHEME://STORE/KEY, e.g. file://./data/leader.json")
	}
	// Split the escaped path, so that an escaped "/" (%2F) stays inside
	// its segment.
	p := u.EscapedPath()
	var storePath, escKey string
	if i := strings.Index(p, "//"); i >= 0 {
		storePath, escKey = p[:i], p[i+2:]
	} else if i := strings.LastIndex(p, "/"); i >= 0 {
		storePath, escKey = p[:i], p[i+1:]
	}
	if escKey == "" {
		return "", "", bad("must end with the key, e.g. %s://%s%s/leader.json", u.Scheme, u.Host, strings.TrimSuffix(p, "/"))
	}
	key, err = url.PathUnescape(escKey)
	if err != nil {
		return "", "", bad("the key: %v", err)
	}
	if err := checkPath(key, true); err != nil {
		return "", "", bad("the key %q: %v", key, err)
	}
	if err := setEscapedPath(u, storePath); err != nil {
		return "", "", bad("the store's path: %v", err)
	}
	if err := checkPath(u.Path, false); err != nil {
		return "", "", bad("the store's path: %v", err)
	}
	if !utf8.ValidString(key) || len(key) > MaxKeyLen {
		return "", "", bad("the key must be valid UTF-8 of at most %d bytes", MaxKeyLen)
	}
	return u.String(), key, nil
}

// JoinKeyURL returns the key URL of key in the store named by storeURL: the
// URL that SplitKeyURL splits back into storeURL (less a trailing "/" of
// its path) and key. It uses "//" before the key only when the key has a
// "/" in it.
func JoinKeyURL(storeURL, key string) (string, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return "", fmt.Errorf("store URL %q: %w", storeURL, err)
	}
	if u.Scheme == "" || u.Opaque != "" {
		return "", fmt.Errorf("store URL %q: want SCHEME://STORE, e.g. file://./data or s3://bucket/prefix", u.Redacted())
	}
	storePath := strings.TrimSuffix(u.EscapedPath(), "/")
	if strings.Contains(storePath, "//") {
		return "", fmt.Errorf("store URL %q: its path has an empty segment, which a key URL cannot hold", u.Redacted())
	}
	if err := checkPath(u.Path, false); err != nil {
		return "", fmt.Errorf("store URL %q: %v", u.Redacted(), err)
	}
	if key == "" || !utf8.ValidString(key) || len(key) > MaxKeyLen {
		return "", fmt.Errorf("key %q: must be valid UTF-8 of 1 to %d bytes", key, MaxKeyLen)
	}
	if err := checkPath(key, true); err != nil {
		return "", fmt.Errorf("key %q: %v", key, err)
	}
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	escKey := strings.Join(segs, "/")
	sep := "/"
	if len(segs) > 1 {
		sep = "//"
	}
	if err := setEscapedPath(u, storePath+sep+escKey); err != nil {
		return "", fmt.Errorf("store URL %q: %w", u.Redacted(), err)
	}
	return u.String(), nil
}

// OpenKey opens the store of a key URL, as Open does, and returns it with
// the key.
func OpenKey(ctx context.Context, rawURL string, opts ...Option) (*Store, string, error) {
	storeURL, key, err := SplitKeyURL(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("store: %w", err)
	}
	s, err := Open(ctx, storeURL, opts...)
	if err != nil {
		return nil, "", err
	}
	return s, key, nil
}

// checkPath refuses "." and ".." segments of a path (a store's, which
// starts with "/", or a key) and, in a key, empty segments. It checks the
// unescaped path: %2E%2E is a ".." to a driver.
// CheckKeyPath refuses a key that configurations must not name: a "." or
// ".." segment, or an empty one (a leading, trailing or doubled "/"). Such
// a key names one object on a store that maps keys to paths and another on
// one that does not. The error says which rule the key breaks.
func CheckKeyPath(key string) error {
	if key == "" {
		return errors.New("empty")
	}
	return checkPath(key, true)
}

func checkPath(p string, isKey bool) error {
	if p == "" {
		return nil
	}
	segs := strings.Split(p, "/")
	if !isKey {
		segs = segs[1:]
	}
	for _, seg := range segs {
		switch seg {
		case ".", "..":
			return fmt.Errorf("a %q segment is not allowed: it would name an object outside the store on some drivers and not on others", seg)
		case "":
			if isKey {
				return fmt.Errorf("an empty segment is not allowed (the key starts at the first \"//\" of the path)")
			}
		}
	}
	return nil
}

// setEscapedPath sets u's path from its escaped form.
func setEscapedPath(u *url.URL, escaped string) error {
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return err
	}
	// RawPath keeps the caller's encoding where it differs from the
	// default one.
	u.Path, u.RawPath = p, escaped
	return nil
}
