// Package netsnap takes a snapshot of this process's network namespace's
// configuration, as text two snapshots can be compared by: its addresses
// (`ip -o addr`), IPv4 and IPv6 routes of every table, policy rules, the
// named network namespaces (`ip netns list`), and
// the nftables and iptables rule sets where the tools are installed.
// Counters, address lifetimes and timestamps, which change by themselves,
// are left out. The suites take one before, during and after cluster-lite
// to show it leaves the host's network alone.
package netsnap

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// command is one part of a snapshot; optional parts are skipped where the
// tool is not installed.
type command struct {
	args     []string
	optional bool
}

var commands = []command{
	{args: []string{"ip", "-o", "addr"}},
	{args: []string{"ip", "-4", "route", "show", "table", "all"}},
	{args: []string{"ip", "-6", "route", "show", "table", "all"}},
	{args: []string{"ip", "-4", "rule"}},
	{args: []string{"ip", "-6", "rule"}},
	{args: []string{"ip", "netns", "list"}},
	{args: []string{"nft", "list", "ruleset"}, optional: true},
	{args: []string{"iptables-save"}, optional: true},
	{args: []string{"ip6tables-save"}, optional: true},
}

// volatile matches what changes without anyone changing the configuration:
// address lifetimes, route expiry, packet and byte counters, and the
// iptables-save header and footer comments.
var volatile = regexp.MustCompile(`(valid_lft|preferred_lft|expires) \S+|\[\d+:\d+\]|counter packets \d+ bytes \d+|(?m)^#.*$`)

// Take runs the commands and returns their outputs, each under a line
// naming it, with volatile values removed.
func Take(ctx context.Context) (string, error) {
	var b strings.Builder
	for _, c := range commands {
		if _, err := exec.LookPath(c.args[0]); err != nil {
			if c.optional {
				continue
			}
			return "", fmt.Errorf("network snapshot: %w", err)
		}
		out, err := exec.CommandContext(ctx, c.args[0], c.args[1:]...).CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !(c.optional && errors.As(err, &exit)) {
			return "", fmt.Errorf("network snapshot: %s: %v: %s", strings.Join(c.args, " "), err, out)
		}
		fmt.Fprintf(&b, "== %s\n%s\n", strings.Join(c.args, " "), volatile.ReplaceAllString(string(out), ""))
	}
	return b.String(), nil
}
