package clusterlite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// seenRequest is what the aggregated test server saw of a proxied request.
type seenRequest struct {
	clientCN string
	user     string
	groups   []string
}

// aggregatedIP is the test server's address: Endpoints reject loopback,
// so it goes on the control plane's namespace's lo, inside the service
// range as virt-api's does.
var aggregatedIP = net.IPv4(10, 254, 0, 20)

// checkAggregation registers an APIService backed by a TLS server in this
// test, listening in the control plane's network namespace, serving a
// certificate of cp.IssueServingCert and trusting only the requestheader
// CA the API server publishes, and checks that a request for the group
// through the API server reaches it as the admin user.
func checkAggregation(ctx context.Context, t *testing.T, cp *ControlPlane, cs kubernetes.Interface) {
	ip := aggregatedIP
	if err := cp.AddAddress(ctx, ip); err != nil {
		t.Fatal(err)
	}
	const ns, svcName, group, version = "default", "clusterlite-agg", "test.clusterlite.io", "v1"
	certPEM, keyPEM, err := cp.IssueServingCert([]string{svcName + "." + ns + ".svc"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	if !clientCAs.AppendCertsFromPEM([]byte(auth.Data["requestheader-client-ca-file"])) {
		t.Fatal("no requestheader-client-ca-file in extension-apiserver-authentication")
	}

	var mu sync.Mutex
	var seen []seenRequest
	mux := http.NewServeMux()
	mux.HandleFunc("/apis/"+group+"/"+version, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, seenRequest{
			clientCN: r.TLS.PeerCertificates[0].Subject.CommonName,
			user:     r.Header.Get("X-Remote-User"),
			groups:   r.Header.Values("X-Remote-Group"),
		})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: group + "/" + version,
		})
	})
	l, err := cp.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
	}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	port := l.Addr().(*net.TCPAddr).Port

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(int32(port))}}},
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service: %v", err)
	}
	// No endpoints controller runs: the test writes the Endpoints itself.
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: ns},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: ip.String()}},
			Ports:     []corev1.EndpointPort{{Port: int32(port)}},
		}},
	}
	if _, err := cs.CoreV1().Endpoints(ns).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create endpoints: %v", err)
	}
	dyn, err := dynamic.NewForConfig(cp.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": version + "." + group},
		"spec": map[string]any{
			"group":                group,
			"version":              version,
			"service":              map[string]any{"namespace": ns, "name": svcName, "port": int64(443)},
			"caBundle":             base64.StdEncoding.EncodeToString(cp.CAPEM()),
			"groupPriorityMinimum": int64(1000),
			"versionPriority":      int64(15),
		},
	}}
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	if _, err := dyn.Resource(gvr).Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create APIService: %v", err)
	}

	begin := time.Now()
	var last error
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/" + group + "/" + version).DoRaw(ctx)
		if err == nil {
			var list metav1.APIResourceList
			if err := json.Unmarshal(body, &list); err != nil || list.GroupVersion != group+"/"+version {
				t.Fatalf("answer through the aggregator: %s (%v)", body, err)
			}
			break
		}
		last = err
		if time.Since(begin) > 30*time.Second {
			t.Fatalf("/apis/%s/%s not served through the aggregator within 30s: %v", group, version, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("APIService served after %v", time.Since(begin).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	want := fmt.Sprintf("client %s, user %s in system:masters", FrontProxyClientName, AdminUser)
	for _, s := range seen {
		if s.user == AdminUser {
			if s.clientCN != FrontProxyClientName || !slices.Contains(s.groups, "system:masters") {
				t.Errorf("aggregated server saw client %s, user %s, groups %v; want %s", s.clientCN, s.user, s.groups, want)
			}
			return
		}
	}
	t.Errorf("aggregated server never saw the admin's request (saw %d requests: %+v); want %s", len(seen), seen, want)
}
