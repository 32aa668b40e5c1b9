// kt: the test cluster's pause image and timestamp helper (std lib only, static; no registry is
// reachable, so the sandbox image is built here).
//
//	kt | kt pause              like Kubernetes' pause container: wait for SIGINT/SIGTERM, reap children
//	kt app NAME TERM_DELAY_MS  log "start", serve HTTP on $PORT, on SIGTERM log "got-terminated",
//	                           wait TERM_DELAY_MS, log "exit"
//	kt stamp NAME EVENT [MS]   for lifecycle hooks: log EVENT-begin, sleep MS, log EVENT-end
//
// Every line is "<unix-ms> <name> <event>" on stdout and appended to $LOGFILE (default /log/events).
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func logf(name, ev string) {
	line := fmt.Sprintf("%d %s %s\n", time.Now().UnixMilli(), name, ev)
	os.Stdout.WriteString(line)
	if f, err := os.OpenFile(getenv("LOGFILE", "/log/events"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0644); err == nil {
		f.WriteString(line)
		f.Close()
	}
}

func getenv(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func pause() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				if pid, _ := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}

func app(name string, delay int) {
	logf(name, "start")
	if port := os.Getenv("PORT"); port != "" {
		go http.ListenAndServe(":"+port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s ok\n", name)
		}))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	s := <-sig
	logf(name, "got-"+s.String())
	time.Sleep(time.Duration(delay) * time.Millisecond)
	logf(name, "exit")
	os.Exit(0)
}

func main() {
	if len(os.Args) < 2 {
		os.Args = append(os.Args, "pause")
	}
	switch os.Args[1] {
	case "pause":
		pause()
	case "app":
		delay, _ := strconv.Atoi(os.Args[3])
		app(os.Args[2], delay)
	case "stamp":
		name, ev := os.Args[2], os.Args[3]
		logf(name, ev+"-begin")
		if len(os.Args) > 4 {
			ms, _ := strconv.Atoi(os.Args[4])
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		logf(name, ev+"-end")
	default:
		fmt.Fprintf(os.Stderr, "kt: unknown command %q (pause, app, stamp)\n", os.Args[1])
		os.Exit(2)
	}
}
