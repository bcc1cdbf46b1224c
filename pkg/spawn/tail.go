package spawn

import (
	"bytes"
	"io"
	"os"
)

// tailBytes is how much of a log Tail reads from its end.
const tailBytes = 16 << 10

// Tail returns up to n last non-empty lines of the file at path (read from
// its last 16 KiB), for messages about a child that ended; an error when
// the file cannot be read.
func Tail(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > tailBytes {
		if _, err := f.Seek(st.Size()-tailBytes, io.SeekStart); err != nil {
			return nil, err
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines = append(lines, string(l))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}
