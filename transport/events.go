package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/presenced/presenced/presence"
	"github.com/presenced/presenced/webhook"
)

// The log of edges, read back by cursor (GET /api/events): what a backend
// that missed webhooks reads to catch up. It carries what a webhook
// carries, invisible users' truth included, so it answers only the API key.

// Limits of GET /api/events?limit=.
const (
	DefaultEventsLimit = 100
	MaxEventsLimit     = 1000
)

// maxCursor bounds ?after=, in bytes: every cursor the engines make is far
// shorter.
const maxCursor = 4096

func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !h.trusted() {
		writeError(w, http.StatusForbidden, "off without an API key: the log tells what invisible users did (start the server with one)")
		return
	}
	q := r.URL.Query()
	limit := DefaultEventsLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxEventsLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 1 to %d", MaxEventsLimit))
			return
		}
		limit = n
	}
	after := q.Get("after")
	if len(after) > maxCursor {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("after is longer than any cursor (%d bytes at most)", maxCursor))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), apiTimeout)
	defer cancel()
	edges, next, err := h.node.Edges(ctx, after, limit)
	var gone *presence.CursorError
	switch {
	case errors.As(err, &gone):
		writeJSON(w, http.StatusGone, struct {
			Error  string `json:"error"`
			Oldest string `json:"oldest"`
		}{gone.Error() + ": take a snapshot (GET /api/presence) and read on from its cursor", gone.Oldest})
		return
	case errors.Is(err, presence.ErrNoLog):
		writeError(w, http.StatusNotImplemented, "this server's engine keeps no log of edges")
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "events unavailable: "+err.Error())
		return
	}
	events := make([]webhook.Event, len(edges))
	for i, e := range edges {
		events[i] = webhook.EventOf(e)
	}
	writeJSON(w, http.StatusOK, struct {
		Events []webhook.Event `json:"events"`
		Next   string          `json:"next"`
	}{events, next})
}

// logCollector reports the log's length and the age of its oldest edge at
// each scrape, asking the engine then: in a cluster every node reports the
// same log, the cluster's.
type logCollector struct {
	m              *metrics
	length, oldest *prometheus.Desc
}

func newLogCollector(m *metrics, namespace string, labels prometheus.Labels) *logCollector {
	return &logCollector{
		m: m,
		length: prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "events_log_length"),
			"Edges the log of edges keeps for GET /api/events (the cluster's, on every node).", nil, labels),
		oldest: prometheus.NewDesc(prometheus.BuildFQName(namespace, "", "events_log_oldest_age_seconds"),
			"Age of the oldest edge the log keeps: how long a backend may be gone and still catch up by replay (0 when empty).", nil, labels),
	}
}

func (c *logCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.length; ch <- c.oldest }

// logStatsTimeout bounds the engine's answer within a scrape.
const logStatsTimeout = 2 * time.Second

func (c *logCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.m.hub.Load()
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), logStatsTimeout)
	defer cancel()
	n, oldest, err := h.node.LogStats(ctx)
	if err != nil {
		return // no log, or the engine cannot tell now: no sample rather than a wrong one
	}
	age := 0.0
	if !oldest.IsZero() {
		age = max(0, time.Since(oldest).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.length, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
}
