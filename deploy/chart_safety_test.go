package deploy

import (
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// refusedNoAuth begins what the chart says when nothing checks a client.
const refusedNoAuth = "no way to check who a client is: set secrets.jwtSecret (HS256), jwksUrl or jwtPublicKey (RS256, ES256), or secrets.existingSecret"

// TestChartRefuses renders values the chart must refuse, each with the
// message that says what to set.
func TestChartRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"the defaults: demo mode on every interface", nil, refusedNoAuth},
		{"demo=false", []string{"--set", "demo=false"}, refusedNoAuth},
		{"an API key checks no client", []string{"--set", "secrets.apiKey=k"}, refusedNoAuth},
		{"the webhook URL as a plain setting", []string{"--set", "secrets.jwtSecret=s", "--set", "settings.webhook=https://u:p@backend/"},
			"settings.webhook is now webhook.url"},
		{"a Redis URL beside a Secret of one's own", []string{"--set", "secrets.existingSecret=mine", "--set", "redis.url=redis://:p@r:6379"},
			"redis.url would be dropped"},
		{"a JWT secret no Secret is made for", []string{"--set", "secrets.create=false", "--set", "secrets.jwtSecret=s"},
			"secrets.jwtSecret would be dropped"},
		{"two sources of token keys", []string{"--set", "secrets.jwtSecret=s", "--set", "jwksUrl=https://auth.example.com/jwks.json"},
			"give one of secrets.jwtSecret, jwksUrl and jwtPublicKey"},
		{"a NetworkPolicy letting nothing in", []string{"--set", "demo=true", "--set", "networkPolicy.enabled=true", "--set", "networkPolicy.allowSameNamespace=false"},
			"nothing could reach the pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(helm(t), append([]string{"template", "presenced", chart}, tc.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestChartAuth renders each way of checking clients: every one keeps the
// service-account token out of the pods and reads the secrets from the
// Secret named.
func TestChartAuth(t *testing.T) {
	const jwks = "https://auth.example.com/.well-known/jwks.json"
	for _, tc := range []struct {
		name   string
		args   []string
		secret map[string]string // the chart's Secret; nil: none made
		from   string            // the Secret the pods read
		jwks   bool              // PRESENCED_JWKS_URL passed
	}{
		{"demo", []string{"--set", "demo=true"}, map[string]string{}, "presenced", false},
		{"JWT secret", []string{"--set", "secrets.jwtSecret=s3cret"}, map[string]string{"jwt-secret": "s3cret"}, "presenced", false},
		{"JWKS", []string{"--set", "jwksUrl=" + jwks}, map[string]string{}, "presenced", true},
		{"a Secret of one's own", []string{"--set", "secrets.existingSecret=mine"}, nil, "mine", false},
		{"a Secret made beside the chart", []string{"--set", "secrets.create=false"}, nil, "presenced", false},
		{"a public key", []string{"--set", "jwtPublicKey=" + publicKey}, map[string]string{}, "presenced", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := decode(t, template(t, tc.args...))
			pod := m.deployment.Spec.Template.Spec
			require.NotNil(t, pod.AutomountServiceAccountToken)
			assert.False(t, *pod.AutomountServiceAccountToken)
			if tc.secret == nil {
				assert.Nil(t, m.secret)
			} else {
				require.NotNil(t, m.secret)
				assert.Equal(t, len(tc.secret), len(m.secret.StringData))
				for k, v := range tc.secret {
					assert.Equal(t, v, m.secret.StringData[k], k)
				}
			}
			vars := env(t, m.deployment)
			assert.Equal(t, "secret:jwt-secret", vars["PRESENCED_JWT_SECRET"])
			if tc.jwks {
				assert.Equal(t, jwks, vars["PRESENCED_JWKS_URL"])
			} else {
				assert.NotContains(t, vars, "PRESENCED_JWKS_URL")
			}
			for _, e := range pod.Containers[0].Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					assert.Equal(t, tc.from, e.ValueFrom.SecretKeyRef.Name, e.Name)
				}
			}
			if !slices.Contains(tc.args, "jwtPublicKey="+publicKey) {
				assert.Nil(t, m.configMap)
				assert.NotContains(t, vars, "PRESENCED_JWT_PUBLIC_KEY")
				return
			}
			// The key is public: a ConfigMap, mounted where the variable says.
			require.NotNil(t, m.configMap)
			assert.Equal(t, publicKey+"\n", m.configMap.Data["jwt-public-key.pem"])
			require.Len(t, pod.Volumes, 1)
			assert.Equal(t, m.configMap.Name, pod.Volumes[0].ConfigMap.Name)
			require.Len(t, pod.Containers[0].VolumeMounts, 1)
			mount := pod.Containers[0].VolumeMounts[0]
			assert.True(t, mount.ReadOnly)
			assert.Equal(t, mount.MountPath+"/jwt-public-key.pem", vars["PRESENCED_JWT_PUBLIC_KEY"])
		})
	}
}

// publicKey stands for a PEM public key: the chart passes it on as it is.
const publicKey = "-----BEGIN PUBLIC KEY-----"

// TestChartPutsNoDigestOfTheSecretOnThePods renders two sets of secrets:
// the Deployments must be the same, or whoever may read pods but not
// Secrets could test guesses of the secrets against what differs.
// rolloutToken is what rolls the pods.
func TestChartPutsNoDigestOfTheSecretOnThePods(t *testing.T) {
	secrets := func(v string) []string {
		return []string{
			"--set", "secrets.jwtSecret=jwt-" + v, "--set", "secrets.apiKey=key-" + v,
			"--set", "secrets.webhookSecret=hook-" + v, "--set", "webhook.url=https://u:" + v + "@backend/",
			"--set", "redis.url=redis://:" + v + "@redis:6379", "--set", "replicaCount=2",
		}
	}
	deployment := func(args ...string) string {
		m := decode(t, template(t, args...))
		for key, value := range m.deployment.Spec.Template.Annotations {
			assert.NotRegexp(t, regexp.MustCompile(`[0-9a-f]{32}`), value, "annotation %s looks like a digest", key)
		}
		out, err := yaml.Marshal(m.deployment)
		require.NoError(t, err)
		return string(out)
	}
	a, b := deployment(secrets("a")...), deployment(secrets("b")...)
	assert.Equal(t, a, b, "the Deployment changes with the secrets")

	rolled := deployment(append(secrets("b"), "--set", "rolloutToken=2")...)
	assert.NotEqual(t, b, rolled, "a new rolloutToken rolls the pods")
	assert.Contains(t, rolled, `presenced/rollout-token: "2"`)
}
