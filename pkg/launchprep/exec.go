package launchprep

import (
	"os"
	"strconv"
	"syscall"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

// execRunner replaces this program with the runner, its plan in f.
func execRunner(runner string, f *os.File) error {
	argv := []string{runner, launcherapi.RunPlanFlag, strconv.Itoa(int(f.Fd()))}
	return syscall.Exec(runner, argv, os.Environ())
}
