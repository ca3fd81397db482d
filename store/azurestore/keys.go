package azurestore

import (
	"errors"
	"fmt"
	"strings"
)

// Limits on blob names, from Azure's "Naming and Referencing Containers,
// Blobs, and Metadata". The store prefix counts against them.
const (
	// MaxBlobNameLen is the longest blob name. Azure counts characters;
	// counting bytes is stricter, as no character takes more UTF-16 code
	// units than UTF-8 bytes.
	MaxBlobNameLen = 1024
	// MaxPathSegments is the most path segments ("/"-separated parts) a
	// blob name may have in an account without a hierarchical namespace.
	MaxPathSegments = 254
)

// checkName returns an error if Azure cannot store a blob under name as it
// is, or one under a name that starts with it (isPrefix):
//
//   - A backslash: the service turns it into "/" (Azurite does the same),
//     so the blob is stored and listed under another name.
//   - A path segment that ends in ".": the documentation says to avoid
//     names that end in a dot and that no path segment should end in one.
//     The service trims such dots, so a request for the name fails to
//     authenticate (the signature covered the dot) or addresses another
//     blob. This covers "." and ".." segments too.
//   - More than MaxPathSegments segments, or more than MaxBlobNameLen
//     bytes.
//   - Characters the documentation says cannot be used even when
//     percent-encoded: C1 control characters (U+0080 to U+009F) and
//     private-use or non-characters such as U+E000 and U+FFFF. (The
//     portable layer already refuses C0 controls and DEL.)
func checkName(name string, isPrefix bool) error {
	if isPrefix && len(name) >= MaxBlobNameLen || len(name) > MaxBlobNameLen {
		return fmt.Errorf("blob names are at most %d bytes", MaxBlobNameLen)
	}
	if strings.Contains(name, `\`) {
		return errors.New(`a backslash: Azure Blob Storage turns "\" into "/" in blob names, so the key cannot be stored under its own name`)
	}
	if n := strings.Count(name, "/") + 1; n > MaxPathSegments {
		return fmt.Errorf("blob name has %d path segments; Azure allows at most %d", n, MaxPathSegments)
	}
	for seg := range strings.SplitSeq(name, "/") {
		if strings.HasSuffix(seg, ".") {
			return fmt.Errorf("path segment %q ends in \".\", which Azure Blob Storage does not store faithfully (it trims trailing dots)", seg)
		}
	}
	for _, r := range name {
		switch {
		case r >= 0x80 && r <= 0x9f:
			return fmt.Errorf("control character %U cannot be used in Azure blob names", r)
		case r >= 0xe000 && r <= 0xf8ff, r == 0xfffe, r == 0xffff:
			return fmt.Errorf("character %U cannot be used in Azure blob names", r)
		}
	}
	return nil
}
