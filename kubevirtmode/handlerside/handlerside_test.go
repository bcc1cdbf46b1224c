package handlerside

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"
)

// TestNotifyPipeIsTheNonRootLaunchersOwn checks that the pod's
// domain-notify-pipe.sock belongs to a non-root VMI's launcher user
// (status.runtimeUser, 107 without the Root feature gate), as virt-handler
// hands it over, and stays root's for a root VMI.
func TestNotifyPipeIsTheNonRootLaunchersOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("handing a socket to another user needs root")
	}
	for _, user := range []uint64{107, 0} {
		dir, err := os.MkdirTemp("/tmp", "hs-") // short: a socket path has a limit
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		vmi := &v1.VirtualMachineInstance{}
		vmi.Name, vmi.Namespace, vmi.Status.RuntimeUser = "a", "ns", user
		n, err := StartNotify(dir, dir, vmi)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(dir, NotifyPipe))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); uint64(st.Uid) != user || uint64(st.Gid) != user {
			t.Errorf("runtimeUser %d: the pipe is %d:%d's", user, st.Uid, st.Gid)
		}
		if err := n.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
}
