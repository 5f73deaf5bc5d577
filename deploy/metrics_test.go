package deploy

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

const (
	rulesFile = "prometheus/presenced-rules.yml"
	dashboard = "grafana/presenced.json"
)

// ruleGroups is the rules file's shape.
type ruleGroups struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Record, Alert, Expr, For string
			Labels, Annotations      map[string]string
		}
	}
}

// dashboardFile is the part of the dashboard's JSON this test reads.
type dashboardFile struct {
	UID        string
	Templating struct {
		List []struct {
			Name, Type, Definition string
			Query                  any
		}
	}
	Panels []struct {
		ID         int
		Type       string
		Title      string
		Datasource struct{ Type, UID string }
		GridPos    struct{ H, W, X, Y int }
		Targets    []struct {
			RefID      string `json:"refId"`
			Expr       string
			Datasource struct{ Type, UID string }
		}
	}
}

// queries are the PromQL of the rules and of the dashboard, by where from,
// and the names the rules record.
func queries(t *testing.T) (map[string]string, map[string]bool) {
	t.Helper()
	qs, recorded := map[string]string{}, map[string]bool{}
	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var rules ruleGroups
	require.NoError(t, yaml.UnmarshalStrict(raw, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
				qs["record "+r.Record] = r.Expr
			} else {
				qs["alert "+r.Alert] = r.Expr
			}
		}
	}
	raw, err = os.ReadFile(dashboard)
	require.NoError(t, err)
	var d dashboardFile
	require.NoError(t, json.Unmarshal(raw, &d))
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs["panel "+p.Title+" "+tg.RefID] = tg.Expr
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_]+\)$`)
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			m := labelValues.FindStringSubmatch(v.Definition)
			require.NotNil(t, m, "variable %s: want label_values(metric, label), got %q", v.Name, v.Definition)
			qs["variable "+v.Name] = m[1]
		}
	}
	return qs, recorded
}

// scrape returns the series of a /metrics page: each sample's name and labels.
func scrape(t *testing.T, url string) map[string][]map[string]string {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	series := map[string][]map[string]string{}
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? `)
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	sc := bufio.NewScanner(io.Reader(res.Body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sample.FindStringSubmatch(line)
		require.NotNil(t, m, "a sample line: %q", line)
		labels := map[string]string{}
		for _, l := range label.FindAllStringSubmatch(m[3], -1) {
			labels[l[1]] = l[2]
		}
		series[m[1]] = append(series[m[1]], labels)
	}
	require.NoError(t, sc.Err())
	return series
}

// prometheusOwn are series Prometheus makes itself, for every target.
var prometheusOwn = []string{"up"}

// TestQueriesNameExportedMetrics scrapes two real nodes on one Redis, with a
// webhook, and checks every metric a rule or a panel names is on their
// /metrics before anything happened, with the label values it asks for: a
// query is never empty because nothing happened yet.
func TestQueriesNameExportedMetrics(t *testing.T) {
	nodes := startNodes(t, startRedis(t), 2)
	qs, recorded := queries(t)
	require.Greater(t, len(qs), 30, "queries found")
	for _, n := range nodes {
		series := scrape(t, n.URL+"/metrics")
		used := 0
		for where, q := range qs {
			sels, err := selectors(q)
			require.NoError(t, err, "%s: %s", where, q)
			require.NotEmpty(t, sels, "%s names no metric: %s", where, q)
			for _, s := range sels {
				used++
				if recorded[s.name] || slices.Contains(prometheusOwn, s.name) {
					continue
				}
				got, ok := series[s.name]
				if !assert.True(t, ok, "%s: %s is not on %s/metrics", where, s.name, n.URL) {
					continue
				}
				assert.True(t, slices.ContainsFunc(got, func(l map[string]string) bool {
					for k, v := range s.labels {
						if l[k] != v {
							return false
						}
					}
					return true
				}), "%s: no series %s%v on %s/metrics yet: %v", where, s.name, s.labels, n.URL, got)
			}
		}
		t.Logf("%s: %d queries, %d selectors, %d series names on /metrics", n.URL, len(qs), used, len(series))
	}
}

// TestDashboardShape checks what Grafana needs of each panel: a unique id,
// a place on the 24-column grid, the data source variable, and queries.
func TestDashboardShape(t *testing.T) {
	raw, err := os.ReadFile(dashboard)
	require.NoError(t, err)
	var d dashboardFile
	require.NoError(t, json.Unmarshal(raw, &d))
	assert.Equal(t, "presenced", d.UID)
	ids := map[int]bool{}
	for _, p := range d.Panels {
		assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
		assert.True(t, p.GridPos.X >= 0 && p.GridPos.W > 0 && p.GridPos.X+p.GridPos.W <= 24 && p.GridPos.H > 0, "%s: %+v", p.Title, p.GridPos)
		if p.Type == "row" {
			continue
		}
		assert.Equal(t, "${datasource}", p.Datasource.UID, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			assert.NotEmpty(t, tg.Expr, p.Title)
			assert.Equal(t, "${datasource}", tg.Datasource.UID, p.Title)
		}
	}
	assert.Greater(t, len(ids), 15)
}
