package clusterlite

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

func TestChooseRuntimeFallsBackOnce(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no podman
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cache := filepath.Join(t.TempDir(), "caps")
	rt, err := ChooseRuntime(context.Background(), RuntimeChoice{Mode: "auto", Launcher: "/bin/virt-launcher", CacheDir: cache}, log)
	if err != nil || rt != nil {
		t.Fatalf("auto without podman: %v, %v; want bare processes", rt, err)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "podman is not installed") {
		t.Errorf("want one warning saying why, got:\n%s", logs.String())
	}
	if _, err := ChooseRuntime(context.Background(), RuntimeChoice{Mode: "podman", CacheDir: cache}, log); err == nil ||
		!strings.Contains(err.Error(), "launcher runtime podman: podman is not installed") {
		t.Errorf("podman without podman: %v", err)
	}
	if rt, err := ChooseRuntime(context.Background(), RuntimeChoice{Mode: "process", CacheDir: cache}, log); rt != nil || err != nil {
		t.Errorf("process: %v, %v", rt, err)
	}
}
