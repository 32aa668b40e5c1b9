// etcd for lastcall's test cluster: the upstream etcd server's own main, built from the Go module
// proxy (go.etcd.io/etcd/server/v3), so no release archive has to be downloaded.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
