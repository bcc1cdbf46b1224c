package clusterlite

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/crashloop-harness/crashloop/pkg/spawn"
)

const (
	// ServiceClusterIPRange is the API server's service cluster IP range.
	// Nothing routes it; a component that must be reachable at an address
	// of this range (an aggregated API server, say) needs that address on
	// the namespace's lo (AddAddress).
	ServiceClusterIPRange = "10.254.0.0/24"
	// KubernetesServiceIP is the cluster IP of the default/kubernetes
	// service, the first address of ServiceClusterIPRange. The API
	// server's certificate includes it.
	KubernetesServiceIP = "10.254.0.1"

	// EtcdBinary and APIServerBinary are the file names Start looks for in
	// Config.BinDir.
	EtcdBinary      = "etcd"
	APIServerBinary = "kube-apiserver"

	// AdminUser is the user name of the admin token, a member of
	// system:masters.
	AdminUser = "clusterlite-admin"
	// FrontProxyClientName is the common name of the client certificate
	// the aggregation layer presents to aggregated API servers, and the only
	// name they should accept request headers from.
	FrontProxyClientName = "front-proxy-client"

	// DefaultReadyTimeout and DefaultStopTimeout apply when the Config
	// leaves the fields zero.
	DefaultReadyTimeout = 2 * time.Minute
	DefaultStopTimeout  = 30 * time.Second

	// serviceAccountIssuer is the issuer of service-account tokens.
	serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
	// pollInterval is the pause between two readiness probes.
	pollInterval = 100 * time.Millisecond
	// etcdClientPort and etcdPeerPort are etcd's ports on the namespace's
	// loopback, which nothing else shares.
	etcdClientPort, etcdPeerPort = 2379, 2380
)

// Config says where a control plane finds its binaries and keeps its state.
type Config struct {
	// BinDir holds the etcd and kube-apiserver binaries (see
	// tools/clusterlite/build.sh). Required.
	BinDir string
	// StateDir receives etcd's data (etcd/), certificates, keys and the
	// token file (pki/), the API server's --cert-dir (apiserver-certs/),
	// the processes' logs (logs/etcd.log, logs/kube-apiserver.log) and the
	// admin kubeconfig (kubeconfig). It is created when missing. Required.
	// Certificates and keys are new on every Start; etcd data is kept.
	StateDir string
	// Logger receives progress records; slog.Default() when nil.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for etcd and the API server to become
	// ready; DefaultReadyTimeout when zero.
	ReadyTimeout time.Duration
	// StopTimeout is how long Stop waits for each process after SIGTERM
	// before it sends SIGKILL; DefaultStopTimeout when zero.
	StopTimeout time.Duration
	// APIServerArgs are appended to the API server's command line. A
	// single-valued flag given here overrides the one set by Start; a list
	// flag (--disable-admission-plugins, say) is extended instead.
	APIServerArgs []string
	// Clock paces the restarts of StartProcess's Restart option;
	// clock.RealClock when nil.
	Clock clock.Clock
	// Users are extra identities that get a token each and a kubeconfig
	// (see KubeconfigFor), for components that must act as someone else
	// than the admin: KubeVirt's webhooks trust status writes only from
	// its own service accounts, "system:serviceaccount:kubevirt:...", and
	// a kubelet is confined by the Node authorizer and NodeRestriction
	// only as "system:node:<node>" in "system:nodes" (NodeUser).
	Users []User
}

// ControlPlane is a running etcd and kube-apiserver, started by Start. Its
// methods are safe for concurrent use.
type ControlPlane struct {
	cfg            Config
	log            *slog.Logger
	ca             *CA
	token          string
	server         string
	etcdURL        string
	kubeconfigPath string

	// spawner starts every process in the control plane's network
	// namespace; forward carries the API server's port to the host's.
	spawner   *spawn.Spawner
	forward   *forwarder
	etcd      *child
	apiserver *child

	// userTokens maps Config.Users to their tokens.
	userTokens map[string]string
	// procs are the processes of StartProcess, stopped before the API
	// server.
	procsMu sync.Mutex
	procs   []*Process

	stopOnce sync.Once
	stopErr  error
}

