package deploy

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

const (
	chart         = "helm/presenced"
	threeReplicas = "testdata/three-replicas-redis.yaml"
)

// manifests are the objects one helm template rendered, decoded.
type manifests struct {
	deployment *appsv1.Deployment
	service    *corev1.Service
	secret     *corev1.Secret
	configMap  *corev1.ConfigMap
	pdb        *policyv1.PodDisruptionBudget
	ingress    *networkingv1.Ingress
	policy     *networkingv1.NetworkPolicy
	// The Prometheus Operator's objects, whose types this module does not
	// have: their apiVersion and kind are checked, their fields by the tests.
	serviceMonitor, prometheusRule *unstructured.Unstructured
}

// decode splits helm template's output into documents and decodes each into
// its Kubernetes API type, refusing fields the type does not have.
func decode(t *testing.T, rendered string) manifests {
	t.Helper()
	var m manifests
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(rendered, -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		var meta struct{ APIVersion, Kind string }
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		var obj runtime.Object
		switch meta.APIVersion + " " + meta.Kind {
		case "monitoring.coreos.com/v1 ServiceMonitor", "monitoring.coreos.com/v1 PrometheusRule":
			u := &unstructured.Unstructured{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object), "%s:\n%s", meta.Kind, doc)
			if meta.Kind == "ServiceMonitor" {
				m.serviceMonitor = u
			} else {
				m.prometheusRule = u
			}
			continue
		case "networking.k8s.io/v1 Ingress":
			m.ingress = &networkingv1.Ingress{}
			obj = m.ingress
		case "networking.k8s.io/v1 NetworkPolicy":
			m.policy = &networkingv1.NetworkPolicy{}
			obj = m.policy
		case "apps/v1 Deployment":
			m.deployment = &appsv1.Deployment{}
			obj = m.deployment
		case "v1 Service":
			m.service = &corev1.Service{}
			obj = m.service
		case "v1 Secret":
			m.secret = &corev1.Secret{}
			obj = m.secret
		case "v1 ConfigMap":
			m.configMap = &corev1.ConfigMap{}
			obj = m.configMap
		case "policy/v1 PodDisruptionBudget":
			m.pdb = &policyv1.PodDisruptionBudget{}
			obj = m.pdb
		default:
			t.Fatalf("the chart rendered a %s %s this test does not know:\n%s", meta.APIVersion, meta.Kind, doc)
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), obj), "%s %s:\n%s", meta.APIVersion, meta.Kind, doc)
	}
	require.NotNil(t, m.deployment, "no Deployment")
	require.NotNil(t, m.service, "no Service")
	return m
}

// template renders the chart with helm template and the given arguments.
func template(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(helm(t), append([]string{"template", "presenced", chart}, args...)...)
	require.NoError(t, err)
	return out
}

// env is the container's environment: value, or "secret:key" or
// "field:path" for a reference.
func env(t *testing.T, d *appsv1.Deployment) map[string]string {
	t.Helper()
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	vars := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		_, dup := vars[e.Name]
		require.False(t, dup, "%s set twice", e.Name)
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			vars[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom.FieldRef != nil:
			vars[e.Name] = "field:" + e.ValueFrom.FieldRef.FieldPath
		}
	}
	return vars
}

// TestHelmLint lints the chart. Lint reports a template's fail as
// information, not a failure, so the defaults lint clean though they do not
// install (TestChartRefuses).
func TestHelmLint(t *testing.T) {
	for _, values := range [][]string{nil, {"--set", "demo=true"}, {"-f", threeReplicas}} {
		t.Run(strings.Join(append([]string{"values"}, values...), " "), func(t *testing.T) {
			out, err := run(helm(t), append([]string{"lint", "--strict", chart}, values...)...)
			require.NoError(t, err)
			assert.Contains(t, out, "0 chart(s) failed")
		})
	}
}

