package rsmtest

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
)

// Counter is a replicated counter for tests: any command adds its 8-byte
// big-endian operand (1 if empty) and returns the new total; a query
// returns the total. It is safe for concurrent use.
type Counter struct {
	mu sync.Mutex
	n  uint64
}

func (c *Counter) Apply(cmd []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := uint64(1)
	if len(cmd) == 8 {
		d = binary.BigEndian.Uint64(cmd)
	}
	c.n += d
	return binary.BigEndian.AppendUint64(nil, c.n)
}

func (c *Counter) Query([]byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return binary.BigEndian.AppendUint64(nil, c.n), nil
}

func (c *Counter) Snapshot(w io.Writer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := w.Write(binary.BigEndian.AppendUint64(nil, c.n))
	return err
}

func (c *Counter) Restore(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if len(b) != 8 {
		return errors.New("counter: snapshot is not 8 bytes")
	}
	c.mu.Lock()
	c.n = binary.BigEndian.Uint64(b)
	c.mu.Unlock()
	return nil
}

// DecodeCount decodes a Counter's result.
func DecodeCount(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, errors.New("counter result is not 8 bytes")
	}
	return binary.BigEndian.Uint64(b), nil
}
