package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The habits of kubectl and helm users: --version, a command list of what a user runs, and
// examples in every user command's help.
func TestVersionFlagAndCommand(t *testing.T) {
	code, flag, _ := kvcache(t, "", "--version")
	require.Equal(t, 0, code)
	code, cmd, _ := kvcache(t, "", "version")
	require.Equal(t, 0, code)
	assert.Equal(t, cmd, flag, "--version prints what version prints")
	assert.True(t, strings.HasPrefix(flag, version), "the release version comes first: %q", flag)
	if version == "dev" {
		assert.Contains(t, flag, "built with go", "a build without a release version says what built it: %q", flag)
	}
}

func TestTheCommandListHoldsWhatAUserRuns(t *testing.T) {
	code, out, _ := kvcache(t, "", "--help")
	require.Equal(t, 0, code)
	list := out[strings.Index(out, "Available Commands:"):strings.Index(out, "Flags:")]
	for _, c := range []string{"render", "inject", "check", "manager", "version"} {
		assert.Contains(t, list, "\n  "+c+" ", "%s is listed", c)
	}
	for _, c := range storePodCommands {
		assert.NotContains(t, list, "\n  "+c+" ", "%s, which store Pods run, is not listed", c)
		code, help, errOut := kvcache(t, "", c, "--help")
		assert.Equal(t, 0, code, "%s --help still answers: %s", c, errOut)
		assert.Contains(t, help, "Usage:")
	}
	assert.Contains(t, out, "(elect, copy-self, drain-member, member-run) are not listed", "the root help says where they went")
}

func TestEveryUserCommandHasExamples(t *testing.T) {
	for _, c := range []string{"render", "inject", "check", "manager"} {
		code, out, _ := kvcache(t, "", c, "--help")
		require.Equal(t, 0, code)
		i := strings.Index(out, "Examples:\n")
		require.GreaterOrEqual(t, i, 0, "%s --help has examples", c)
		assert.Regexp(t, `\n  kvcache `+c+`[ \n]`, out[i:], "%s --help's examples run it", c)
	}
}

// An opt-in on a Deployment's own metadata: inject passes the file through unchanged, as the
// webhook would leave the Pods, and says where the label and annotations belong.
func TestInjectNamesAnOptInOnTheWorkloadItself(t *testing.T) {
	in := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: chat
  namespace: team-a
  labels: {kvcache.gpustack.ai/inject: "true"}
spec:
  selector: {matchLabels: {app: chat}}
  template:
    metadata: {labels: {app: chat}}
    spec:
      containers: [{name: server, image: vllm/vllm-openai:v0.29.0, command: [vllm]}]
`
	code, out, errOut := kvcache(t, in, "inject", "-f", "-")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "name: chat")
	assert.NotContains(t, out, "kvcache.gpustack.ai/injected")
	assert.Contains(t, errOut, "warning: Deployment/chat: the Deployment's own metadata carries the label kvcache.gpustack.ai/inject: \"true\"")
	assert.Contains(t, errOut, "under spec.template.metadata.labels")
}
