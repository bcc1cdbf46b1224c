package clusterlite

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crashloop-harness/crashloop/pkg/netsnap"
	"github.com/crashloop-harness/crashloop/pkg/procfs/procfstest"
)

func TestStartNeedsBinaries(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, Config{StateDir: t.TempDir()}); err == nil {
		t.Error("started without BinDir")
	}
	state := t.TempDir()
	_, err := Start(ctx, Config{BinDir: t.TempDir(), StateDir: state})
	if err == nil || !strings.Contains(err.Error(), "build.sh") {
		t.Errorf("start with an empty BinDir: %v; want a hint at build.sh", err)
	}
}

func TestFailedChecks(t *testing.T) {
	body := "[+]ping ok\n[-]etcd failed: reason withheld\n[+]log ok\nreadyz check failed\n"
	if got, want := failedChecks([]byte(body)), "    [-]etcd failed: reason withheld"; got != want {
		t.Errorf("failedChecks = %q, want %q", got, want)
	}
}

// TestControlPlane starts the real etcd and kube-apiserver from
// $CLUSTERLITE_BIN_DIR, uses the API, stops them and checks that nothing is
// left running or listening, that the host's addresses and routes were the
// same all along, and that the namespace is gone.
func TestControlPlane(t *testing.T) {
	binDir := os.Getenv("CLUSTERLITE_BIN_DIR")
	if binDir == "" {
		t.Skip("CLUSTERLITE_BIN_DIR is not set (build the binaries with tools/clusterlite/build.sh)")
	}
	ctx := t.Context()
	state := t.TempDir()
	hostNet := hostNetwork(t)
	begin := time.Now()
	cp, err := Start(ctx, Config{
		BinDir:   binDir,
		StateDir: state,
		Logger:   slog.New(slog.NewTextHandler(t.Output(), nil)),
		Users: []User{{Name: "system:serviceaccount:kubevirt:kubevirt-handler"},
			{Name: NodeUser(testNode)}, {Name: SchedulerUser}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start to ready: %v", time.Since(begin).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cp.Stop(context.Background())
		}
	})
	pids := []int{cp.etcd.proc.PID(), cp.apiserver.proc.PID()}
	server := strings.TrimPrefix(cp.Server(), "https://")
	nsPath := cp.NetNSPath()
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(cp.etcdURL, "http://"), time.Second); err == nil {
		c.Close()
		t.Errorf("etcd answers at %s in the host's namespace", cp.etcdURL)
	}

	cs, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		t.Fatalf("/readyz: %q, %v", body, err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if v.Major != "1" || v.Minor == "" {
		t.Errorf("server version %q, major %q, minor %q: kube-apiserver not built by build.sh (no -ldflags)?", v.GitVersion, v.Major, v.Minor)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "clusterlite-test"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	// The kubeconfig file reaches the same server as the admin.
	kc, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	kcs, err := kubernetes.NewForConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kcs.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("get namespace through the kubeconfig: %v", err)
	}
	// The aggregation layer's client CA is published for aggregated API
	// servers.
	auth, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get extension-apiserver-authentication: %v", err)
	}
	frontProxyCA, err := os.ReadFile(filepath.Join(state, "pki", "front-proxy-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := auth.Data["requestheader-client-ca-file"]; got != string(frontProxyCA) {
		t.Errorf("requestheader-client-ca-file = %q, want the front-proxy CA", got)
	}
	if got := auth.Data["requestheader-allowed-names"]; got != `["`+FrontProxyClientName+`"]` {
		t.Errorf("requestheader-allowed-names = %s", got)
	}

	t.Run("aggregation", func(t *testing.T) { checkAggregation(ctx, t, cp, cs) })
	if got := hostNetwork(t); got != hostNet {
		t.Errorf("the host's network changed while the control plane ran:\nbefore:\n%s\nduring:\n%s", hostNet, got)
	}

	// An extra user authenticates as itself, by REST config and kubeconfig.
	const user = "system:serviceaccount:kubevirt:kubevirt-handler"
	for name, cfg := range map[string]func() (*rest.Config, error){
		"RESTConfigFor": func() (*rest.Config, error) { return cp.RESTConfigFor(user), nil },
		"KubeconfigFor": func() (*rest.Config, error) { return clientcmd.BuildConfigFromFlags("", cp.KubeconfigFor(user)) },
	} {
		c, err := cfg()
		if err != nil || c == nil {
			t.Fatalf("%s: %v", name, err)
		}
		ucs, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		review, err := ucs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: self subject review: %v", name, err)
		}
		if got := review.Status.UserInfo.Username; got != user {
			t.Errorf("%s authenticates as %q, want %q", name, got, user)
		}
		if !slices.Contains(review.Status.UserInfo.Groups, "system:serviceaccounts:kubevirt") {
			t.Errorf("%s groups %v, want system:serviceaccounts:kubevirt", name, review.Status.UserInfo.Groups)
		}
	}
	t.Run("node and scheduler", func(t *testing.T) { checkNodeAndScheduler(ctx, t, cp, ns.Name) })
	if cp.RESTConfigFor("nobody") != nil {
		t.Error("RESTConfigFor an unknown user is not nil")
	}

	// A process started next to the control plane is stopped by Stop.
	sleeper, err := cp.StartProcess("sleeper", "/bin/sleep", []string{"600"})
	if err != nil {
		t.Fatal(err)
	}
	pids = append(pids, sleeper.PID())

	begin = time.Now()
	err = cp.Stop(ctx)
	stopped = true
	t.Logf("Stop: %v", time.Since(begin).Round(time.Millisecond))
	if err != nil {
		t.Errorf("stop: %v", err)
	}
	for _, pid := range pids {
		if m := procfstest.AwaitGroupGone(t, pid, 2*time.Second); len(m) != 0 {
			t.Errorf("processes %v left after Stop", m)
		}
	}
	select {
	case <-sleeper.Done():
	default:
		t.Error("the started process is not reported done after Stop")
	}
	if c, err := net.DialTimeout("tcp", server, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Stop", server)
	}
	awaitGone(t, nsPath, 5*time.Second)
	if got := hostNetwork(t); got != hostNet {
		t.Errorf("the host's network changed after the control plane:\nbefore:\n%s\nafter:\n%s", hostNet, got)
	}
	if err := cp.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// hostNetwork is the host namespace's addresses, routes and rules.
func hostNetwork(t *testing.T) string {
	t.Helper()
	s, err := netsnap.Take(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// awaitGone waits up to d for path (a namespace's file under /proc, whose
// thread the runtime ends just after Stop) to disappear.
func awaitGone(t *testing.T, path string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there %v after Stop", path, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
