package deploy

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// demo is the one value the chart needs, for the tests of what else it renders.
var demo = []string{"--set", "demo=true"}

func TestChartIngress(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		hosts []string
	}{
		{"every host", nil, []string{""}},
		{"two hosts with TLS", []string{
			"--set", "ingress.className=nginx",
			"--set", "ingress.hosts={presence.example.com,presence.example.org}",
			"--set-json", `ingress.tls=[{"secretName":"presence-tls","hosts":["presence.example.com"]}]`,
		}, []string{"presence.example.com", "presence.example.org"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := decode(t, template(t, append(append(demo, "--set", "ingress.enabled=true"), tc.args...)...))
			ing := m.ingress
			require.NotNil(t, ing)
			var hosts []string
			for _, rule := range ing.Spec.Rules {
				hosts = append(hosts, rule.Host)
				require.NotNil(t, rule.HTTP)
				require.Len(t, rule.HTTP.Paths, 1)
				p := rule.HTTP.Paths[0]
				assert.Equal(t, "/", p.Path)
				assert.Equal(t, networkingv1.PathTypePrefix, *p.PathType)
				assert.Equal(t, m.service.Name, p.Backend.Service.Name)
				assert.Equal(t, "http", p.Backend.Service.Port.Name, "the Service's port, whatever its number")
			}
			assert.Equal(t, tc.hosts, hosts)
			if len(tc.args) > 0 {
				assert.Equal(t, "nginx", *ing.Spec.IngressClassName)
				assert.Equal(t, []networkingv1.IngressTLS{{SecretName: "presence-tls", Hosts: []string{"presence.example.com"}}}, ing.Spec.TLS)
			}
			// An idle WebSocket must outlive the ring's timeout, 30 s by
			// default, and ingress-nginx's 60 s would do only just.
			for _, a := range []string{"proxy-read-timeout", "proxy-send-timeout"} {
				s, err := strconv.Atoi(ing.Annotations["nginx.ingress.kubernetes.io/"+a])
				require.NoError(t, err, a)
				assert.GreaterOrEqual(t, s, 600, a)
			}
			assert.Equal(t, "off", ing.Annotations["nginx.ingress.kubernetes.io/proxy-buffering"], "a streamed response passes as written")
		})
	}
}

func TestChartNetworkPolicy(t *testing.T) {
	sameNamespace := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{}}
	ingressNginx := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": "ingress-nginx"}}}
	dns := networkingv1.NetworkPolicyEgressRule{Ports: []networkingv1.NetworkPolicyPort{
		{Protocol: ptr(corev1.ProtocolUDP), Port: ptr(intstr.FromInt32(53))}}}
	const fromNginx = `networkPolicy.from=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"ingress-nginx"}}}]`
	for _, tc := range []struct {
		name   string
		args   []string
		from   []networkingv1.NetworkPolicyPeer
		egress []networkingv1.NetworkPolicyEgressRule
	}{
		{"the namespace", nil, []networkingv1.NetworkPolicyPeer{sameNamespace}, nil},
		{"and the Ingress controller", []string{"--set-json", fromNginx}, []networkingv1.NetworkPolicyPeer{sameNamespace, ingressNginx}, nil},
		{"the Ingress controller only", []string{"--set", "networkPolicy.allowSameNamespace=false", "--set-json", fromNginx},
			[]networkingv1.NetworkPolicyPeer{ingressNginx}, nil},
		{"egress limited", []string{"--set-json", `networkPolicy.egress=[{"ports":[{"protocol":"UDP","port":53}]}]`},
			[]networkingv1.NetworkPolicyPeer{sameNamespace}, []networkingv1.NetworkPolicyEgressRule{dns}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := decode(t, template(t, append(append(demo, "--set", "networkPolicy.enabled=true"), tc.args...)...))
			np := m.policy
			require.NotNil(t, np)
			assert.Equal(t, m.deployment.Spec.Selector.MatchLabels, np.Spec.PodSelector.MatchLabels)
			types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			if tc.egress != nil {
				types = append(types, networkingv1.PolicyTypeEgress)
			}
			assert.Equal(t, types, np.Spec.PolicyTypes)
			// One rule, to the pods' port, from the peers named: a rule
			// without from would let anyone in.
			assert.Equal(t, []networkingv1.NetworkPolicyIngressRule{{
				From:  tc.from,
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr(corev1.ProtocolTCP), Port: ptr(intstr.FromString("http"))}},
			}}, np.Spec.Ingress)
			assert.Equal(t, tc.egress, np.Spec.Egress)
		})
	}
}

func TestChartServiceMonitor(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		auth map[string]any // the endpoint's authorization; nil: none
	}{
		{"no API key", nil, nil},
		{"an API key", []string{"--set", "secrets.apiKey=k"},
			map[string]any{"type": "apikey", "credentials": map[string]any{"name": "presenced", "key": "api-key"}}},
		{"a Secret of one's own", []string{"--set", "secrets.existingSecret=mine"},
			map[string]any{"type": "apikey", "credentials": map[string]any{"name": "mine", "key": "api-key"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(demo, "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.interval=15s",
				"--set", "serviceMonitor.labels.release=kube-prometheus-stack"), tc.args...)
			m := decode(t, template(t, args...))
			sm := m.serviceMonitor
			require.NotNil(t, sm)
			assert.Equal(t, "kube-prometheus-stack", sm.GetLabels()["release"])
			selector, _, err := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			require.NoError(t, err)
			require.NotEmpty(t, selector)
			for k, v := range selector {
				assert.Equal(t, v, m.service.Labels[k], "the ServiceMonitor selects the Service by %s", k)
			}
			// The job is named by a label of the Service, which the
			// rules' PresencedNodeDown must match.
			jobLabel, _, err := unstructured.NestedString(sm.Object, "spec", "jobLabel")
			require.NoError(t, err)
			assert.Regexp(t, regexp.MustCompile(`^presenced.*$`), m.service.Labels[jobLabel], "job label %q", jobLabel)

			endpoints, _, err := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			require.NoError(t, err)
			require.Len(t, endpoints, 1)
			e := endpoints[0].(map[string]any)
			assert.Equal(t, "http", e["port"])
			assert.Equal(t, "/metrics", e["path"])
			assert.Equal(t, "15s", e["interval"])
			if tc.auth == nil {
				assert.NotContains(t, e, "authorization")
			} else {
				assert.Equal(t, tc.auth, e["authorization"])
			}
		})
	}
}

// TestChartPrometheusRule checks the PrometheusRule holds the groups of
// deploy/prometheus's rules, which promtool checks and tests.
func TestChartPrometheusRule(t *testing.T) {
	m := decode(t, template(t, append(demo, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=kube-prometheus-stack")...))
	pr := m.prometheusRule
	require.NotNil(t, pr)
	assert.Equal(t, "kube-prometheus-stack", pr.GetLabels()["release"])
	var rules map[string]any
	raw, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	require.NotEmpty(t, rules["groups"])
	assert.Equal(t, rules, pr.Object["spec"], "the spec is the rules file, templates and all")
}

func ptr[T any](v T) *T { return &v }
