package launcher

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crashloop-harness/crashloop/pkg/launcherapi"
)

func TestRunningDetailsPorts(t *testing.T) {
	if got := runningDetails(nil); got != nil {
		t.Errorf("no forwarded ports: want no details, got %v", got)
	}
	got := runningDetails([]launcherapi.PortForward{{Interface: "default", Name: "http", Protocol: "TCP", GuestPort: 80, HostAddress: "127.0.0.1", HostPort: 40123}})
	want := map[string]any{"ports": []map[string]any{{"interface": "default", "name": "http", "protocol": "TCP",
		"guestPort": 80, "hostIP": "127.0.0.1", "hostPort": 40123}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Running details (-want +got):\n%s", diff)
	}
}
