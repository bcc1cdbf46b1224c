package main

import (
	"fmt"
	"io"

	"github.com/crashloop-harness/crashloop/internal/launchplan"
	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// forgetDomain is the launchplan.ForgetDomainFlag mode's main: the front's
// reaper asks this binary, the only one that links libvirt, to remove a
// domain from an external libvirt.
func forgetDomain(args []string, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintf(stderr, "virt-launcher-libvirt: %s: want URI and DOMAIN, got %q\n", launchplan.ForgetDomainFlag, args)
		return int(launcherapi.ExitUsage)
	}
	if err := qemu.ForgetDomain(args[0], args[1]); err != nil {
		fmt.Fprintf(stderr, "virt-launcher-libvirt: %v\n", err)
		return int(launcherapi.ExitInternal)
	}
	return 0
}
