package analysis

import (
	"strings"
	"testing"
	"time"
)

func TestBurnRuleThreshold(t *testing.T) {
	r := BurnRule{Long: time.Hour, Short: 5 * time.Minute, Burn: 14.4}
	for _, c := range []struct{ budget, want float64 }{{0.001, 14.4}, {0.01, 14.4}, {0.05, 10}, {0.1, 5}} {
		if got := r.Threshold(c.budget); got != c.want {
			t.Errorf("threshold at budget %v = %v, want %v", c.budget, got, c.want)
		}
	}
	if d := r.Describe(0.05); !strings.Contains(d, "at least 50 % of requests miss it (burn 10×, capped from 14×)") {
		t.Errorf("Describe = %q", d)
	}
	rules, err := ParseBurnRules("1h/5m:14.4, 6h/30m:6, 24h/2h:3")
	if err != nil || FormatBurnRules(rules) != "1h/5m:14.4, 6h/30m:6, 1d/2h:3" {
		t.Errorf("round trip: %v %v", rules, err)
	}
	// What FormatBurnRules writes is read back (a day is written 1d).
	if again, err := ParseBurnRules(FormatBurnRules(rules)); err != nil || len(again) != 3 || again[2].Long != 24*time.Hour {
		t.Errorf("reading %q back: %v %v", FormatBurnRules(rules), again, err)
	}
	for _, bad := range []string{"1h:14", "5m/1h:2", "1h/5m:0", "1h/5m:x", "30d/1h:1"} {
		if _, err := ParseBurnRules(bad); err == nil {
			t.Errorf("ParseBurnRules(%q) accepted", bad)
		}
	}
}
