// xds-server: a real xDS control plane for lastcall's tests, on go-control-plane's snapshot
// cache. It serves ADS and the per-type services (state of the world and delta) on one gRPC
// port, optionally with mTLS, and takes orders on a small HTTP endpoint on loopback:
//
//	POST /snapshot  {"version":"2","listeners":[…],"routes":[…],"clusters":[…],"unknown_fields":true}
//	                resources in Envoy's JSON; every node gets the snapshot
//	GET  /requests  every DiscoveryRequest / DeltaDiscoveryRequest seen (ACKs and NACKs)
//	GET  /streams   streams opened so far
//
// On start it prints one JSON line: {"xds_port":N,"control_port":M}. Restart = kill it and start
// it again on the same -xds-address.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// allNodes gives every Envoy the same snapshot, whatever its node id.
type allNodes struct{}

func (allNodes) ID(*core.Node) string { return "all" }

type seenRequest struct {
	Stream  int64    `json:"stream"`
	Delta   bool     `json:"delta"`
	TypeURL string   `json:"type_url"`
	Version string   `json:"version_info,omitempty"`
	Nonce   string   `json:"response_nonce,omitempty"`
	Names   []string `json:"resource_names,omitempty"`
	Error   string   `json:"error,omitempty"`
	Node    string   `json:"node,omitempty"`
}

type snapshotOrder struct {
	Version       string            `json:"version"`
	Listeners     []json.RawMessage `json:"listeners"`
	Routes        []json.RawMessage `json:"routes"`
	Clusters      []json.RawMessage `json:"clusters"`
	UnknownFields bool              `json:"unknown_fields"`
}

// unknownField is field 9999 (varint 1): no Envoy message has it, so only a relay that copies
// bytes it does not understand lets it reach Envoy (counted in server.dynamic_unknown_fields).
func withUnknownField(m proto.Message) {
	r := m.ProtoReflect()
	b := protowire.AppendTag(append([]byte{}, r.GetUnknown()...), 9999, protowire.VarintType)
	r.SetUnknown(protowire.AppendVarint(b, 1))
}

func addUnknownFields(l *listener.Listener) error {
	withUnknownField(l)
	chains := append([]*listener.FilterChain{}, l.FilterChains...)
	if l.DefaultFilterChain != nil {
		chains = append(chains, l.DefaultFilterChain)
	}
	for _, chain := range chains {
		withUnknownField(chain)
		for _, f := range chain.Filters {
			withUnknownField(f)
			manager := &hcm.HttpConnectionManager{}
			if f.GetTypedConfig() == nil || f.GetTypedConfig().MessageIs(manager) == false {
				continue
			}
			if err := f.GetTypedConfig().UnmarshalTo(manager); err != nil {
				return err
			}
			withUnknownField(manager)
			typed, err := anypb.New(manager)
			if err != nil {
				return err
			}
			f.ConfigType = &listener.Filter_TypedConfig{TypedConfig: typed}
		}
	}
	return nil
}