// Start creates the control plane's network namespace (root needed),
// generates certificates and keys, starts etcd and then the API server on
// the namespace's loopback, forwards the API server's port from the host's
// 127.0.0.1 (the same port number on both sides), waits until /readyz
// answers ok through it, and writes StateDir/kubeconfig. ctx bounds only
// the start; the processes run until Stop. On error everything started is
// stopped again. The processes are killed by the kernel when the calling
// process dies, and the namespace goes with them.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	if cfg.BinDir == "" || cfg.StateDir == "" {
		return nil, errors.New("start control plane: Config.BinDir and Config.StateDir are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	var err error
	if cfg.BinDir, err = filepath.Abs(cfg.BinDir); err != nil {
		return nil, fmt.Errorf("start control plane: bin dir: %w", err)
	}
	if cfg.StateDir, err = filepath.Abs(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("start control plane: state dir: %w", err)
	}
	for _, b := range []string{EtcdBinary, APIServerBinary} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("start control plane: %w (build it with tools/clusterlite/build.sh)", err)
		}
	}
	cp := &ControlPlane{
		cfg:            cfg,
		log:            cfg.Logger.With("cluster", cfg.StateDir),
		kubeconfigPath: filepath.Join(cfg.StateDir, "kubeconfig"),
	}
	begin := time.Now()
	if err := cp.start(ctx); err != nil {
		if stopErr := cp.Stop(context.Background()); stopErr != nil {
			err = fmt.Errorf("%w (and cleaning up: %v)", err, stopErr)
		}
		return nil, fmt.Errorf("start control plane in %s: %w", cfg.StateDir, err)
	}
	cp.log.Info("control plane ready", "server", cp.server, "etcd", cp.etcdURL,
		"kubeconfig", cp.kubeconfigPath, "after", time.Since(begin).Round(time.Millisecond))
	return cp, nil
}

// start does the work of Start; the caller cleans up on error.
func (cp *ControlPlane) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.ReadyTimeout)
	defer cancel()

	dirs := map[string]string{}
	for _, d := range []string{"etcd", "pki", "apiserver-certs", "logs"} {
		dirs[d] = filepath.Join(cp.cfg.StateDir, d)
		if err := os.MkdirAll(dirs[d], 0o700); err != nil {
			return fmt.Errorf("create state directory: %w", err)
		}
	}
	pki, err := cp.writePKI(dirs["pki"])
	if err != nil {
		return err
	}
	securePort, err := cp.makeNetNS(ctx)
	if err != nil {
		return err
	}
	cp.server = "https://127.0.0.1:" + strconv.Itoa(securePort)
	if err := cp.startEtcd(ctx, dirs["etcd"], dirs["logs"]); err != nil {
		return err
	}

	args := []string{
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(securePort),
		"--cert-dir=" + dirs["apiserver-certs"],
		"--tls-cert-file=" + pki["apiserver.crt"],
		"--tls-private-key-file=" + pki["apiserver.key"],
		"--client-ca-file=" + pki["ca.crt"],
		"--token-auth-file=" + pki["tokens.csv"],
		// As a cluster's: a node's user is confined to its node's objects
		// (the Node authorizer and the NodeRestriction admission plugin),
		// everyone else to what RBAC grants; system:masters (the admin,
		// and whoever Config.Users puts there) is allowed everything
		// before either is asked.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + pki["sa.pub"],
		"--service-account-signing-key-file=" + pki["sa.key"],
		// No kube-controller-manager creates service accounts or their
		// tokens, so the plugin would reject every pod.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		// The aggregation layer: it authenticates to aggregated API
		// servers with the front-proxy client certificate and sends the
		// user in request headers, and it dials an APIService's endpoints
		// rather than its service's cluster IP, which nothing routes.
		"--requestheader-client-ca-file=" + pki["front-proxy-ca.crt"],
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki["front-proxy-client.crt"],
		"--proxy-client-key-file=" + pki["front-proxy-client.key"],
		"--enable-aggregator-routing=true",
		// The kubernetes service cannot have endpoints: their validation
		// rejects loopback addresses, and the reconciler would log that
		// every ten seconds. Clients use the kubeconfig instead.
		"--endpoint-reconciler-type=none",
	}
	args = append(args, cp.cfg.APIServerArgs...)
	cp.apiserver, err = startChild(cp.spawner, cp.log, "kube-apiserver", filepath.Join(cp.cfg.BinDir, APIServerBinary),
		args, cp.cfg.StateDir, filepath.Join(dirs["logs"], "kube-apiserver.log"))
	if err != nil {
		return err
	}
	apiBegin := time.Now()
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: cp.ca.Pool(), MinVersion: tls.VersionTLS12},
	}}
	defer client.CloseIdleConnections()
	if err := waitReady(ctx, cp.apiserver, client, cp.server+"/readyz", cp.token, bodyOK); err != nil {
		return err
	}
	cp.apiserver.log.Info("ready", "after", time.Since(apiBegin).Round(time.Millisecond))

	if err := writeKubeconfig(cp.kubeconfigPath, cp.server, cp.ca.CertPEM(), cp.token); err != nil {
		return err
	}
	for _, u := range cp.cfg.Users {
		if err := writeKubeconfig(cp.KubeconfigFor(u.Name), cp.server, cp.ca.CertPEM(), cp.userTokens[u.Name]); err != nil {
			return err
		}
	}
	return nil
}

