package qemu

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// ConsoleLine is one complete line the guest wrote to its serial console.
type ConsoleLine struct {
	Text string
	// At is when the watcher read the line.
	At time.Time
}

// WatchConsole follows a serial console log file (which QEMU writes) and
// sends each complete line on the returned channel until ctx ends. The file
// may not exist yet when it starts. Terminal control sequences are removed.
// The poll interval bounds how late a line is seen.
func WatchConsole(ctx context.Context, clk clock.WithTicker, path string, poll time.Duration) <-chan ConsoleLine {
	out := make(chan ConsoleLine, 256)
	go func() {
		defer close(out)
		var f *os.File
		defer func() {
			if f != nil {
				f.Close()
			}
		}()
		var pending []byte
		buf := make([]byte, 32*1024)
		ticker := clk.NewTicker(poll)
		defer ticker.Stop()
		for {
			if f == nil {
				var err error
				if f, err = os.Open(path); err != nil {
					f = nil
				}
			}
			for f != nil {
				n, err := f.Read(buf)
				pending = append(pending, buf[:n]...)
				for {
					i := bytes.IndexByte(pending, '\n')
					if i < 0 {
						break
					}
					line := cleanConsole(string(pending[:i]))
					pending = pending[i+1:]
					select {
					case out <- ConsoleLine{Text: line, At: clk.Now()}:
					case <-ctx.Done():
						return
					}
				}
				if err != nil || n == 0 {
					if err != nil && !errors.Is(err, io.EOF) {
						return
					}
					break
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C():
			}
		}
	}()
	return out
}

// cleanConsole removes carriage returns and ANSI escape sequences, which
// firmware and the kernel write to the serial console.
func cleanConsole(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == 0x1b:
			// Skip ESC [ ... final byte, or ESC + one byte.
			if i+1 < len(s) && s[i+1] == '[' {
				i += 2
				for i < len(s) && (s[i] < 0x40 || s[i] > 0x7e) {
					i++
				}
			} else {
				i++
			}
		case c == '\r':
		case c < 0x20 && c != '\t':
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
