// Package controller is a local KubeVirt VirtualMachine controller: it
// reconciles VMs by runStrategy (Always, RerunOnFailure, Manual, Halted,
// Once), makes a VirtualMachineInstance from the template with a fresh UID
// for every start, runs one virt-launcher process per VMI, reads the
// launcher's phase events, and applies pkg/backoff's crash-loop policy
// before every restart.
//
// # Shape
//
// One worker goroutine owns each VM (worker.go; its jobs are one file
// each: reconcile.go, start.go, stop.go, apply.go, manual.go, status.go,
// flush.go, timers.go). Everything that changes a VM — a launcher event,
// a launcher exit, a timer, a command from a second terminal, an edited
// manifest — arrives on the worker's channels, and
// after each the worker settles: it reconciles, then persists, publishes a
// Snapshot, reports Events and answers commands, in that order, so that an
// answer or an event never shows a state that is not on disk yet. No lock
// guards a VM's record; readers get immutable Snapshots. Every wait uses
// the injected clock (k8s.io/utils/clock), and every random draw comes from
// a per-VM source seeded by --seed and the VM's key, so jitter is
// reproducible however VMs interleave.
//
// # Launchers are processes, like pods
//
// Launchers run through pkg/launchrt, the runtime the node agent shares
// (bare processes here; unit tests use a fake one). A launcher runs in its
// own process group with stdout (JSON phase events) and stderr in files of
// its VMI's folder, not pipes: a SIGKILL of the controller does not take
// the launcher down, and a restarted controller adopts it by PID (checked
// against the process start time so a reused PID is never mistaken for
// it) and goes on reading its events file (launcherapi.Follower). A launcher
// that exits without a final Succeeded or Failed event crashed; its VMI
// becomes Failed with reason LauncherCrashed, as KubeVirt does when a pod
// dies. The controller jitters the QEMU start timeout itself (240 s +
// uniform whole seconds in [0, 120 s), both scaled) and passes jitter 0 to
// the launcher, as KubeVirt's controller does when it renders the pod.
//
// # State folder
//
// Each VM's Record (the VirtualMachine with its status in KubeVirt's JSON
// shape, the current VMI, the live launcher, the exact retry time) is one
// JSON file replaced atomically (a spare file rewritten in place, fsync,
// then the two names exchanged, so saving allocates no inode), so a
// controller killed with SIGKILL and started again neither retries early
// nor forgets the failure count. See Store for the folder layout. A record
// that cannot be read stops the controller before it starts anything, and
// the file is left as it was.
//
// # Talking to a running controller
//
// stop, start, restart and status from a second terminal go through a unix
// socket in the state folder (one JSON request and one JSON answer per
// connection). A socket rather than command files dropped into the folder,
// because the caller needs a synchronous answer — "unknown VM", "already
// running", the status after the stop took effect — and an exit code that
// reflects it, without polling for a result file, and because a dead
// controller shows up at once as a refused connection instead of a command
// file nobody will ever read. The controller holds an flock on
// controller.lock, so two controllers never share a folder and a stale
// socket file can be removed safely.
//
// Manual operations follow virtctl: stop turns the run strategy into Halted
// (Manual gets a stop request instead) and works with no live VMI, in the
// middle of a crash loop; start turns Halted into Always (other strategies
// get a start request); restart stops the live VMI and starts a new one.
// All three clear the start-failure record, as KubeVirt promised when it
// introduced the backoff.
//
// # Manifests are the user's "kubectl apply"
//
// The controller polls its manifest files; when one changes it takes the
// new spec (generation + 1) and keeps the status, so removing a fault
// annotation lets the next attempt start clean while the failure count and
// the backoff stay as they were. A stop or start changes the run strategy
// only in the controller's copy, until the manifest file itself changes.
//
// # A thousand crash-looping VMs
//
// Retries fire on time when the controller's own work per launch stays
// small, so saving a record allocates no inode (Store.Write) and at most
// one thread per CPU creates launcher files at once (createSlots); see
// both for the kernel behaviour that made them necessary.
package controller
