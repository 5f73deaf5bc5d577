package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/presenced/presenced/internal/presencedtest"
)

// apiKey is the nodes' API key in the scrape test: with one, /metrics needs
// it, and Prometheus sends it as docs/operations.md says.
const apiKey = "scrape-test-key"

// TestPrometheusScrape runs the real Prometheus with the shipped rules
// against two nodes on one redis-server, stops Redis, and waits for the
// Redis alert to go pending.
func TestPrometheusScrape(t *testing.T) {
	bin := lookTool(t, "prometheus", "prometheus")
	redis := startRedis(t)
	nodes := startNodes(t, redis, 2, "-api-key", apiKey)
	require.Equal(t, http.StatusUnauthorized, status(nodes[0].URL+"/metrics"), "/metrics without the key")
	prom := startPrometheus(t, bin, nodes)

	prom.waitFor(t, "both nodes scraped, Redis up on both", `count(up{job="presenced"} == 1) == 2 and count(presenced_cluster_redis_up == 1) == 2`)
	// A clock keeping up makes one step a tick, what the ring alert counts
	// on: the steps between two samples 10 s apart (not rate(), which reads
	// low while Prometheus has scraped for less than its window), with room
	// for the samples' timing.
	const stepsPerTick = `(presenced_ring_step_seconds_count - presenced_ring_step_seconds_count offset 10s) / 10 * presenced_ring_tick_seconds`
	prom.waitFor(t, "one step a tick on both nodes", `count(0.7 < `+stepsPerTick+` < 1.3) == 2`)
	t.Logf("ring steps per tick: %s", prom.query(t, stepsPerTick))
	prom.waitFor(t, "the recording rules evaluated", `count(presenced:ring_steps_per_tick:rate1m) == 2`)

	redis.stop()
	prom.waitFor(t, "Redis down seen on both nodes", `count(presenced_cluster_redis_up == 0) == 2`)
	require.Eventually(t, func() bool {
		return prom.alerts(t, "PresencedRedisDown", "pending") == 2
	}, wait, 200*time.Millisecond, "PresencedRedisDown pending for both nodes; alerts: %s", prom.get(t, "/api/v1/alerts"))
	for _, n := range nodes {
		require.Equal(t, http.StatusServiceUnavailable, status(n.URL+"/readyz"), "%s not ready without Redis", n.URL)
	}
}

// prometheus is a Prometheus server of the test's own.
type prometheus struct {
	url string
}

// startPrometheus runs bin on a free loopback port with the shipped rules,
// scraping nodes and evaluating the rules every second, until the test ends.
func startPrometheus(t *testing.T, bin string, nodes []*presencedtest.Process) *prometheus {
	t.Helper()
	rules, err := filepath.Abs(rulesFile)
	require.NoError(t, err)
	var targets []string
	for _, n := range nodes {
		targets = append(targets, fmt.Sprintf("%q", n.Addr))
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "api-key")
	require.NoError(t, os.WriteFile(key, []byte(apiKey+"\n"), 0o600))
	config := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: presenced
    authorization:
      type: apikey
      credentials_file: %q
    static_configs:
      - targets: [%s]
`, rules, key, strings.Join(targets, ", "))), 0o644))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	out := &presencedtest.SyncBuffer{}
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus output:\n%s", out)
		}
	})
	p := &prometheus{url: "http://" + addr}
	require.Eventually(t, func() bool {
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", out)
		default:
		}
		return status(p.url+"/-/ready") == http.StatusOK
	}, wait, 50*time.Millisecond, "prometheus ready")
	return p
}

// get returns the body of a GET of path.
func (p *prometheus) get(t *testing.T, path string) string {
	t.Helper()
	res, err := http.Get(p.url + path)
	require.NoError(t, err)
	defer res.Body.Close()
	var b strings.Builder
	_, err = fmt.Fprint(&b, jsonBody(t, res))
	require.NoError(t, err)
	return b.String()
}

// jsonBody decodes an API answer and fails t unless its status is success.
func jsonBody(t *testing.T, res *http.Response) map[string]any {
	t.Helper()
	var body map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	require.Equal(t, "success", body["status"], "%v", body)
	return body
}

// query returns the result of an instant query, as JSON.
func (p *prometheus) query(t *testing.T, q string) string {
	t.Helper()
	res, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := json.Marshal(jsonBody(t, res)["data"])
	require.NoError(t, err)
	return string(data)
}

// waitFor waits until the query q has a result.
func (p *prometheus) waitFor(t *testing.T, what, q string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return !strings.Contains(p.query(t, q), `"result":[]`)
	}, wait, 200*time.Millisecond, "%s: %s", what, q)
}

// alerts counts the alerts named name in state.
func (p *prometheus) alerts(t *testing.T, name, state string) int {
	t.Helper()
	res, err := http.Get(p.url + "/api/v1/alerts")
	require.NoError(t, err)
	defer res.Body.Close()
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	n := 0
	for _, a := range body.Data.Alerts {
		if a.Labels["alertname"] == name && a.State == state {
			n++
		}
	}
	return n
}