// startEtcd starts etcd on the namespace's loopback and waits until it
// reports healthy.
func (cp *ControlPlane) startEtcd(ctx context.Context, dataDir, logDir string) error {
	cp.etcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdClientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeerPort)

	var err error
	cp.etcd, err = startChild(cp.spawner, cp.log, "etcd", filepath.Join(cp.cfg.BinDir, EtcdBinary), []string{
		"--name=clusterlite",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + cp.etcdURL,
		"--advertise-client-urls=" + cp.etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=clusterlite=" + peerURL,
		// A throw-away cluster: losing the last writes on a host crash is
		// fine, and fsync dominates etcd latency on a busy disk.
		"--unsafe-no-fsync",
	}, cp.cfg.StateDir, filepath.Join(logDir, "etcd.log"))
	if err != nil {
		return err
	}
	etcdBegin := time.Now()
	etcdClient := &http.Client{Transport: &http.Transport{DialContext: cp.spawner.DialContext}}
	defer etcdClient.CloseIdleConnections()
	if err := waitReady(ctx, cp.etcd, etcdClient, cp.etcdURL+"/health", "", etcdHealthy); err != nil {
		return err
	}
	cp.etcd.log.Info("ready", "after", time.Since(etcdBegin).Round(time.Millisecond))
	return nil
}

// writePKI generates the CAs, the API server's serving certificate, the
// front-proxy client certificate, the service-account key pair and the
// admin token, and writes what the API server reads into dir. It returns
// the written files by name.
func (cp *ControlPlane) writePKI(dir string) (map[string]string, error) {
	var err error
	if cp.ca, err = NewCA("clusterlite-ca"); err != nil {
		return nil, err
	}
	frontProxyCA, err := NewCA("clusterlite-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	apiCert, apiKey, err := cp.ca.IssueServingCert(
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(KubernetesServiceIP)})
	if err != nil {
		return nil, fmt.Errorf("API server certificate: %w", err)
	}
	proxyCert, proxyKey, err := frontProxyCA.IssueClientCert(FrontProxyClientName, nil)
	if err != nil {
		return nil, fmt.Errorf("front-proxy client certificate: %w", err)
	}
	saKey, saPub, err := serviceAccountKeys()
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, fmt.Errorf("generate admin token: %w", err)
	}
	cp.token = hex.EncodeToString(tok)
	// Format of --token-auth-file: token,user,uid,"group1,group2".
	tokens := fmt.Sprintf("%s,%s,%s,\"%s\"\n", cp.token, AdminUser, AdminUser, MastersGroup)
	cp.userTokens = map[string]string{}
	for _, u := range cp.cfg.Users {
		if _, err := rand.Read(tok); err != nil {
			return nil, fmt.Errorf("generate token of %s: %w", u.Name, err)
		}
		line, err := tokenLine(hex.EncodeToString(tok), u)
		if err != nil {
			return nil, err
		}
		cp.userTokens[u.Name] = hex.EncodeToString(tok)
		tokens += line
	}

	files := map[string][]byte{
		"ca.crt":                 cp.ca.CertPEM(),
		"apiserver.crt":          apiCert,
		"apiserver.key":          apiKey,
		"front-proxy-ca.crt":     frontProxyCA.CertPEM(),
		"front-proxy-client.crt": proxyCert,
		"front-proxy-client.key": proxyKey,
		"sa.key":                 saKey,
		"sa.pub":                 saPub,
		"tokens.csv":             []byte(tokens),
	}
	paths := make(map[string]string, len(files))
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := writeFileAtomic(p, data, 0o600); err != nil {
			return nil, fmt.Errorf("write PKI: %w", err)
		}
		paths[name] = p
	}
	return paths, nil
}

