package prometheus_test

import (
	"os/exec"
	"testing"
)

// TestRulesPassPromtool: the rules load (promtool check rules) and their
// unit tests pass (promtool test rules rules_test.yml): the recording
// rules' values on unit-test series and each alert firing when it should.
func TestRulesPassPromtool(t *testing.T) {
	promtool := needPromtool(t)
	for _, args := range [][]string{{"check", "rules", "rules.yml"}, {"test", "rules", "rules_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
