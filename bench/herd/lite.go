package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

// lite is a running `clusterlite up`.
type lite struct {
	proc       *spawn.Process
	stateDir   string
	kubeconfig string
	netns      string
	logPath    string
}

// startLite runs `clusterlite up` with b's launcher runtime (bare processes
// by default, so hundreds fit on two cores) on a new state folder under work, and waits until it
// prints NETNS= and KUBECONFIG=.
func startLite(ctx context.Context, b bins, work string) (*lite, error) {
	l := &lite{stateDir: filepath.Join(work, "clusterlite"), logPath: filepath.Join(work, "clusterlite.log")}
	ready, netns := make(chan string, 1), make(chan string, 1)
	out := spawn.NewLineWriter(func(line []byte) {
		s := string(line)
		if v, ok := strings.CutPrefix(s, "KUBECONFIG="); ok {
			ready <- v
		}
		if v, ok := strings.CutPrefix(s, "NETNS="); ok {
			netns <- v
		}
	})
	var err error
	l.proc, err = spawn.Start(spawn.Spec{Path: b.clusterlite, Args: []string{"up", "--state-dir", l.stateDir,
		"--bin-dir", b.liteBinDir, "--launcher", b.launcher, "--image-dir", b.imageDir,
		"--launcher-runtime=" + b.launcherRuntime, "--log-level=warn", "--launcher-log-level=warn"},
		Stdout: out, StderrFile: l.logPath, Truncate: true})
	if err != nil {
		return nil, fmt.Errorf("starting clusterlite up: %w", err)
	}
	select {
	case l.kubeconfig = <-ready:
	case <-l.proc.Done():
		return nil, fmt.Errorf("clusterlite up exited before the stack was ready (%v); see %s", l.proc.Exit(), l.logPath)
	case <-time.After(5 * time.Minute):
		_ = l.stop()
		return nil, fmt.Errorf("cluster-lite was not ready within 5 minutes; see %s", l.logPath)
	case <-ctx.Done():
		_ = l.stop()
		return nil, ctx.Err()
	}
	l.netns = <-netns // printed before KUBECONFIG=
	return l, nil
}

// pids are the stack's processes: clusterlite itself (with the node agent
// inside) and what it lists in its pids file.
func (l *lite) pids() []int {
	out := []int{l.proc.PID()}
	data, _ := os.ReadFile(filepath.Join(l.stateDir, "pids"))
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// stop tears the stack down (SIGTERM, 3 minutes before SIGKILL) and
// reports an unclean end.
func (l *lite) stop() error {
	st, err := l.proc.Stop(context.Background(), 3*time.Minute)
	if err != nil {
		return fmt.Errorf("stopping clusterlite up: %w", err)
	}
	if st.Killed || !st.Exit.Success() {
		return fmt.Errorf("clusterlite up did not stop cleanly (%v, killed %v); see %s", st.Exit, st.Killed, l.logPath)
	}
	return nil
}

// etcdDBSize reads etcd_mvcc_db_total_size_in_bytes from etcd's /metrics
// on the loopback of the stack's network namespace.
func (l *lite) etcdDBSize(ctx context.Context) (float64, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialInNetNS(ctx, l.netns, network, addr)
	}}
	defer tr.CloseIdleConnections()
	body, err := httpGet(ctx, &http.Client{Transport: tr, Timeout: 10 * time.Second}, "http://127.0.0.1:2379/metrics")
	if err != nil {
		return 0, fmt.Errorf("etcd metrics: %w", err)
	}
	ss, err := parseMetrics(body, "etcd_mvcc_db_total_size_in_bytes")
	if err != nil {
		return 0, fmt.Errorf("etcd metrics: %w", err)
	}
	v, ok := gauge(ss, "etcd_mvcc_db_total_size_in_bytes")
	if !ok {
		return 0, fmt.Errorf("etcd metrics: no etcd_mvcc_db_total_size_in_bytes")
	}
	return v, nil
}

// dialInNetNS connects from inside the network namespace at nsPath. The
// socket is made on a thread of its own that enters the namespace and is
// never handed back (the goroutine ends locked, so Go ends the thread);
// the connection stays in the namespace it was made in.
func dialInNetNS(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread leaves with the goroutine
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- res{err: fmt.Errorf("opening network namespace %s: %w", nsPath, err)}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- res{err: fmt.Errorf("entering network namespace %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		ch <- res{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// httpGet fetches url and returns its body, failing on a non-200 answer.
func httpGet(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return string(body), nil
}
