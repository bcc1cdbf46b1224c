package handlerside

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The node agent's pod folders are deeper than a socket path may be.
func TestShortPathsMakeDeepPodFoldersListenable(t *testing.T) {
	deep := filepath.Join(t.TempDir(), strings.Repeat("pod-folder-", 10))
	for _, sub := range []string{"volumes/public", "handler"} {
		if err := os.MkdirAll(filepath.Join(deep, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := &Driver{Volumes: filepath.Join(deep, "volumes"), HandlerDir: filepath.Join(deep, "handler")}
	if l, err := net.Listen("unix", filepath.Join(d.Volumes, "public", NotifyPipe)); err == nil {
		l.Close()
		t.Fatal("the deep path was listenable: the test does not test anything")
	}
	restore, err := d.shortPaths()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(d.Volumes, "public", NotifyPipe))
	if err != nil {
		t.Fatalf("listening through the short path: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(deep, "volumes", "public", NotifyPipe)); err != nil {
		t.Errorf("the socket is not in the pod's public volume: %v", err)
	}
	l.Close()
	short := filepath.Dir(d.Volumes)
	restore()
	if d.Volumes != filepath.Join(deep, "volumes") || d.HandlerDir != filepath.Join(deep, "handler") {
		t.Errorf("paths not restored: %s %s", d.Volumes, d.HandlerDir)
	}
	if _, err := os.Stat(short); !os.IsNotExist(err) {
		t.Errorf("the short folder %s is left: %v", short, err)
	}
}
