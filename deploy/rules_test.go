package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestPromtoolRules checks the rules with the real promtool and runs their
// unit tests, which feed series to every alert and expect it to fire or to
// stay quiet.
func TestPromtoolRules(t *testing.T) {
	promtool := lookTool(t, "promtool", "prometheus")
	out, err := run(promtool, "check", "rules", rulesFile)
	require.NoError(t, err)
	assert.Contains(t, out, "SUCCESS")
	out, err = run(promtool, "test", "rules", "prometheus/presenced-rules.test.yml")
	require.NoError(t, err)
	assert.Contains(t, out, "SUCCESS")
}

// TestEveryAlertIsTested reads the rules' unit tests: each alert must be
// expected to fire in one of them and to stay quiet in one.
func TestEveryAlertIsTested(t *testing.T) {
	var tests struct {
		RuleFiles          []string `json:"rule_files"`
		EvaluationInterval string   `json:"evaluation_interval"`
		Tests              []struct {
			Name          string
			Interval      string
			InputSeries   []struct{ Series, Values string } `json:"input_series"`
			AlertRuleTest []struct {
				EvalTime  string `json:"eval_time"`
				Alertname string
				ExpAlerts []struct {
					ExpLabels      map[string]string `json:"exp_labels"`
					ExpAnnotations map[string]string `json:"exp_annotations"`
				} `json:"exp_alerts"`
			} `json:"alert_rule_test"`
			PromqlExprTest []struct {
				Expr       string
				EvalTime   string `json:"eval_time"`
				ExpSamples []struct {
					Labels string
					Value  float64
				} `json:"exp_samples"`
			} `json:"promql_expr_test"`
		}
	}
	raw, err := os.ReadFile("prometheus/presenced-rules.test.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(raw, &tests))
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		// promtool wants exactly the alerts expected, so an instance of the
		// input series that none of them names is one checked to be quiet.
		instances := map[string]bool{}
		for _, s := range tc.InputSeries {
			if m := regexp.MustCompile(`instance="([^"]*)"`).FindStringSubmatch(s.Series); m != nil {
				instances[m[1]] = true
			}
		}
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
			if len(a.ExpAlerts) < len(instances) {
				quiet[a.Alertname] = true
			}
		}
	}
	qs, _ := queries(t)
	n := 0
	for where := range qs {
		name, ok := strings.CutPrefix(where, "alert ")
		if !ok {
			continue
		}
		n++
		assert.True(t, fires[name], "no test expects %s to fire", name)
		assert.True(t, quiet[name], "no test expects %s to stay quiet", name)
	}
	assert.GreaterOrEqual(t, n, 10, "alerts")
}
