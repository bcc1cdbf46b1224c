package containerdisk

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/pkg/compression"
	"go.podman.io/image/v5/types"
)

// Whiteout names of the OCI image layer format: a ".wh.NAME" entry removes
// NAME of the layers below, an opaque marker hides a folder's lower
// contents.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// tree is the part of an image's file system being rebuilt from its
// layers: the subtree want (slash-separated, relative to the root) under
// the folder dir. It remembers which layer wrote each entry, so that a
// layer's whiteouts remove only what the layers below it wrote. Every
// entry is written, linked and removed through root, an os.Root of dir:
// besides the cleaning of each entry's name, nothing a layer holds (a
// name, a hard link's target) can reach a file outside dir.
type tree struct {
	root    *os.Root
	want    string
	entries map[string]int // relative path (under want) -> layer index
}

// extract applies the layers in order, keeping only the subtree want,
// and verifies every layer's digest. It returns the bytes written.
func extract(ctx context.Context, src types.ImageSource, layers []types.BlobInfo, want, dir string) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	t := &tree{root: root, want: want, entries: map[string]int{}}
	var written int64
	for i, layer := range layers {
		if err := ctx.Err(); err != nil {
			return written, err
		}
		n, err := t.applyLayer(ctx, src, i, layer)
		written += n
		if err != nil {
			return written, fmt.Errorf("layer %d (%s): %w", i, layer.Digest, err)
		}
	}
	return written, nil
}

func (t *tree) applyLayer(ctx context.Context, src types.ImageSource, index int, info types.BlobInfo) (int64, error) {
	if err := info.Digest.Validate(); err != nil {
		return 0, fmt.Errorf("bad layer digest: %w", err)
	}
	blob, size, err := src.GetBlob(ctx, info, none.NoCache)
	if err != nil {
		return 0, fmt.Errorf("reading the layer: %w", err)
	}
	defer blob.Close()
	verifier := info.Digest.Verifier()
	counted := &countingReader{r: io.TeeReader(blob, verifier)}
	plain, _, err := compression.AutoDecompress(counted)
	if err != nil {
		return 0, fmt.Errorf("decompressing the layer: %w", err)
	}
	written, err := t.applyTar(tar.NewReader(plain), index)
	plain.Close()
	if err != nil {
		return written, err
	}
	// Read what the tar reader left (end blocks, compression trailer) so
	// that the digest covers the whole blob.
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return written, fmt.Errorf("reading the layer: %w", err)
	}
	if !verifier.Verified() {
		return written, fmt.Errorf("content does not match its digest %s (read %d bytes): the image is corrupt", info.Digest, counted.n)
	}
	if want := firstKnown(info.Size, size); want >= 0 && counted.n != want {
		return written, fmt.Errorf("read %d bytes, the manifest says %d", counted.n, want)
	}
	return written, nil
}

func firstKnown(sizes ...int64) int64 {
	for _, s := range sizes {
		if s >= 0 {
			return s
		}
	}
	return -1
}

// applyTar applies one layer's entries that touch the subtree.
func (t *tree) applyTar(tr *tar.Reader, index int) (int64, error) {
	var written int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return written, nil
		}
		if err != nil {
			return written, fmt.Errorf("reading the layer's tar stream: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		switch {
		case base == whiteoutOpaque:
			t.remove(dir, index, true)
			continue
		case strings.HasPrefix(base, whiteoutPrefix):
			t.remove(path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix)), index, false)
			continue
		}
		if above(name, t.want) {
			// An ancestor of the subtree: a folder keeps it, anything else
			// replaces it.
			if hdr.Typeflag != tar.TypeDir {
				t.remove(name, index, false)
				if hdr.Typeflag == tar.TypeSymlink {
					return written, fmt.Errorf("/%s is a symbolic link to %s: a containerDisk's path must be real folders", name, hdr.Linkname)
				}
			}
			continue
		}
		if !within(name, t.want) {
			continue
		}
		n, err := t.add(tr, hdr, name, index)
		written += n
		if err != nil {
			return written, err
		}
	}
}

