package kv

import (
	"context"
	"fmt"
)

// Submitter sends commands and linearizable reads to a group; *rsm.Node
// is one.
type Submitter interface {
	// Command applies cmd to machine, exactly once, and returns its result.
	Command(ctx context.Context, machine string, cmd []byte) ([]byte, error)
	// Read answers q on machine, linearizably.
	Read(ctx context.Context, machine string, q []byte) ([]byte, error)
}

// Client is the typed client of a kv machine. Errors from the Submitter
// (such as rsm.ErrUnknownOutcome) are wrapped with the operation and key,
// so errors.Is and errors.As reach them. Client is safe for concurrent use
// if its Submitter is.
type Client struct {
	s       Submitter
	machine string
}

// NewClient returns a client of the machine registered as MachineName.
func NewClient(s Submitter) *Client { return &Client{s: s, machine: MachineName} }

// WithMachine returns a client of the kv machine registered under name.
func (c *Client) WithMachine(name string) *Client { return &Client{s: c.s, machine: name} }

// Put sets key to value and returns the revision of the write, which is
// now the key's ModRevision.
func (c *Client) Put(ctx context.Context, key string, value []byte) (revision uint64, err error) {
	r, err := c.command(ctx, "put", command{op: tagPut, key: key, value: value}, tagPutResult)
	return r.rev, err
}

// Delete deletes key. It reports whether the key existed; revision is the
// revision of the delete if it did, else the current revision.
func (c *Client) Delete(ctx context.Context, key string) (existed bool, revision uint64, err error) {
	r, err := c.command(ctx, "delete", command{op: tagDelete, key: key}, tagDeleteResult)
	return r.ok, r.rev, err
}

// CAS sets key to value if the key's ModRevision is expect, or, with expect
// 0, if the key does not exist. It reports whether it swapped; revision is
// the key's ModRevision afterwards (0 if the key does not exist). A failed
// swap is not an error.
func (c *Client) CAS(ctx context.Context, key string, expect uint64, value []byte) (swapped bool, revision uint64, err error) {
	r, err := c.command(ctx, "cas", command{op: tagCAS, key: key, expect: expect, value: value}, tagCASResult)
	return r.ok, r.rev, err
}

func (c *Client) command(ctx context.Context, op string, cmd command, want byte) (reply, error) {
	if err := validKey(cmd.key); err != nil {
		return reply{}, fmt.Errorf("kv: %s %q: %w", op, cmd.key, err)
	}
	return c.submit(ctx, op, cmd.key, cmd.encode(), want)
}

// putEncoded is Put of a command already encoded (a put of key).
func (c *Client) putEncoded(ctx context.Context, key string, cmd []byte) (revision uint64, err error) {
	if err := validKey(key); err != nil {
		return 0, fmt.Errorf("kv: put %q: %w", key, err)
	}
	r, err := c.submit(ctx, "put", key, cmd, tagPutResult)
	return r.rev, err
}

// submit submits an encoded command on key and checks its reply.
func (c *Client) submit(ctx context.Context, op, key string, cmd []byte, want byte) (reply, error) {
	res, err := c.s.Command(ctx, c.machine, cmd)
	if err != nil {
		return reply{}, fmt.Errorf("kv: %s %q: %w", op, key, err)
	}
	r, err := expectReply(res, want)
	if err != nil {
		return reply{}, fmt.Errorf("kv: %s %q: %w", op, key, err)
	}
	return r, nil
}

// Get returns key's value and revisions, or an error matching ErrNotFound.
func (c *Client) Get(ctx context.Context, key string) (KeyValue, error) {
	if err := validKey(key); err != nil {
		return KeyValue{}, fmt.Errorf("kv: get %q: %w", key, err)
	}
	r, err := c.read(ctx, query{op: tagGet, key: key}, tagGetResult)
	if err != nil {
		return KeyValue{}, fmt.Errorf("kv: get %q: %w", key, err)
	}
	if !r.found {
		return KeyValue{}, fmt.Errorf("kv: get %q: %w", key, ErrNotFound)
	}
	r.kv.Key = key
	return r.kv, nil
}

// ListOptions page through a list.
type ListOptions struct {
	// After starts the list after this key.
	After string
	// Limit is the most items returned. Default DefaultListLimit; at most
	// MaxListLimit.
	Limit int
	// MaxBytes bounds the size of the keys and values returned; a list
	// returns at least one item if one matches. Default DefaultListBytes.
	MaxBytes int
	// KeysOnly leaves the values out.
	KeysOnly bool
}

// ListResult is one page of a list.
type ListResult struct {
	// Items are sorted by key.
	Items []KeyValue
	// More reports that more keys match after the last item: list again
	// with After set to its key.
	More bool
}

// List returns the keys that start with prefix, in order, one page at a
// time.
func (c *Client) List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error) {
	if opts.Limit < 0 || opts.Limit > MaxListLimit || opts.MaxBytes < 0 {
		return ListResult{}, fmt.Errorf("kv: list %q: %w: Limit must be 0 to %d and MaxBytes not negative (got %d, %d)",
			prefix, ErrInvalidArgument, MaxListLimit, opts.Limit, opts.MaxBytes)
	}
	q := query{op: tagList, key: prefix, after: opts.After, limit: uint64(opts.Limit), maxBytes: uint64(opts.MaxBytes), keysOnly: opts.KeysOnly}
	if err := validQuery(q); err != nil {
		return ListResult{}, fmt.Errorf("kv: list %q: %w", prefix, err)
	}
	r, err := c.read(ctx, q, tagListResult)
	if err != nil {
		return ListResult{}, fmt.Errorf("kv: list %q: %w", prefix, err)
	}
	if opts.KeysOnly {
		for i := range r.items {
			r.items[i].Value = nil
		}
	}
	return ListResult{Items: r.items, More: r.more}, nil
}

func (c *Client) read(ctx context.Context, q query, want byte) (reply, error) {
	res, err := c.s.Read(ctx, c.machine, q.encode())
	if err != nil {
		return reply{}, err
	}
	return expectReply(res, want)
}

// expectReply decodes a result of type want or an error result.
func expectReply(b []byte, want byte) (reply, error) {
	r, err := decodeReply(b)
	if err != nil {
		return reply{}, err
	}
	if r.tag == tagError {
		return reply{}, errorOf(r.code, r.msg)
	}
	if r.tag != want {
		return reply{}, fmt.Errorf("%w: result of type 0x%02x, want 0x%02x", ErrMalformed, r.tag, want)
	}
	return r, nil
}