// TestChartDefaults renders the defaults but for demo=true, the one value
// they need.
func TestChartDefaults(t *testing.T) {
	m := decode(t, template(t, "--set", "demo=true"))
	d := m.deployment
	assert.Equal(t, int32(1), *d.Spec.Replicas)
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	assert.Equal(t, "presenced:devel", c.Image)
	require.NotNil(t, c.LivenessProbe)
	require.NotNil(t, c.ReadinessProbe)
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, "http", c.ReadinessProbe.HTTPGet.Port.String())
	assert.Equal(t, []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}, c.Ports)
	// The server's shutdown takes up to 10 s; the grace period must outlast it.
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	assert.GreaterOrEqual(t, *pod.TerminationGracePeriodSeconds, int64(15))
	assert.Equal(t, int64(65532), *pod.SecurityContext.RunAsUser, "the image's user")
	require.NotNil(t, pod.AutomountServiceAccountToken)
	assert.False(t, *pod.AutomountServiceAccountToken, "no service-account token in the pods")
	require.NotNil(t, pod.EnableServiceLinks)
	assert.False(t, *pod.EnableServiceLinks, "no PRESENCED_SERVICE_HOST and the like from a Service's name")

	vars := env(t, d)
	assert.Equal(t, map[string]string{
		"PRESENCED_ADDR":           ":8080",
		"PRESENCED_NODE":           "field:metadata.name",
		"PRESENCED_JWT_SECRET":     "secret:jwt-secret",
		"PRESENCED_API_KEY":        "secret:api-key",
		"PRESENCED_WEBHOOK_SECRET": "secret:webhook-secret",
		"PRESENCED_WEBHOOK":        "secret:webhook-url",
		"PRESENCED_REDIS":          "secret:redis-url",
	}, vars, "no setting but the chart's own is passed by default")

	ann := d.Spec.Template.Annotations
	assert.Equal(t, map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   "8080",
		"prometheus.io/path":   "/metrics",
	}, ann)

	assert.Equal(t, d.Spec.Selector.MatchLabels, m.service.Spec.Selector)
	assert.Equal(t, "http", m.service.Spec.Ports[0].TargetPort.String())
	require.NotNil(t, m.secret)
	assert.Empty(t, m.secret.StringData, "no secret given, none stored")
	require.NotNil(t, m.pdb)
	assert.Equal(t, d.Spec.Selector.MatchLabels, m.pdb.Spec.Selector.MatchLabels)
	assert.Nil(t, m.ingress, "no Ingress by default")
	assert.Nil(t, m.policy, "no NetworkPolicy by default")
	assert.Nil(t, m.serviceMonitor, "no ServiceMonitor by default")
	assert.Nil(t, m.prometheusRule, "no PrometheusRule by default")
}

func TestChartThreeReplicasOnRedis(t *testing.T) {
	m := decode(t, template(t, "-f", threeReplicas))
	d := m.deployment
	assert.Equal(t, int32(3), *d.Spec.Replicas)
	assert.Equal(t, "registry.example.com/presenced:1.0.0", d.Spec.Template.Spec.Containers[0].Image)
	vars := env(t, d)
	// Numbers as the server parses them: a values file's 1048576 is a float
	// to Helm, and printed as it comes it would read 1.048576e+06.
	for name, want := range map[string]string{
		"PRESENCED_TICK":        "500ms",
		"PRESENCED_SLOTS":       "61",
		"PRESENCED_QUEUE_BYTES": "1048576",
		"PRESENCED_FRAME_RATE":  "12.5",
		"PRESENCED_WEBHOOK":     "secret:webhook-url",
		"PRESENCED_REDIS":       "secret:redis-url",
	} {
		assert.Equal(t, want, vars[name], name)
	}
	require.NotNil(t, m.secret)
	assert.Equal(t, map[string]string{
		"jwt-secret":     "change-me",
		"api-key":        "change-me-too",
		"webhook-secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"webhook-url":    "https://presenced:hook-password@backend.example.com/presence",
		"redis-url":      "redis://:redis-password@redis-sentinel:26379?master_name=mymaster&addr=redis-sentinel-2:26379",
	}, m.secret.StringData)
	deployment, err := yaml.Marshal(d)
	require.NoError(t, err)
	for key, value := range m.secret.StringData {
		assert.NotContains(t, string(deployment), value, "the Deployment holds the Secret's %s", key)
	}
	require.NotNil(t, m.pdb)
	assert.Equal(t, 1, m.pdb.Spec.MaxUnavailable.IntValue())
}

