// Package monitor is the KubeVirt mode of the launcher: the compute
// container's virt-launcher-monitor of a KubeVirt v1.6.0 launcher pod. It
// accepts the command line virt-controller renders (Flags), serves
// KubeVirt's own generated kubevirt.cmd.v1.Cmd and CmdInfo services on
// <share-dir>/sockets/launcher-init-sock (renamed to launcher-sock when
// ready), takes the VMI from SyncVirtualMachine and runs it through the
// repository's launcher pipeline (virt-launcher → virt-launcher-convert →
// virt-launcher-libvirt) as a child process, whose launcherapi.Event lines
// it maps to virtwrap/api.Domain states and sends with KubeVirt's notify
// client to <share-dir>/domain-notify-pipe.sock.
//
// What each RPC does, and where it differs from KubeVirt's launcher, is in
// the README's "KubeVirt mode" section.
package monitor
