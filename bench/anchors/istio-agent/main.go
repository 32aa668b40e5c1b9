// istio-agent runs Istio's own Envoy lifecycle code (istio.io/istio/pkg/envoy: NewProxy, NewAgent,
// Agent.Run) over a real Envoy, the way pilot-agent wires it for a sidecar, so the benchmarks
// measure Istio's real termination sequence: drain_listeners?inboundonly&graceful, then either
// sleep terminationDrainDuration or (exit-on-zero) sleep minDrainDuration and poll
// downstream_cx_active every 1 s, then kill Envoy. Only the flags the benchmark needs are exposed;
// every other value is pilot-agent's default.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"istio.io/istio/pkg/envoy"
)

func main() {
	binary := flag.String("envoy", "envoy", "Envoy binary")
	config := flag.String("config", "", "Envoy bootstrap (admin on 127.0.0.1:<admin-port>)")
	adminPort := flag.Int("admin-port", 15000, "Envoy admin port (as in the bootstrap)")
	concurrency := flag.Int("concurrency", 2, "Envoy worker threads")
	// pilot-agent defaults: drainDuration 45s, terminationDrainDuration 5s, MINIMUM_DRAIN_DURATION 5s.
	drain := flag.Duration("drain-duration", 45*time.Second, "ProxyConfig.drainDuration (Envoy --drain-time-s)")
	terminationDrain := flag.Duration("termination-drain", 5*time.Second, "TERMINATION_DRAIN_DURATION")
	minDrain := flag.Duration("min-drain", 5*time.Second, "MINIMUM_DRAIN_DURATION")
	exitOnZero := flag.Bool("exit-on-zero", false, "EXIT_ON_ZERO_ACTIVE_CONNECTIONS")
	logLevel := flag.String("log-level", "warning", "Envoy log level")
	flag.Parse()
	if *config == "" {
		fmt.Fprintln(os.Stderr, "istio-agent: --config is required")
		os.Exit(2)
	}

	proxy := envoy.NewProxy(envoy.ProxyConfig{
		LogLevel:      *logLevel,
		NodeIPs:       []string{"127.0.0.1"},
		Sidecar:       true,
		BinaryPath:    *binary,
		ConfigPath:    *config,
		AdminPort:     int32(*adminPort),
		DrainDuration: durationpb.New(*drain),
		Concurrency:   int32(*concurrency),
	})
	// Same positional arguments as pilot-agent: status port 15021, Prometheus 15090, no secure ports.
	agent := envoy.NewAgent(proxy, *terminationDrain, *minDrain, "127.0.0.1", *adminPort, 15021, 15090, 0, 0, *exitOnZero)

	// As pkg/cmd.WaitSignalFunc: SIGTERM or SIGINT cancels the context, which starts terminate().
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		cancel()
	}()
	agent.Run(ctx)
}