// add writes one entry inside the subtree.
func (t *tree) add(tr *tar.Reader, hdr *tar.Header, name string, index int) (int64, error) {
	dst := filepath.FromSlash(name)
	switch hdr.Typeflag {
	case tar.TypeDir:
		// A folder replacing a file of a lower layer.
		if fi, err := t.root.Lstat(dst); err == nil && !fi.IsDir() {
			t.remove(name, index, false)
		}
		t.record(name, index)
		return 0, t.root.MkdirAll(dst, 0o755)
	case tar.TypeReg:
		t.remove(name, index, false)
		if err := t.root.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return 0, err
		}
		n, err := writeSparse(t.root, dst, tr, hdr.Size)
		if err != nil {
			return n, fmt.Errorf("extracting /%s: %w", name, err)
		}
		t.record(name, index)
		return n, nil
	case tar.TypeLink:
		target := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
		if !within(target, t.want) {
			return 0, fmt.Errorf("/%s is a hard link to /%s, outside /%s: not supported", name, target, t.want)
		}
		t.remove(name, index, false)
		if err := t.root.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return 0, err
		}
		if err := t.root.Link(filepath.FromSlash(target), dst); err != nil {
			return 0, fmt.Errorf("/%s: hard link to /%s: %w", name, target, err)
		}
		t.record(name, index)
		return 0, nil
	case tar.TypeSymlink:
		return 0, fmt.Errorf("/%s is a symbolic link to %s: a containerDisk file must be a regular file", name, hdr.Linkname)
	default:
		return 0, fmt.Errorf("/%s has tar type %q: a containerDisk file must be a regular file", name, hdr.Typeflag)
	}
}

// remove applies a whiteout of layer index at name: a plain whiteout (or
// an entry of another type replacing name) removes name and everything
// below it; an opaque folder marker removes only what the layers below
// wrote inside the folder, as this layer's own entries may come first.
func (t *tree) remove(name string, index int, opaque bool) {
	if !within(name, t.want) && !above(name, t.want) {
		return
	}
	for p, layer := range t.entries {
		inside := name == "" || strings.HasPrefix(p, name+"/")
		if (opaque && inside && layer < index) || (!opaque && (inside || p == name)) {
			_ = t.root.RemoveAll(filepath.FromSlash(p))
			delete(t.entries, p)
		}
	}
}

// record notes that layer index wrote name, and the folders leading to it
// inside the subtree (an opaque marker of this layer must keep them).
func (t *tree) record(name string, index int) {
	for p := name; within(p, t.want); p = path.Dir(p) {
		t.entries[p] = index
		if p == t.want {
			break
		}
	}
}

// within reports whether name is root or inside it.
func within(name, root string) bool {
	return name == root || strings.HasPrefix(name, root+"/")
}

// above reports whether name is a strict ancestor of p ("" is the root).
func above(name, p string) bool {
	return name == "" || strings.HasPrefix(p, name+"/")
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// sparseBlock is the granularity at which runs of zeros become holes.
const sparseBlock = 64 << 10

// writeSparse copies size bytes from r into a new file dst of root,
// leaving holes where whole blocks are zero (raw disk images are mostly
// zeros), and makes the file read-only: it is shared by every launch.
func writeSparse(root *os.Root, dst string, r io.Reader, size int64) (int64, error) {
	f, err := root.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, sparseBlock)
	zero := make([]byte, sparseBlock)
	var off int64
	for off < size {
		n, rerr := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if n > 0 {
			var werr error
			if bytes.Equal(buf[:n], zero[:n]) {
				_, werr = f.Seek(int64(n), io.SeekCurrent)
			} else {
				_, werr = f.Write(buf[:n])
			}
			if werr != nil {
				f.Close()
				return off, werr
			}
			off += int64(n)
		}
		if rerr != nil {
			f.Close()
			return off, fmt.Errorf("short file: %w", rerr)
		}
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return off, err
	}
	if err := f.Chmod(0o444); err != nil {
		f.Close()
		return off, err
	}
	return off, f.Close()
}