func parseAll[T proto.Message](raw []json.RawMessage, make func() T) ([]types.Resource, error) {
	out := []types.Resource{}
	for _, r := range raw {
		m := make()
		if err := protojson.Unmarshal(r, m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func main() {
	xdsAddress := flag.String("xds-address", "127.0.0.1:0", "gRPC address")
	controlAddress := flag.String("control-address", "127.0.0.1:0", "HTTP control address")
	certFile := flag.String("tls-cert", "", "server certificate (PEM): serve TLS")
	keyFile := flag.String("tls-key", "", "server key (PEM)")
	clientCA := flag.String("client-ca", "", "CA of client certificates (PEM): require mTLS")
	flag.Parse()

	ctx := context.Background()
	snapshots := cache.NewSnapshotCache(true, allNodes{}, nil)
	var mu sync.Mutex
	seen := []seenRequest{}
	streams := 0
	record := func(r seenRequest) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r)
	}
	opened := func(context.Context, int64, string) error {
		mu.Lock()
		defer mu.Unlock()
		streams++
		return nil
	}
	callbacks := server.CallbackFuncs{
		StreamOpenFunc:      opened,
		DeltaStreamOpenFunc: opened,
		StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
			r := seenRequest{Stream: id, TypeURL: req.TypeUrl, Version: req.VersionInfo, Nonce: req.ResponseNonce, Names: req.ResourceNames, Node: req.GetNode().GetId()}
			if req.ErrorDetail != nil {
				r.Error = req.ErrorDetail.Message
			}
			record(r)
			return nil
		},
		StreamDeltaRequestFunc: func(id int64, req *discovery.DeltaDiscoveryRequest) error {
			r := seenRequest{Stream: id, Delta: true, TypeURL: req.TypeUrl, Nonce: req.ResponseNonce, Names: req.ResourceNamesSubscribe, Node: req.GetNode().GetId()}
			if req.ErrorDetail != nil {
				r.Error = req.ErrorDetail.Message
			}
			record(r)
			return nil
		},
	}
	xds := server.NewServer(ctx, snapshots, callbacks)

	var options []grpc.ServerOption
	if *certFile != "" {
		pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			fail("tls: %v", err)
		}
		config := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
		if *clientCA != "" {
			pem, err := os.ReadFile(*clientCA)
			if err != nil {
				fail("client ca: %v", err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			config.ClientCAs = pool
			config.ClientAuth = tls.RequireAndVerifyClientCert
		}
		options = append(options, grpc.Creds(credentials.NewTLS(config)))
	}
	grpcServer := grpc.NewServer(options...)
	discovery.RegisterAggregatedDiscoveryServiceServer(grpcServer, xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(grpcServer, xds)
	routeservice.RegisterRouteDiscoveryServiceServer(grpcServer, xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(grpcServer, xds)

	xdsListener, err := net.Listen("tcp", *xdsAddress)
	if err != nil {
		fail("listen %s: %v", *xdsAddress, err)
	}
	controlListener, err := net.Listen("tcp", *controlAddress)
	if err != nil {
		fail("listen %s: %v", *controlAddress, err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /snapshot", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var order snapshotOrder
		if err := json.Unmarshal(body, &order); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		listeners, err := parseAll(order.Listeners, func() *listener.Listener { return &listener.Listener{} })
		if err == nil && order.UnknownFields {
			for _, l := range listeners {
				if err = addUnknownFields(l.(*listener.Listener)); err != nil {
					break
				}
			}
		}
		routes, err2 := parseAll(order.Routes, func() *route.RouteConfiguration { return &route.RouteConfiguration{} })
		clusters, err3 := parseAll(order.Clusters, func() *cluster.Cluster { return &cluster.Cluster{} })
		for _, e := range []error{err, err2, err3} {
			if e != nil {
				http.Error(w, e.Error(), 400)
				return
			}
		}
		snapshot, err := cache.NewSnapshot(order.Version, map[resource.Type][]types.Resource{
			resource.ListenerType: listeners,
			resource.RouteType:    routes,
			resource.ClusterType:  clusters,
		})
		if err == nil {
			err = snapshots.SetSnapshot(ctx, "all", snapshot)
		}
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.WriteHeader(204)
	})
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		json.NewEncoder(w).Encode(seen)
	})
	mux.HandleFunc("GET /streams", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		json.NewEncoder(w).Encode(map[string]int{"streams": streams})
	})
	go func() { _ = http.Serve(controlListener, mux) }()

	fmt.Printf("{\"xds_port\":%d,\"control_port\":%d}\n", xdsListener.Addr().(*net.TCPAddr).Port, controlListener.Addr().(*net.TCPAddr).Port)
	if err := grpcServer.Serve(xdsListener); err != nil {
		fail("serve: %v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "xds-server: "+format+"\n", args...)
	os.Exit(1)
}
