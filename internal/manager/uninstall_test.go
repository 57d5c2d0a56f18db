package manager

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUninstallRefusalNamesEveryObjectAndTheWayBack(t *testing.T) {
	err := uninstallRefused([]Blocker{
		{Kind: "KVCachePoolBinding", Namespace: "team-a", Name: "team-a", Deleting: true},
		{Kind: "KVCacheBackend", Name: "mooncake-dram"},
	}, "kvcache-system/kvcache", 3)
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, "  KVCachePoolBinding team-a/team-a (deleting)\n  KVCacheBackend mooncake-dram\n")
	assert.Contains(t, msg, "helm rollback kvcache 3 -n kvcache-system")
	assert.False(t, strings.Contains(uninstallRefused(nil, "", 0).Error(), "helm rollback"), "no release, no rollback to name")
}
