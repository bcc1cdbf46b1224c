package spawn

import "bytes"

// LineWriter is an io.Writer that hands each complete line written to it,
// without its newline, to a function: a child's output read line by line
// (launcher events, through launcherapi.Follower; a controller's JSON
// lines). Give it as Spec.Stdout; by
// the time the Process is Done every line was handed on, but a last line
// without a newline, which Flush hands on.
type LineWriter struct {
	fn      func(line []byte)
	partial []byte
}

// NewLineWriter returns a LineWriter calling fn; fn must not keep line.
func NewLineWriter(fn func(line []byte)) *LineWriter { return &LineWriter{fn: fn} }

// Write implements io.Writer. os/exec calls it from one goroutine.
func (w *LineWriter) Write(b []byte) (int, error) {
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		w.fn(w.partial[:i])
		w.partial = w.partial[i+1:]
	}
}

// Flush hands on a last unterminated line, if any.
func (w *LineWriter) Flush() {
	if len(w.partial) > 0 {
		w.fn(w.partial)
		w.partial = nil
	}
}
