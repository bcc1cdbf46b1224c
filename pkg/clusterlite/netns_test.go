package clusterlite

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// TestForwarder joins a client to an echo server through the forwarder:
// bytes pass both ways, a half-close reaches the server, and close ends a
// connection still open.
func TestForwarder(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := startForwarder(front, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", echo.Addr().String())
	}, slog.New(slog.NewTextHandler(t.Output(), nil)))

	c, err := net.Dial("tcp", front.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c) // ends only if the half-close went through
	if err != nil || string(got) != "ping" {
		t.Errorf("through the forward: %q, %v; want the echo of ping and EOF", got, err)
	}
	c.Close()

	open, err := net.Dial("tcp", front.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := open.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(open, b); err != nil {
		t.Fatal(err)
	}
	f.close()
	_ = open.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := open.Read(b); err == nil {
		t.Errorf("read %d bytes after close; want the connection ended", n)
	}
	if c, err := net.DialTimeout("tcp", front.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the forward still accepts after close")
	}
}
