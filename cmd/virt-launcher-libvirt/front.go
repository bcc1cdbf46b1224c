package main

import (
	"fmt"
	"io"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
	"github.com/crashloop-harness/crashloop/pkg/qemu"
)

// forgetFlag is the hidden first argument with which the front's reaper
// asks this binary to remove a domain from an external libvirt:
// forgetFlag URI DOMAIN. Only this binary links libvirt.
const forgetFlag = "--internal-forget-domain"

// forgetDomain is the forgetFlag mode's main.
func forgetDomain(args []string, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintf(stderr, "virt-launcher-libvirt: %s: want URI and DOMAIN, got %q\n", forgetFlag, args)
		return int(launcherapi.ExitUsage)
	}
	if err := qemu.ForgetDomain(args[0], args[1]); err != nil {
		fmt.Fprintf(stderr, "virt-launcher-libvirt: %v\n", err)
		return int(launcherapi.ExitInternal)
	}
	return 0
}
