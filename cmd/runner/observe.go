package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// checkLogFormat accepts the values of --log-format ("" is text, the default).
func checkLogFormat(format string) error {
	switch format {
	case "", "text", "json":
		return nil
	}
	return fmt.Errorf("--log-format %s is not one of text, json", clip(format))
}

// checkMetricsAddr accepts an empty --metrics-addr (no metrics) or host:port, such as
// :9090 or 127.0.0.1:9090.
func checkMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--metrics-addr %s is not host:port (such as :9090 or 127.0.0.1:9090)", clip(addr))
	}
	return nil
}

// newLogger returns the logger of --log-format and --log-level, writing to w: text
// for people (logfmt-like key=value), json for log shippers (one object a line,
// keys time, level, msg and the attributes).
func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// metricsShutdown bounds how long a stopping runner waits for a scrape in progress.
const metricsShutdown = 5 * time.Second

// serveMetrics serves handler at addr's /metrics until stop is called. It listens
// before returning, so that a taken port fails the command at start rather than in
// the log.
func serveMetrics(addr string, handler http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdown)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
