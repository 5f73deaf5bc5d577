package deploy

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A selector is one series selector of a query: a metric's name and the
// label values it asks for by equality (name{label="value"}).
type selector struct {
	name   string
	labels map[string]string
}

// promqlWords are PromQL's keywords and aggregators: names in a query that
// are no metric's.
var promqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`and or unless by without on ignoring group_left group_right bool offset
		sum min max avg count stddev stdvar topk bottomk quantile count_values group limitk limit_ratio
		inf nan atan2`) {
		promqlWords[w] = true
	}
}

// labelLists are the keywords followed by a list of label names in
// parentheses, which are no selectors.
var labelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

var (
	identRE   = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	numberRE  = regexp.MustCompile(`^(0x[0-9a-fA-F]+|[0-9][0-9a-zA-Z.]*([eE][-+]?[0-9]+)?)`)
	varRE     = regexp.MustCompile(`^\$(\{[^}]*\}|[a-zA-Z0-9_]+)`)
	matcherRE = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + `)\s*,?`)
)

// selectors returns the series selectors of a PromQL query, Grafana's
// variables ($name, ${name}, [[name]]) allowed. It is a lexer, not a
// parser: enough to find the metrics a query names, since the queries are
// also checked by the tools that run them.
func selectors(q string) ([]selector, error) {
	var out []selector
	for i := 0; i < len(q); {
		c := q[i]
		rest := q[i:]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(q, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '$':
			if v := varRE.FindString(rest); v != "" {
				i += len(v)
				continue
			}
			return nil, fmt.Errorf("offset %d: a lone $", i)
		case c == '[':
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return nil, fmt.Errorf("offset %d: [ without ]", i)
			}
			i += end + 1
		case c == '{':
			// A selector with no name: {__name__="..."} is not used here.
			sel, end, err := matchers(q, i)
			if err != nil {
				return nil, err
			}
			if name, ok := sel["__name__"]; ok {
				delete(sel, "__name__")
				out = append(out, selector{name, sel})
			} else {
				return nil, fmt.Errorf("offset %d: a selector without a metric name", i)
			}
			i = end
		case numberRE.MatchString(rest):
			i += len(numberRE.FindString(rest))
		case identRE.MatchString(rest):
			word := identRE.FindString(rest)
			i += len(word)
			next := strings.TrimLeft(q[i:], " \t\n\r")
			switch {
			case labelLists[strings.ToLower(word)]:
				if strings.HasPrefix(next, "(") {
					end := strings.IndexByte(next, ')')
					if end < 0 {
						return nil, fmt.Errorf("%s ( without )", word)
					}
					i = len(q) - len(next) + end + 1
				}
			case promqlWords[strings.ToLower(word)]:
			case strings.HasPrefix(next, "("): // a function
			default:
				sel := selector{name: word, labels: map[string]string{}}
				if strings.HasPrefix(next, "{") {
					labels, end, err := matchers(q, len(q)-len(next))
					if err != nil {
						return nil, err
					}
					sel.labels, i = labels, end
				}
				out = append(out, sel)
			}
		default:
			i++ // an operator, a parenthesis, a comma
		}
	}
	return out, nil
}

// skipString returns the offset past the string literal that starts at i.
func skipString(q string, i int) (int, error) {
	quote := q[i]
	for j := i + 1; j < len(q); j++ {
		switch {
		case q[j] == '\\' && quote != '`':
			j++
		case q[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("offset %d: unterminated string", i)
}

// matchers reads the label matchers in braces at i and returns those that
// ask for a value by equality, without a Grafana variable, and the offset
// past the closing brace.
func matchers(q string, i int) (map[string]string, int, error) {
	labels := map[string]string{}
	j := i + 1
	for {
		rest := q[j:]
		if t := strings.TrimLeft(rest, " \t\n\r"); strings.HasPrefix(t, "}") {
			return labels, j + len(rest) - len(t) + 1, nil
		}
		m := matcherRE.FindStringSubmatch(rest)
		if m == nil {
			return nil, 0, fmt.Errorf("offset %d: not a label matcher: %.30q", j, rest)
		}
		value := m[3][1 : len(m[3])-1]
		if m[2] == "=" && !strings.Contains(value, "$") {
			labels[m[1]] = value
		}
		j += len(m[0])
	}
}

func TestSelectors(t *testing.T) {
	for _, c := range []struct {
		query string
		want  []selector
	}{
		{`up`, []selector{{"up", map[string]string{}}}},
		{`presenced_cluster_redis_up == 0`, []selector{{"presenced_cluster_redis_up", map[string]string{}}}},
		{`sum by (instance, reason) (rate(presenced_closes_total{reason="slow", instance=~"$instance"}[$__rate_interval]))`,
			[]selector{{"presenced_closes_total", map[string]string{"reason": "slow"}}}},
		{`histogram_quantile(0.99, sum without (type) (rate(a_bucket{job='x'}[5m] offset 1h))) > 0.5 * b`,
			[]selector{{"a_bucket", map[string]string{"job": "x"}}, {"b", map[string]string{}}}},
		{"x / on(instance) group_left(node) y{l!=\"}\",m=`v`} or z # z is a comment\n", []selector{
			{"x", map[string]string{}}, {"y", map[string]string{"m": "v"}}, {"z", map[string]string{}}}},
		{`{__name__="a", b="c"} and 1e3 and Inf`, []selector{{"a", map[string]string{"b": "c"}}}},
		{`rate(r:record:rate5m{instance="${node}"}[1m])`, []selector{{"r:record:rate5m", map[string]string{}}}},
	} {
		got, err := selectors(c.query)
		require.NoError(t, err, c.query)
		assert.Equal(t, c.want, got, c.query)
	}
	for _, bad := range []string{`a{b="c"`, `a{b}`, `"open`, `rate(x[5m)`, `{b="c"}`} {
		_, err := selectors(bad)
		assert.Error(t, err, bad)
	}
}