// waitReady polls url until ok accepts the answer, c exits, or ctx ends.
// A non-empty token is sent as a bearer token.
func waitReady(ctx context.Context, c *child, client *http.Client, url, token string, ok func(status int, body []byte) bool) error {
	last := "no answer yet"
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		status, body, err := get(ctx, client, url, token)
		switch {
		case err != nil:
			last = err.Error()
		case ok(status, body):
			return nil
		default:
			last = fmt.Sprintf("status %d: %s", status, strings.TrimSpace(string(body)))
		}
		select {
		case <-c.proc.Done():
			return fmt.Errorf("waiting for %s to be ready: %w", c.name, c.exitError())
		case <-ctx.Done():
			// Say which checks still fail; /readyz?verbose lists them.
			if strings.HasSuffix(url, "/readyz") {
				vctx, vcancel := context.WithTimeout(context.Background(), 2*time.Second)
				if st, b, err := get(vctx, client, url+"?verbose", token); err == nil {
					last = fmt.Sprintf("status %d:\n%s", st, failedChecks(b))
				}
				vcancel()
			}
			return fmt.Errorf("%s not ready at %s: %w; last answer: %s; last lines of %s:\n%s",
				c.name, url, context.Cause(ctx), last, c.logPath, logTail(c.logPath, 15))
		case <-tick.C:
		}
	}
}

// get fetches url and returns status and body (at most 64 KiB).
func get(ctx context.Context, client *http.Client, url, token string) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("request %s: %w", url, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("read %s: %w", url, err)
	}
	return resp.StatusCode, body, nil
}

// etcdHealthy accepts etcd's /health answer {"health":"true",...}.
func etcdHealthy(status int, body []byte) bool {
	var h struct {
		Health string `json:"health"`
	}
	return status == http.StatusOK && json.Unmarshal(body, &h) == nil && h.Health == "true"
}

// bodyOK accepts an API server health endpoint's answer "ok".
func bodyOK(status int, body []byte) bool {
	return status == http.StatusOK && strings.TrimSpace(string(body)) == "ok"
}

// failedChecks keeps the failing lines ("[-]...") of a verbose health
// answer, or all of it when none fails.
func failedChecks(body []byte) string {
	var failed []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "[-]") {
			failed = append(failed, "    "+l)
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(string(body))
	}
	return strings.Join(failed, "\n")
}

// Stop stops the processes of StartProcess, the API server and then etcd,
// closes the forward and leaves the namespace: SIGTERM, then SIGKILL after
// Config.StopTimeout or when ctx ends, whichever is first. It returns every
// problem met: a process that had exited before Stop, failed on SIGTERM or
// had to be killed. Stop is idempotent; later calls return the first
// call's result. State and logs stay in StateDir.
func (cp *ControlPlane) Stop(ctx context.Context) error {
	cp.stopOnce.Do(func() {
		begin := time.Now()
		var errs []error
		cp.procsMu.Lock()
		procs := cp.procs
		cp.procs = nil
		cp.procsMu.Unlock()
		for i := len(procs) - 1; i >= 0; i-- {
			if err := procs[i].Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		for _, c := range []*child{cp.apiserver, cp.etcd} {
			if c == nil {
				continue
			}
			if err := c.stop(ctx, cp.cfg.StopTimeout); err != nil {
				errs = append(errs, err)
			}
		}
		if cp.forward != nil {
			cp.forward.close()
		}
		if cp.spawner != nil {
			cp.spawner.Close()
		}
		cp.stopErr = errors.Join(errs...)
		if cp.stopErr != nil {
			cp.stopErr = fmt.Errorf("stop control plane in %s: %w", cp.cfg.StateDir, cp.stopErr)
		}
		cp.log.Info("control plane stopped", "after", time.Since(begin).Round(time.Millisecond), "clean", cp.stopErr == nil)
	})
	return cp.stopErr
}

// KubeconfigPath returns the path of the admin kubeconfig file.
func (cp *ControlPlane) KubeconfigPath() string { return cp.kubeconfigPath }

// RESTConfig returns a new client configuration for the admin user; the
// caller may modify it.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return restConfig(cp.server, cp.ca.CertPEM(), cp.token)
}

// Server returns the API server's URL, https://127.0.0.1:PORT: the host's
// end of the forward, and the API server's own address in the namespace.
func (cp *ControlPlane) Server() string { return cp.server }

// CAPEM returns the PEM certificate of the CA that signed the API server's
// serving certificate and every certificate of IssueServingCert. The caller
// must not modify it.
func (cp *ControlPlane) CAPEM() []byte { return cp.ca.CertPEM() }

// IssueServingCert issues a serving certificate signed by the control
// plane's CA, for example for an aggregated API server: dnsNames should then
// include SERVICE.NAMESPACE.svc, the name the aggregation layer verifies.
// See CA.IssueServingCert.
func (cp *ControlPlane) IssueServingCert(dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	return cp.ca.IssueServingCert(dnsNames, ips)
}

// IssueNamedServingCert is IssueServingCert with the common name given
// (see CA.IssueNamedServingCert).
func (cp *ControlPlane) IssueNamedServingCert(cn string, dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	return cp.ca.IssueNamedServingCert(cn, dnsNames, ips)
}
