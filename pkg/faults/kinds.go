package faults

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// kind parses and renders the values of one parameter type. parse returns the
// value in its Go form; format renders it back in canonical form, which parse
// accepts and maps to the same value.
type kind interface {
	parse(s string) (any, error)
	format(v any) string
}

// durationKind is a Go duration (time.ParseDuration), 0 to maxDuration.
type durationKind struct{}

func (durationKind) parse(s string) (any, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("want a duration like 500ms, 5s or 1m30s: %w", err)
	}
	if d < 0 {
		return nil, errors.New("must not be negative")
	}
	if d > maxDuration {
		return nil, fmt.Errorf("must be at most %v", maxDuration)
	}
	return d, nil
}

func (durationKind) format(v any) string { return v.(time.Duration).String() }

// enumKind is one of a fixed list of lower-case words, matched in any case.
type enumKind struct{ values []string }

func (k enumKind) parse(s string) (any, error) {
	for _, v := range k.values {
		if strings.EqualFold(s, v) {
			return v, nil
		}
	}
	return nil, errors.New("not one of the allowed values")
}

func (enumKind) format(v any) string { return v.(string) }

// signals are the signals qemu-kill may send, in documentation order. Their
// names are the kernel's (unix.SignalName), the one table the launcher's
// messages use too.
var signals = []syscall.Signal{
	syscall.SIGKILL, syscall.SIGTERM, syscall.SIGSEGV, syscall.SIGABRT,
	syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGBUS,
}

func signalNames() []string {
	out := make([]string, len(signals))
	for i, s := range signals {
		out[i] = unix.SignalName(s)
	}
	return out
}

// signalKind is a signal name, with or without the SIG prefix, in any case.
type signalKind struct{}

func (signalKind) parse(s string) (any, error) {
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	for _, sg := range signals {
		if unix.SignalName(sg) == name {
			return sg, nil
		}
	}
	return nil, errors.New("not a signal the fault can send")
}

func (signalKind) format(v any) string { return unix.SignalName(v.(syscall.Signal)) }

// errnos are the errors disk-io-error may inject, in documentation order.
var errnos = []struct {
	name  string
	errno syscall.Errno
}{
	{"EIO", syscall.EIO},
	{"EINVAL", syscall.EINVAL},
	{"ENOSPC", syscall.ENOSPC},
}

func errnoAllowed() []string {
	out := make([]string, len(errnos))
	for i, e := range errnos {
		out[i] = fmt.Sprintf("%d (%s)", int(e.errno), e.name)
	}
	return out
}

// errnoKind is an errno from the errnos list, by number or by name in any case.
type errnoKind struct{}

func (errnoKind) parse(s string) (any, error) {
	n, numErr := strconv.Atoi(s)
	for _, e := range errnos {
		if (numErr == nil && n == int(e.errno)) || strings.EqualFold(s, e.name) {
			return e.errno, nil
		}
	}
	return nil, errors.New("not an errno the fault can inject")
}

func (errnoKind) format(v any) string { return strconv.Itoa(int(v.(syscall.Errno))) }

// diskKind is a KubeVirt disk name: a DNS-1123 label.
type diskKind struct{}

func (diskKind) parse(s string) (any, error) {
	if !isDNSLabel(s) {
		return nil, errors.New("want a disk name of the VMI: lower-case letters, digits and '-', at most 63 characters")
	}
	return s, nil
}

func (diskKind) format(v any) string { return v.(string) }

func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// attemptsKind is an AttemptSet.
type attemptsKind struct{}

func (attemptsKind) parse(s string) (any, error) { return ParseAttempts(s) }

func (attemptsKind) format(v any) string { return v.(AttemptSet).String() }
