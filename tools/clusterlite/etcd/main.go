// Command etcd runs the etcd server from go.etcd.io/etcd/server/v3, built
// as a standalone binary so that pkg/clusterlite can start a real etcd on
// loopback without any downloaded release archive.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
