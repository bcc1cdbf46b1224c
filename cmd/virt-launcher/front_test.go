package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// TestFolderAsManifest: a folder given as the manifest gets a sentence,
// not "read DIR: is a directory" twice.
func TestFolderAsManifest(t *testing.T) {
	dir := t.TempDir()
	var stderr bytes.Buffer
	code := run([]string{dir}, "/nonexistent/virt-launcher-convert", strings.NewReader(""), &stderr)
	want := "virt-launcher: reading " + dir + ": it is a folder; give the manifest file (YAML or JSON) itself\n"
	if code != launcherapi.ExitInputUnreadable || stderr.String() != want {
		t.Fatalf("run(folder) = %d, %q; want %d, %q", code, stderr.String(), launcherapi.ExitInputUnreadable, want)
	}
}