func TestChartRefusesReplicasWithoutRedis(t *testing.T) {
	_, err := run(helm(t), "template", "presenced", chart, "--set", "replicaCount=3", "--set", "secrets.jwtSecret=s")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "replicaCount > 1 needs redis.url")

	// A Secret of one's own may hold the Redis URL.
	m := decode(t, template(t, "--set", "replicaCount=3", "--set", "secrets.existingSecret=mine"))
	assert.Nil(t, m.secret, "no Secret made beside the given one")
	for _, e := range m.deployment.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			assert.Equal(t, "mine", e.ValueFrom.SecretKeyRef.Name, e.Name)
		}
	}
}

// chartSet are the settings the chart sets itself, with where from.
var chartSet = map[string]string{
	"PRESENCED_ADDR":           "port",
	"PRESENCED_NODE":           "the pod's name",
	"PRESENCED_JWT_SECRET":     "secrets.jwtSecret",
	"PRESENCED_API_KEY":        "secrets.apiKey",
	"PRESENCED_WEBHOOK_SECRET": "secrets.webhookSecret",
	"PRESENCED_REDIS":          "redis.url",
	"PRESENCED_WEBHOOK":        "webhook.url",
	"PRESENCED_JWKS_URL":       "jwksUrl",
	"PRESENCED_JWT_PUBLIC_KEY": "jwtPublicKey",
}

// notSettings are the server's flags that are not settings of a running server.
var notSettings = []string{"PRESENCED_VERSION"}

// TestChartCoversEverySetting reads the server's variables from its -h and
// sets every one of the chart's settings: each variable must be passed, by a
// value under settings or by the chart itself, and each value must be one.
func TestChartCoversEverySetting(t *testing.T) {
	// The usage goes to standard error.
	usage, err := exec.Command(presenced(t), "-h").CombinedOutput()
	require.NoError(t, err)
	out := string(usage)
	var server []string
	for _, m := range regexp.MustCompile(`\(\$(PRESENCED_[A-Z0-9_]+)\)`).FindAllStringSubmatch(out, -1) {
		if !slices.Contains(notSettings, m[1]) {
			server = append(server, m[1])
		}
	}
	require.Greater(t, len(server), 20, "variables in presenced -h:\n%s", out)

	var values struct{ Settings map[string]any }
	raw, err := os.ReadFile(chart + "/values.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &values))
	args := []string{"--set", "redis.url=redis://r:6379", "--set", "jwksUrl=https://auth.example.com/jwks.json"}
	for name := range values.Settings {
		args = append(args, "--set", fmt.Sprintf("settings.%s=1", name))
	}
	vars := env(t, decode(t, template(t, args...)).deployment)
	// The sources of token keys exclude each other: the public key's
	// variable comes from a render of its own.
	maps.Copy(vars, env(t, decode(t, template(t, "--set", "redis.url=redis://r:6379",
		"--set", "jwtPublicKey=-----BEGIN PUBLIC KEY-----")).deployment))

	for _, v := range server {
		_, own := chartSet[v]
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(v, "PRESENCED_"), "_", "-"))
		_, valued := values.Settings[flag]
		assert.True(t, own != valued, "%s: want exactly one of a value settings.%s or the chart's own (own %v, value %v)", v, flag, own, valued)
		assert.Contains(t, vars, v, "the server's %s is not passed", v)
	}
	for name := range values.Settings {
		v := "PRESENCED_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		assert.Contains(t, server, v, "settings.%s is no setting of the server", name)
		assert.Equal(t, "1", vars[v], v)
	}
}
